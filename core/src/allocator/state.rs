//! The device-facing layer behind the allocator's one lock: raw segments from the backend,
//! stream uses and their events, the trace, and the call counters. Every block decision
//! (best fit, split, merge, figures) is the index's (`index/`); this layer calls it and
//! never the other way round.
//!
//! # Where the device is called with the lock held
//! As in PyTorch (one lock, callbacks and observers outside it): `malloc` and `free` of raw
//! segments, `synchronize_stream` before a segment is released, `create_event` /
//! `record_event` when a block with stream uses is freed, `query_event` in
//! `process_events`, `synchronize_event` / `synchronize_stream` when pending and
//! quarantined blocks are waited for, and `memory_info` for the per-process limit and the
//! out-of-memory report.

use std::collections::BTreeMap;
use std::mem;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::Backend;
use crate::error::BackendError;
use crate::ids::{AllocationId, StreamId};

use super::block::DeviceSlot;
use super::config::AllocatorConfig;
use super::events::EventPool;
use super::index::{BlockIndex, BlockRef, HandOut};
use super::sizes::PoolKind;
use super::stats::AllocatorStats;
use super::trace::{TraceAction, TraceBuffer};

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

/// Counters of calls and device operations (the figures of memory are the index's).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct CallCounts {
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    pub num_sync_all_streams: u64,
    pub num_device_alloc: u64,
    pub num_device_free: u64,
    pub reuse_events_created: u64,
    pub record_stream_calls: u64,
    pub erase_stream_calls: u64,
}

/// Everything the allocator lock protects.
pub(crate) struct State<B: Backend> {
    pub backend: Arc<B>,
    pub config: AllocatorConfig,
    pub index: BlockIndex,
    /// Device handles per slot of the index (grown on demand).
    pub dev: Vec<DeviceSlot<B>>,
    /// The allocation stream of every segment, by base address; synchronized before the
    /// segment is returned to the device.
    pub segment_streams: BTreeMap<u64, B::Stream>,
    pub events: EventPool<B>,
    /// Slots of pending-free blocks whose events are being waited for.
    pub pending: Vec<u32>,
    /// Events in flight over all pending blocks.
    pub pending_events: usize,
    /// Slots of quarantined blocks (see [`super::CachingAllocator`]'s docs).
    pub quarantined: Vec<u32>,
    pub counts: CallCounts,
    pub trace: TraceBuffer,
    /// Per-process limit in bytes, computed from the device total on first need.
    pub limit: Option<u64>,
    /// A backend failure met where it could not be returned (inside a drop); reported by the
    /// next `process_events`.
    pub deferred: Option<BackendError>,
    /// This allocator's current id space for [`AllocationId`]s (see `next_allocation_id`).
    pub allocator_serial: u64,
    /// Hand-outs in the current id space (the low bits of the next [`AllocationId`]).
    pub hand_outs: u64,
}

impl<B: Backend> State<B> {
    pub fn new(backend: Arc<B>, config: AllocatorConfig) -> Self {
        let trace = TraceBuffer::new(config.trace_capacity);
        State {
            backend,
            index: BlockIndex::new(config.max_split_size),
            config,
            dev: Vec::new(),
            segment_streams: BTreeMap::new(),
            events: EventPool::new(),
            pending: Vec::new(),
            pending_events: 0,
            quarantined: Vec::new(),
            counts: CallCounts::default(),
            trace,
            limit: None,
            deferred: None,
            allocator_serial: new_allocator_serial(),
            hand_outs: 0,
        }
    }

    /// The device handles of `slot`, created on first use.
    pub fn dev_mut(&mut self, slot: u32) -> &mut DeviceSlot<B> {
        let i = slot as usize;
        if i >= self.dev.len() {
            self.dev
                .resize_with(self.index.slot_capacity().max(i + 1), DeviceSlot::default);
        }
        &mut self.dev[i]
    }

    /// The device handles of `slot`, if any were ever created.
    pub fn dev(&self, slot: u32) -> Option<&DeviceSlot<B>> {
        self.dev.get(slot as usize)
    }

    /// True when the block in `slot` has no stream uses.
    #[inline]
    fn has_no_uses(&self, slot: u32) -> bool {
        self.dev(slot).is_none_or(|d| d.uses.is_empty())
    }

