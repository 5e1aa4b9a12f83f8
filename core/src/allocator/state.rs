//! The device-facing layer behind the allocator's one lock: raw segments from the backend,
//! the per-process limit, the trace and the call counters. Every block decision (best fit,
//! split, merge, figures, which blocks to release, unmap or spare) is the index's
//! (`index/`), and the pending-free lifecycle is owned by [`PendingFrees`]; this layer
//! carries their decisions out on the device and applies each [`Change`] of the pending
//! frees to the index. Neither the index nor the pending frees call this layer.
//!
//! # Where the device is called with the lock held
//! As in PyTorch (one lock, callbacks and observers outside it): `malloc` and `free` of raw
//! segments, `synchronize_stream` before a segment is released, `create_event` /
//! `record_event` when a block with stream uses is freed, `query_event` in
//! `process_events`, `synchronize_event` / `synchronize_stream` when pending and
//! quarantined blocks are waited for, and `memory_info` for the per-process limit and the
//! out-of-memory report.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::Backend;
use crate::error::BackendError;
use crate::ids::{AllocationId, StreamId, WorkId};

use super::alloc_error::AllocError;
use super::config::AllocatorConfig;
use super::expandable_segment::ExpandableSegment;
use super::index::{BlockIndex, BlockRef, HandOut, SlotState};
use super::pending::{Change, EraseOutcome, Freed, PendingFrees};
use super::pool::{DEFAULT_LANE, PoolTable, obtain_raw};
use super::segment_events::{EventQueue, SegmentEventKind};
use super::sizes::PoolKind;
use super::stats::AllocatorStats;
use super::stream_use::UseOwner;
use super::trace::{TraceAction, TraceBuffer};

/// What the allocator fixes at construction and holds once, outside its lock: the backend
/// and the configuration. The locked [`State`] borrows it for each call.
pub(crate) struct Setup<B: Backend> {
    pub backend: Arc<B>,
    pub config: AllocatorConfig,
}

/// One allocation request, rounded.
pub(crate) struct Request<'a, B: Backend> {
    pub stream: &'a B::Stream,
    pub stream_id: StreamId,
    /// Bytes the caller asked for.
    pub requested: u64,
    /// Block size after rounding.
    pub size: u64,
    pub pool: PoolKind,
    /// Segment size to ask the device for when nothing cached fits.
    pub alloc_size: u64,
    /// Memory-pool lane the request is served from (`DEFAULT_LANE` unless a pool scope or
    /// an explicit pool routes it; `pool/`).
    pub lane: u32,
}

/// High bits of an [`AllocationId`]: the allocator's serial.
const SERIAL_BITS: u32 = 24;
/// Low bits of an [`AllocationId`]: the hand-out count within one serial.
const COUNT_BITS: u32 = 64 - SERIAL_BITS;

/// A serial never handed out before in this process (one atomic per allocator, not per
/// allocation). Serial 0 is never used, so no composed id is 0.
fn new_allocator_serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed) & ((1 << SERIAL_BITS) - 1)
}

/// A device operation counted in [`CallCounts`] (through [`CallCounts::device_op`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum DeviceOp {
    /// A segment allocated, or an expandable segment grown (`num_device_alloc`).
    Alloc,
    /// A segment freed, or a range of an expandable segment unmapped (`num_device_free`).
    Free,
    /// One physical page mapped (`num_device_map`).
    Map,
    /// One physical page unmapped (`num_device_unmap`).
    Unmap,
}

/// Counters of calls and device operations (the figures of memory are the index's, the
/// event counters the pending frees'). Each counter has one writer: the device counters
/// are private, written only by [`CallCounts::device_op`] (ordinary and expandable
/// segments both count through it).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct CallCounts {
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    num_device_alloc: u64,
    num_device_free: u64,
    num_device_map: u64,
    num_device_unmap: u64,
    pub record_stream_calls: u64,
    pub erase_stream_calls: u64,
}

impl CallCounts {
    /// Counts one device operation: the one writer of the device counters.
    #[inline]
    pub fn device_op(&mut self, op: DeviceOp) {
        let counter = match op {
            DeviceOp::Alloc => &mut self.num_device_alloc,
            DeviceOp::Free => &mut self.num_device_free,
            DeviceOp::Map => &mut self.num_device_map,
            DeviceOp::Unmap => &mut self.num_device_unmap,
        };
        *counter += 1;
    }
}

/// Everything the allocator lock protects.
pub(crate) struct State<B: Backend> {
    pub index: BlockIndex,
    /// Stream uses, pending-free blocks, their events and quarantine.
    pub pending: PendingFrees<B>,
    /// The allocation stream of every segment, by base address; synchronized before the
    /// segment is returned to the device.
    pub segment_streams: BTreeMap<u64, B::Stream>,
    pub counts: CallCounts,
    pub trace: TraceBuffer,
    /// Per-process limit in bytes, computed from the device total on first need.
    limit: Option<u64>,
    /// A backend failure met where it could not be returned (inside a drop); reported by the
    /// next `process_events`.
    pub deferred: Option<BackendError>,
    /// This allocator's current id space for [`AllocationId`]s (see `next_allocation_id`).
    allocator_serial: u64,
    /// Hand-outs in the current id space (the low bits of the next [`AllocationId`]).
    hand_outs: u64,
    /// Expandable segments by base address (`expandable.rs`; empty unless
    /// `expandable_segments:True`).
    pub expandable: BTreeMap<u64, ExpandableSegment<B::Stream>>,
    /// Memory pools and their routing scopes (`pool/`).
    pub pools: PoolTable,
    /// Segment events waiting for delivery outside the lock (`segment_events.rs`).
    pub seg_events: EventQueue,
}

/// One warning per quarantined block: the failure was already returned by the operation
/// that failed; this says what it costs the allocator.
fn log_quarantine(error: &BackendError, bytes: u64) {
    tracing::warn!(
        %error,
        bytes,
        "memreuse allocator: a freed block whose stream work failed is quarantined \
         (not reused until its streams synchronize; see quarantined_bytes)"
    );
}

/// A block that waits for nothing any more goes back to its pool and merges with its free
/// neighbours (the `free_completed` trace entry first).
#[inline]
fn to_pool(index: &mut BlockIndex, trace: &mut TraceBuffer, slot: u32) {
    let b = index.block(slot);
    let (ptr, requested, stream) = (b.ptr, b.state.requested(), b.stream);
    trace.push(TraceAction::FreeCompleted, ptr, requested, stream, None);
    index.release(slot);
}

/// Applies one [`Change`] of the pending frees to the index: the one place where a block
/// leaves the pending-free lifecycle.
fn settle(index: &mut BlockIndex, trace: &mut TraceBuffer, change: Change) {
    match change {
        Change::Free(slot) => to_pool(index, trace, slot),
        Change::Quarantined { slot, error } => {
            log_quarantine(&error, index.block(slot).size);
            index.quarantine(slot);
        }
    }
}

impl<B: Backend> State<B> {
    pub fn new(config: &AllocatorConfig) -> Self {
        let trace = TraceBuffer::new(config.trace_capacity);
        let mut index = BlockIndex::new(config.max_split_size);
        index.set_expandable(config.expandable_segments);
        State {
            index,
            pending: PendingFrees::new(),
            segment_streams: BTreeMap::new(),
            counts: CallCounts::default(),
            trace,
            limit: None,
            deferred: None,
            allocator_serial: new_allocator_serial(),
            hand_outs: 0,
            expandable: BTreeMap::new(),
            pools: PoolTable::default(),
            seg_events: EventQueue::default(),
        }
    }