    /// Serves `req` from the cache (best fit), if a cached block fits.
    #[inline]
    pub fn serve(&mut self, req: &Request<'_, B>) -> Option<HandOut> {
        let slot = self.index.best_fit(req.stream_id, req.pool, req.size)?;
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
    pub fn free_user(&mut self, r: BlockRef) {
        let Some(slot) = self.index.drop_handle(r) else {
            return; // other handles remain
        };
        let b = self.index.block(slot);
        let (ptr, requested, stream) = (b.ptr, b.state.requested(), b.stream);
        self.trace
            .push(TraceAction::FreeRequested, ptr, requested, stream, None);
        if self.has_no_uses(slot) {
            self.release_to_pool(slot);
            return;
        }
        self.record_free_events(slot);
    }

    /// Records one event per stream that used the freed block in `slot`; the block waits in
    /// pending-free for them (or is freed at once when none was needed).
    #[cold]
    fn record_free_events(&mut self, slot: u32) {
        // Move the vectors out (keeping their capacity) to record events while borrowing the
        // backend and the event pool.
        let d = self.dev_mut(slot);
        let uses = mem::take(&mut d.uses);
        let mut events = mem::take(&mut d.events);
        let mut stuck = false;
        for (i, u) in uses.iter().enumerate() {
            if uses[..i].iter().any(|earlier| earlier.id == u.id) {
                continue; // one event per stream, however many owners
            }
            match self.events.record(&self.backend, &u.stream) {
                Ok(e) => {
                    events.push((u.id, e));
                    self.counts.reuse_events_created += 1;
                }
                // No event: wait for the stream now instead. If even that fails, the block
                // cannot be proven unused: quarantined.
                Err(err) => {
                    if let Err(sync_err) = self.backend.synchronize_stream(&u.stream) {
                        tracing::error!(%err, %sync_err, "memreuse allocator: cannot order a free after its stream uses; block quarantined");
                        self.deferred = Some(sync_err);
                        stuck = true;
                    }
                }
            }
        }
        let d = self.dev_mut(slot);
        d.uses = uses;
        d.events = events;
        if stuck {
            let d = &mut self.dev[slot as usize];
            for (_, e) in d.events.drain(..) {
                self.events.put(e);
            }
            self.index.quarantine(slot);
            self.quarantined.push(slot);
        } else if self.dev[slot as usize].events.is_empty() {
            self.release_to_pool(slot);
        } else {
            self.pending_events += self.dev[slot as usize].events.len();
            self.pending.push(slot);
        }
    }

    /// A pending-free or quarantined block (with no events left) becomes free and merges
    /// with its free neighbours.
    pub fn release_to_pool(&mut self, slot: u32) {
        if let Some(d) = self.dev.get_mut(slot as usize) {
            debug_assert!(d.events.is_empty());
            d.uses.clear();
        }
        let b = self.index.block(slot);
        let (ptr, requested, stream) = (b.ptr, b.state.requested(), b.stream);
        self.trace
            .push(TraceAction::FreeCompleted, ptr, requested, stream, None);
        self.index.release(slot);
    }

    /// Per-process limit in bytes, if `per_process_memory_fraction` is set.
    pub fn limit(&mut self) -> Result<Option<u64>, BackendError> {
        let Some(fraction) = self.config.per_process_memory_fraction else {
            return Ok(None);
        };
        if self.limit.is_none() {
            let total = self.backend.memory_info()?.total;
            self.limit = Some((total as f64 * fraction) as u64);
        }
        Ok(self.limit)
    }

    /// A new segment from the device for `req`, as a free block. `Ok(None)` when the device
    /// (or the per-process limit) says out of memory.
    pub fn alloc_segment(
        &mut self,
        req: &Request<'_, B>,
        is_retry: bool,
    ) -> Result<Option<u32>, BackendError> {
        if is_retry {
            self.counts.num_alloc_retries += 1;
        }
        let size = req.alloc_size;
        if let Some(limit) = self.limit()?
            && self
                .index
                .figures()
                .reserved_bytes
                .current()
                .saturating_add(size)
                > limit
        {
            return Ok(None);
        }
        let ptr = match self.backend.malloc(size) {
            Ok(p) => p.addr(),
            Err(e) if e.is_out_of_memory() => return Ok(None),
            Err(e) => return Err(e),
        };
        self.segment_streams.insert(ptr, req.stream.clone());
        self.counts.num_device_alloc += 1;
        self.trace
            .push(TraceAction::SegmentAlloc, ptr, size, req.stream_id, None);
        Ok(Some(self.index.add_segment(
            ptr,
            size,
            req.stream_id,
            req.pool,
        )))
    }

    /// Returns the free whole-segment block in `slot` to the device. The segment's stream is
    /// synchronized first (work enqueued before the last free may still use it). On a
    /// backend error nothing changes.
    pub fn release_segment(&mut self, slot: u32) -> Result<(), BackendError> {
        debug_assert!(self.index.is_free_segment(slot));
        let base = self.index.block(slot).ptr;
        if let Some(stream) = self.segment_streams.get(&base) {
            self.backend.synchronize_stream(stream)?;
        }
        self.backend.free(crate::ids::DevicePtr(base))?;
        let seg = self.index.remove_segment(slot);
        self.segment_streams.remove(&base);
        self.counts.num_device_free += 1;
        self.trace
            .push(TraceAction::SegmentFree, base, seg.size, seg.stream, None);
        Ok(())
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
            num_sync_all_streams: c.num_sync_all_streams,
            num_device_alloc: c.num_device_alloc,
            num_device_free: c.num_device_free,
            oversize_allocations: f.oversize_allocations.stat(),
            oversize_segments: f.oversize_segments.stat(),
            reuse_events_created: c.reuse_events_created,
            record_stream_calls: c.record_stream_calls,
            erase_stream_calls: c.erase_stream_calls,
            pending_free_bytes: f.pending_free_bytes,
            cached_free_bytes: f.cached_free_bytes,
            quarantined_bytes: f.quarantined_bytes,
            fragmentation: self.index.fragmentation(),
        }
    }
}