    /// Serves `req` from the cache (best fit), if a cached block fits.
    #[inline]
    pub fn serve(&mut self, req: &Request<'_, B>) -> Option<HandOut> {
        let slot = self
            .index
            .best_fit_in(req.stream_id, req.lane, req.pool, req.size)?;
        Some(self.hand_out(slot, req))
    }

    /// Hands out the free block in `slot` for `req` (split by the index's rules).
    #[inline]
    pub fn hand_out(&mut self, slot: u32, req: &Request<'_, B>) -> HandOut {
        let out = self.index.hand_out(slot, req.size, req.requested);
        self.trace.push(
            TraceAction::Alloc,
            out.ptr,
            req.requested,
            req.stream_id,
            None,
        );
        out
    }

    /// A fresh [`AllocationId`] for a hand-out, under the lock: no atomic on the hot path.
    /// The id is this allocator's serial (high [`SERIAL_BITS`] bits) and its hand-out count
    /// (low bits); when the count space is used up the allocator takes a new serial, so ids
    /// stay unique in the process across allocators (until 2^24 serials were taken).
    #[inline]
    pub fn next_allocation_id(&mut self) -> AllocationId {
        self.hand_outs += 1;
        if self.hand_outs >> COUNT_BITS != 0 {
            self.allocator_serial = new_allocator_serial();
            self.hand_outs = 1;
        }
        AllocationId((self.allocator_serial << COUNT_BITS) | self.hand_outs)
    }

    /// The last storage handle of `r` dropped: into pending-free when other streams used
    /// the block, else straight back to the free set.
    #[inline]
    pub fn free_user(&mut self, su: &Setup<B>, r: BlockRef) {
        let Some(slot) = self.index.drop_handle(r) else {
            return; // other handles remain
        };
        let b = self.index.block(slot);
        let (ptr, requested, stream) = (b.ptr, b.state.requested(), b.stream);
        self.trace
            .push(TraceAction::FreeRequested, ptr, requested, stream, None);
        if self.pending.has_no_uses(slot) {
            self.release_to_pool(slot);
            return;
        }
        match self
            .pending
            .free(&su.backend, slot, self.index.slot_capacity())
        {
            Freed::Now => self.release_to_pool(slot),
            Freed::Pending => {}
            Freed::Quarantined(error) => {
                self.index.quarantine(slot);
                self.deferred = Some(error);
            }
        }
    }

    /// A block that waits for nothing (freed without stream uses, or its pending-free
    /// lifecycle ended) becomes free and merges with its free neighbours.
    #[inline]
    pub fn release_to_pool(&mut self, slot: u32) {
        to_pool(&mut self.index, &mut self.trace, slot);
    }

    /// Adds a use of `stream` by `owner` to the allocated block `r`; a no-op on the block's
    /// own stream, for a use already held by that owner, and for a stale `r`.
    pub fn record_use(&mut self, r: BlockRef, stream: &B::Stream, id: StreamId, owner: UseOwner) {
        if self
            .index
            .resolve(r)
            .is_none_or(|b| !matches!(b.state, SlotState::Allocated { .. }) || b.stream == id)
        {
            return;
        }
        let capacity = self.index.slot_capacity();
        self.pending.record_use(r.id, capacity, stream, id, owner);
    }

    /// Removes `work`'s use of stream `id` from the block `r`, if the block's allocation
    /// stream is `current` (the pending frees decide what that frees).
    pub fn erase(
        &mut self,
        r: BlockRef,
        work: WorkId,
        id: StreamId,
        current: StreamId,
    ) -> EraseOutcome {
        let Some(b) = self.index.resolve(r) else {
            return EraseOutcome::StaleBlock;
        };
        if b.stream != current {
            return EraseOutcome::NotCurrentStream;
        }
        let pending = matches!(b.state, SlotState::PendingFree { .. });
        let outcome = self.pending.erase(r.id, work, id, pending);
        if outcome == EraseOutcome::FreedNow {
            self.release_to_pool(r.id);
        }
        outcome
    }

    /// Frees every pending block whose events all completed (PyTorch's `process_events`).
    /// A block whose event query fails is quarantined (and logged); every other pending
    /// block is still processed.
    pub fn process_events(&mut self, su: &Setup<B>) {
        let (index, trace) = (&mut self.index, &mut self.trace);
        self.pending
            .poll(&su.backend, |change| settle(index, trace, change));
    }

    /// Waits for every pending event on the host and frees the blocks
    /// (PyTorch's `synchronize_and_free_events`; counted in `num_sync_all_streams`). A block
    /// whose event cannot be waited for is quarantined (and logged); every other block is
    /// freed.
    pub fn synchronize_and_free_events(&mut self, su: &Setup<B>) {
        let (index, trace) = (&mut self.index, &mut self.trace);
        self.pending
            .synchronize_all(&su.backend, |change| settle(index, trace, change));
    }

    /// Synchronizes the streams that used each quarantined block; a block whose streams all
    /// synchronized returns to the pool. Returns the bytes returned, or the first failure
    /// (the blocks it concerns stay quarantined; the others are still tried).
    pub fn release_quarantined(&mut self, su: &Setup<B>) -> Result<u64, BackendError> {
        let (index, trace) = (&mut self.index, &mut self.trace);
        let mut released = 0;
        let failed = self.pending.release_quarantined(&su.backend, |change| {
            if let Change::Free(slot) = change {
                released += index.block(slot).size;
            }
            settle(index, trace, change);
        });
        failed.map_or(Ok(released), Err)
    }

    /// Per-process limit in bytes, if `per_process_memory_fraction` is set.
    pub fn limit(&mut self, su: &Setup<B>) -> Result<Option<u64>, BackendError> {
        let Some(fraction) = su.config.per_process_memory_fraction else {
            return Ok(None);
        };
        if self.limit.is_none() {
            let total = su.backend.memory_info()?.total;
            self.limit = Some((total as f64 * fraction) as u64);
        }
        Ok(self.limit)
    }

    /// The per-process limit check, for a new segment or a growth of an expandable one:
    /// true when reserving `bytes` more would pass the limit.
    pub fn over_limit(&mut self, su: &Setup<B>, bytes: u64) -> Result<bool, BackendError> {
        Ok(self.limit(su)?.is_some_and(|limit| {
            self.index
                .figures()
                .reserved_bytes
                .current()
                .saturating_add(bytes)
                > limit
        }))
    }

    /// A new segment for `req`, as a free block: from the device, or from the source of
    /// the request's memory pool. `Ok(None)` when the device (or the per-process limit, or
    /// the pool's source) says out of memory. Under `expandable_segments:True` a pool
    /// without a source gets expandable segments of its own, and a pool with one gets
    /// ordinary segments (PyTorch's `is_expandable_segments_active`).
    pub fn alloc_segment(
        &mut self,
        su: &Setup<B>,
        req: &Request<'_, B>,
        is_retry: bool,
    ) -> Result<Option<u32>, AllocError> {
        if is_retry {
            self.counts.num_alloc_retries += 1;
        }
        // PyTorch's `alloc_block` checks the limit against the request's allocation size
        // before either path, also when an expandable growth maps more or less than that.
        let size = req.alloc_size;
        if self.over_limit(su, size)? {
            return Ok(None);
        }
        if su.config.expandable_segments && !self.pools.has_source(req.lane) {
            return Ok(self.alloc_expandable(su, req)?);
        }
        let source = self.segment_source(req.lane);
        let Some(ptr) = obtain_raw(&*su.backend, source.as_ref(), size)? else {
            return Ok(None);
        };
        Ok(Some(self.install_segment(req, ptr, size)))
    }

    /// Adds the raw memory at `ptr` (`size` bytes, just obtained for `req`) as a new
    /// segment of the request's lane, one free block; returns its slot.
    pub fn install_segment(&mut self, req: &Request<'_, B>, ptr: u64, size: u64) -> u32 {
        self.segment_streams.insert(ptr, req.stream.clone());
        self.counts.device_op(DeviceOp::Alloc);
        if req.lane != DEFAULT_LANE {
            self.count_pool_segment(req.lane, size, true);
        }
        self.note_segment(
            Some(TraceAction::SegmentAlloc),
            SegmentEventKind::SegmentAlloc,
            (ptr, size),
            req.stream_id,
            req.lane,
        );
        self.index
            .add_segment_in(ptr, size, req.stream_id, req.lane, req.pool)
    }

    /// Returns the free whole-segment block in `slot` to the device. The segment's stream is
    /// synchronized first (work enqueued before the last free may still use it). On a
    /// backend error nothing changes.
    pub fn release_segment(&mut self, su: &Setup<B>, slot: u32) -> Result<(), BackendError> {
        debug_assert!(self.index.is_free_segment(slot));
        let base = self.index.block(slot).ptr;
        if let Some(stream) = self.segment_streams.get(&base) {
            su.backend.synchronize_stream(stream)?;
        }
        let size = self.index.block(slot).size;
        let lane = self
            .index
            .segments()
            .get(&base)
            .map_or(DEFAULT_LANE, |s| s.lane);
        self.free_raw(su, lane, base, size)?;
        let seg = self.index.remove_segment(slot);
        self.segment_streams.remove(&base);
        self.counts.device_op(DeviceOp::Free);
        if lane != DEFAULT_LANE {
            self.count_pool_segment(lane, size, false);
        }
        self.note_segment(
            Some(TraceAction::SegmentFree),
            SegmentEventKind::SegmentFree,
            (base, seg.size),
            seg.stream,
            lane,
        );
        Ok(())
    }

    /// Records a segment-level change of `range` (address, bytes) on `stream` in `lane`:
    /// its trace entry (if it has one) and, while anyone subscribes, its segment event.
    pub fn note_segment(
        &mut self,
        action: Option<TraceAction>,
        kind: SegmentEventKind,
        range: (u64, u64),
        stream: StreamId,
        lane: u32,
    ) {
        if let Some(action) = action {
            self.trace.push(action, range.0, range.1, stream, None);
        }
        if self.seg_events.on {
            let pool = self.pools.id_of(lane);
            self.seg_events.push(kind, pool, stream, range.0, range.1);
        }
    }

    /// The statistics: the index's figures, the call counters and the fragmentation.
    pub fn stats(&self) -> AllocatorStats {
        let f = self.index.figures();
        let c = &self.counts;
        AllocatorStats {
            allocation: f.allocation.stat_array(),
            segment: f.segment.stat_array(),
            active: f.active.stat_array(),
            inactive_split: f.inactive_split.stat_array(),
            allocated_bytes: f.allocated_bytes.stat_array(),
            reserved_bytes: f.reserved_bytes.stat_array(),
            active_bytes: f.active_bytes.stat_array(),
            inactive_split_bytes: f.inactive_split_bytes.stat_array(),
            requested_bytes: f.requested_bytes.stat_array(),
            num_alloc_retries: c.num_alloc_retries,
            num_ooms: c.num_ooms,
            num_sync_all_streams: self.pending.sync_all_calls(),
            num_device_alloc: c.num_device_alloc,
            num_device_free: c.num_device_free,
            num_device_map: c.num_device_map,
            num_device_unmap: c.num_device_unmap,
            oversize_allocations: f.oversize_allocations.stat(),
            oversize_segments: f.oversize_segments.stat(),
            reuse_events_created: self.pending.events_recorded(),
            record_stream_calls: c.record_stream_calls,
            erase_stream_calls: c.erase_stream_calls,
            pending_free_bytes: f.pending_free_bytes,
            cached_free_bytes: f.cached_free_bytes,
            quarantined_bytes: f.quarantined_bytes,
            fragmentation: self.index.fragmentation(),
        }
    }
}
