//! The allocator's state behind its one lock, and the block life cycle: hand-out with
//! split, free with pending events, return to the pool with merge.

use std::collections::BTreeMap;
use std::mem;
use std::sync::Arc;

use crate::backend::Backend;
use crate::error::BackendError;
use crate::ids::StreamId;

use super::block::{BlockRef, NewBlock, Slab, Status};
use super::config::AllocatorConfig;
use super::events::EventPool;
use super::pool::{BlockPool, PoolKey};
use super::sizes::{MAX_NON_SPLIT_ROUNDING, PoolKind, should_split};
use super::stats::AllocatorStats;
use super::trace::{TraceAction, TraceBuffer};

/// One raw device allocation, sub-divided into blocks.
pub(crate) struct Segment<B: Backend> {
    pub size: u64,
    /// The allocation stream; synchronized before the segment is returned to the device.
    pub stream: B::Stream,
    pub stream_id: StreamId,
    pub pool: PoolKind,
    /// Slot of the lowest block. Merges keep the lower block's slot, so it never changes.
    pub head: u32,
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
}

/// A block just handed out.
pub(crate) struct HandOut {
    pub block: BlockRef,
    pub ptr: u64,
    pub size: u64,
}

/// Everything the allocator lock protects.
pub(crate) struct State<B: Backend> {
    pub backend: Arc<B>,
    pub config: AllocatorConfig,
    pub slab: Slab<B>,
    pub small: BlockPool,
    pub large: BlockPool,
    /// Segments by base address.
    pub segments: BTreeMap<u64, Segment<B>>,
    pub events: EventPool<B>,
    /// Slots of pending-free blocks whose events are being waited for.
    pub pending: Vec<u32>,
    /// Events in flight over all pending blocks.
    pub pending_events: usize,
    pub stats: AllocatorStats,
    /// Slots of recently freed blocks parked unmerged, oldest first (see `bins.rs`).
    pub bins: Vec<u32>,
    /// Most blocks parked at once; 0 turns lazy coalescing off.
    pub bin_capacity: usize,
    pub trace: TraceBuffer,
    /// Number of allocate calls so far (the clock of garbage-collection ages).
    pub malloc_count: u64,
    /// Per-process limit in bytes, computed from the device total on first need.
    pub limit: Option<u64>,
    /// A backend failure met where it could not be returned (inside a drop); reported by the
    /// next `process_events`.
    pub deferred: Option<BackendError>,
}

impl<B: Backend> State<B> {
    pub fn new(backend: Arc<B>, config: AllocatorConfig) -> Self {
        let trace = TraceBuffer::new(config.trace_capacity);
        State {
            backend,
            config,
            slab: Slab::new(),
            small: BlockPool::default(),
            large: BlockPool::default(),
            segments: BTreeMap::new(),
            events: EventPool::new(),
            pending: Vec::new(),
            pending_events: 0,
            stats: AllocatorStats::default(),
            bins: Vec::with_capacity(super::bins::BIN_CAPACITY),
            bin_capacity: super::bins::BIN_CAPACITY,
            trace,
            malloc_count: 0,
            limit: None,
            deferred: None,
        }
    }

    fn key(&self, slot: u32) -> PoolKey {
        let b = self.slab.get(slot);
        PoolKey {
            stream: b.stream,
            size: b.size,
            addr: b.ptr,
            slot,
        }
    }

    pub fn pool(&self, kind: PoolKind) -> &BlockPool {
        match kind {
            PoolKind::Small => &self.small,
            PoolKind::Large => &self.large,
        }
    }

    fn pool_mut(&mut self, kind: PoolKind) -> &mut BlockPool {
        match kind {
            PoolKind::Small => &mut self.small,
            PoolKind::Large => &mut self.large,
        }
    }

    pub fn pool_insert(&mut self, slot: u32) {
        let key = self.key(slot);
        let b = self.slab.get_mut(slot);
        debug_assert!(b.status == Status::Free && !b.parked && !b.pooled);
        b.gc_base = self.malloc_count;
        b.pooled = true;
        let kind = b.pool;
        self.stats.cached_free_bytes += key.size;
        self.pool_mut(kind).insert(key);
    }

    pub fn pool_remove(&mut self, slot: u32) {
        let key = self.key(slot);
        debug_assert!(self.slab.get(slot).pooled);
        self.slab.get_mut(slot).pooled = false;
        let kind = self.slab.get(slot).pool;
        self.stats.cached_free_bytes -= key.size;
        self.pool_mut(kind).remove(&key);
    }

    /// `(count, bytes)` this block contributes to `inactive_split`.
    pub fn split_contribution(&self, slot: Option<u32>) -> (i64, i64) {
        match slot.map(|s| self.slab.get(s)) {
            Some(b) if b.status == Status::Free && !b.is_whole_segment() => (1, b.size as i64),
            _ => (0, 0),
        }
    }

    pub fn apply_split_change(&mut self, pool: PoolKind, before: (i64, i64), after: (i64, i64)) {
        self.stats.inactive_split.apply(pool, after.0 - before.0);
        self.stats
            .inactive_split_bytes
            .apply(pool, after.1 - before.1);
    }

    /// Best fit in the request's pool and stream, with PyTorch's oversize rules.
    pub fn best_fit(&self, req: &Request<'_, B>) -> Option<u32> {
        let key = self.pool(req.pool).lower_bound(req.stream_id, req.size)?;
        let max_split = self.config.max_split_size;
        // An oversize block is not handed to a request that could be split for.
        if req.size < max_split && key.size >= max_split {
            return None;
        }
        // An oversize request does not take a block much larger than itself.
        if req.size >= max_split && key.size >= req.size.saturating_add(MAX_NON_SPLIT_ROUNDING) {
            return None;
        }
        Some(key.slot)
    }

    /// Hands out the free block in `slot` (in its pool) for `req`, splitting off the rest
    /// when the split rules say so.
    pub fn hand_out(&mut self, slot: u32, req: &Request<'_, B>) -> HandOut {
        self.pool_remove(slot);
        let before = self.split_contribution(Some(slot));
        let (pool, block_size) = {
            let b = self.slab.get(slot);
            (b.pool, b.size)
        };
        let max_split = self.config.max_split_size;
        let mut remainder = None;
        if should_split(pool, block_size, req.size, max_split) {
            let b = self.slab.get(slot);
            let nb = NewBlock {
                ptr: b.ptr + req.size,
                size: b.size - req.size,
                stream: b.stream,
                pool,
                segment: b.segment,
                prev: Some(slot),
                next: b.next,
            };
            let r = self.slab.insert(&nb);
            if let Some(n) = nb.next {
                self.slab.get_mut(n).prev = Some(r);
            }
            let b = self.slab.get_mut(slot);
            b.next = Some(r);
            b.size = req.size;
            self.pool_insert(r);
            remainder = Some(r);
        }
        let after = self.split_contribution(remainder);
        self.apply_split_change(pool, before, after);
        self.allocate_block(slot, req)
    }

    /// Marks the free block in `slot` (out of its pool and bins, split already) allocated
    /// to `req`, with the stats and trace of a hand-out.
    pub fn allocate_block(&mut self, slot: u32, req: &Request<'_, B>) -> HandOut {
        let max_split = self.config.max_split_size;
        let b = self.slab.get_mut(slot);
        debug_assert!(b.status == Status::Free && !b.parked);
        let pool = b.pool;
        b.status = Status::Allocated;
        b.requested = req.requested;
        b.generation += 1;
        let out = HandOut {
            block: BlockRef {
                id: slot,
                generation: b.generation,
            },
            ptr: b.ptr,
            size: b.size,
        };
        let (stream, requested) = (b.stream, b.requested);
        let s = &mut self.stats;
        s.allocation.increase(pool, 1);
        s.allocated_bytes.increase(pool, out.size);
        s.active.increase(pool, 1);
        s.active_bytes.increase(pool, out.size);
        s.requested_bytes.increase(pool, requested);
        if out.size >= max_split {
            s.oversize_allocations.increase(1);
        }
        self.trace
            .push(TraceAction::Alloc, out.ptr, requested, stream, None);
        out
    }

    /// The user dropped the last handle: into pending-free when other streams used the
    /// block, else straight into the pool.
    pub fn free_user(&mut self, r: BlockRef) {
        let Some(b) = self.slab.resolve(r) else {
            debug_assert!(false, "free of a stale block {r:?}");
            return;
        };
        debug_assert_eq!(b.status, Status::Allocated);
        let (pool, size, ptr, requested, stream) = (b.pool, b.size, b.ptr, b.requested, b.stream);
        let s = &mut self.stats;
        s.allocation.decrease(pool, 1);
        s.allocated_bytes.decrease(pool, size);
        if size >= self.config.max_split_size {
            s.oversize_allocations.decrease(1);
        }
        self.trace
            .push(TraceAction::FreeRequested, ptr, requested, stream, None);
        if self.slab.get(r.id).uses.is_empty() {
            // No stream uses: free now, parked in the bins (merged later, see `bins.rs`).
            self.defer_free(r.id);
            return;
        }
        // Move the vectors out (keeping their capacity) to record events while borrowing the
        // backend and the event pool.
        let b = self.slab.get_mut(r.id);
        let uses = mem::take(&mut b.uses);
        let mut events = mem::take(&mut b.events);
        let mut stuck = false;
        for (i, u) in uses.iter().enumerate() {
            if uses[..i].iter().any(|earlier| earlier.id == u.id) {
                continue; // one event per stream, however many owners
            }
            match self.events.record(&self.backend, &u.stream) {
                Ok(e) => {
                    events.push((u.id, e));
                    self.stats.reuse_events_created += 1;
                }
                // No event: wait for the stream now instead. If even that fails, the block
                // is kept out of the pool for good (leaked, never unsafe).
                Err(err) => {
                    if let Err(sync_err) = self.backend.synchronize_stream(&u.stream) {
                        tracing::error!(%err, %sync_err, "memreuse allocator: cannot order a free after its stream uses; block quarantined");
                        self.deferred = Some(sync_err);
                        stuck = true;
                    }
                }
            }
        }
        let b = self.slab.get_mut(r.id);
        b.uses = uses;
        b.events = events;
        b.status = Status::PendingFree;
        self.stats.pending_free_bytes += size;
        if stuck {
            let b = self.slab.get_mut(r.id);
            for (_, e) in b.events.drain(..) {
                self.events.put(e);
            }
        } else if self.slab.get(r.id).events.is_empty() {
            self.free_to_pool(r.id);
        } else {
            self.pending_events += self.slab.get(r.id).events.len();
            self.pending.push(r.id);
        }
    }

    /// An allocated or pending-free block (with no events left) returns to its pool and
    /// merges with free neighbours.
    pub fn free_to_pool(&mut self, slot: u32) {
        self.mark_free(slot);
        self.merge_into_pool(slot);
    }

    /// An allocated or pending-free block (with no events left) becomes free: status,
    /// generation, the `active`/`requested` stats and the trace. It is in no pool yet.
    pub fn mark_free(&mut self, slot: u32) {
        let b = self.slab.get_mut(slot);
        debug_assert!(b.events.is_empty() && b.status != Status::Free);
        let was_pending = b.status == Status::PendingFree;
        b.uses.clear();
        let (pool, size, ptr, requested, stream) = (b.pool, b.size, b.ptr, b.requested, b.stream);
        b.requested = 0;
        b.status = Status::Free;
        b.generation += 1;
        let s = &mut self.stats;
        if was_pending {
            s.pending_free_bytes -= size;
        }
        s.active.decrease(pool, 1);
        s.active_bytes.decrease(pool, size);
        s.requested_bytes.decrease(pool, requested);
        self.trace
            .push(TraceAction::FreeCompleted, ptr, requested, stream, None);
    }

    /// True when `slot` holds a free block in its pool (not parked in the bins).
    pub fn is_pooled(&self, slot: u32) -> bool {
        self.slab.get(slot).pooled
    }

    /// True when `slot` holds a block parked in the bins.
    pub fn is_parked(&self, slot: u32) -> bool {
        let b = self.slab.get(slot);
        b.status == Status::Free && b.parked
    }

    /// Puts the free block in `slot` (in no pool, no bin, its own split contribution not
    /// counted) into its pool, merged with its free neighbours. A parked block that would
    /// have merged with what becomes free here is merged back first (`bins.rs` invariant:
    /// a parked block's lower neighbour is never free, its upper one never parked).
    pub fn merge_into_pool(&mut self, slot: u32) -> u32 {
        let b = self.slab.get(slot);
        debug_assert!(b.status == Status::Free && !b.parked);
        let (pool, prev, next) = (b.pool, b.prev, b.next);
        if let Some(n) = next.filter(|&n| self.is_parked(n)) {
            self.unpark_and_merge(n);
        }
        if let Some(p) = prev {
            if self.is_parked(p) {
                self.unpark_and_merge(p);
            } else if let Some(pp) = self.slab.get(p).prev.filter(|&pp| self.is_parked(pp))
                && self.is_pooled(p)
            {
                // `p` is the pooled remainder of parked `pp`: merge them into one first.
                self.unpark_and_merge(pp);
            }
        }
        // Re-read: the merges above may have changed the neighbours.
        let b = self.slab.get(slot);
        let prev = b.prev.filter(|&p| self.is_pooled(p));
        let next = b.next.filter(|&n| self.is_pooled(n));
        let (bp, bn) = (self.split_contribution(prev), self.split_contribution(next));
        let before = (bp.0 + bn.0, bp.1 + bn.1);
        let mut slot = slot;
        if let Some(p) = prev {
            self.pool_remove(p);
            self.merge_into(p, slot);
            slot = p;
        }
        if let Some(n) = next {
            self.pool_remove(n);
            self.merge_into(slot, n);
        }
        self.pool_insert(slot);
        let after = self.split_contribution(Some(slot));
        self.apply_split_change(pool, before, after);
        slot
    }

    /// `low` absorbs its free upper neighbour `high`; `high`'s slot is vacated.
    pub fn merge_into(&mut self, low: u32, high: u32) {
        let (hsize, hnext) = {
            let h = self.slab.get(high);
            (h.size, h.next)
        };
        let l = self.slab.get_mut(low);
        l.size += hsize;
        l.next = hnext;
        if let Some(n) = hnext {
            self.slab.get_mut(n).prev = Some(low);
        }
        self.slab.remove(high);
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

    /// A new segment from the device for `req`, put in its pool. `Ok(None)` when the device
    /// (or the per-process limit) says out of memory.
    pub fn alloc_segment(
        &mut self,
        req: &Request<'_, B>,
        is_retry: bool,
    ) -> Result<Option<u32>, BackendError> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        let size = req.alloc_size;
        if let Some(limit) = self.limit()?
            && self
                .stats
                .reserved_bytes
                .aggregate
                .current
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
        let slot = self.slab.insert(&NewBlock {
            ptr,
            size,
            stream: req.stream_id,
            pool: req.pool,
            segment: ptr,
            prev: None,
            next: None,
        });
        self.segments.insert(
            ptr,
            Segment {
                size,
                stream: req.stream.clone(),
                stream_id: req.stream_id,
                pool: req.pool,
                head: slot,
            },
        );
        let s = &mut self.stats;
        s.segment.increase(req.pool, 1);
        s.reserved_bytes.increase(req.pool, size);
        s.num_device_alloc += 1;
        if size >= self.config.max_split_size {
            s.oversize_segments.increase(1);
        }
        self.trace
            .push(TraceAction::SegmentAlloc, ptr, size, req.stream_id, None);
        self.pool_insert(slot);
        Ok(Some(slot))
    }

    /// Returns the free whole-segment block in `slot` to the device. The segment's stream is
    /// synchronized first (work enqueued before the last free may still use it). On a
    /// backend error nothing changes.
    pub fn release_segment(&mut self, slot: u32) -> Result<(), BackendError> {
        let b = self.slab.get(slot);
        debug_assert!(b.status == Status::Free && b.is_whole_segment());
        let (base, size, pool, stream_id) = (b.ptr, b.size, b.pool, b.stream);
        if let Some(seg) = self.segments.get(&base) {
            self.backend.synchronize_stream(&seg.stream)?;
        }
        self.backend.free(crate::ids::DevicePtr(base))?;
        self.pool_remove(slot);
        self.slab.remove(slot);
        self.segments.remove(&base);
        let s = &mut self.stats;
        s.segment.decrease(pool, 1);
        s.reserved_bytes.decrease(pool, size);
        s.num_device_free += 1;
        if size >= self.config.max_split_size {
            s.oversize_segments.decrease(1);
        }
        self.trace
            .push(TraceAction::SegmentFree, base, size, stream_id, None);
        Ok(())
    }

    /// Largest free block in either pool.
    pub fn largest_free_block(&self) -> u64 {
        self.small
            .iter()
            .chain(self.large.iter())
            .map(|k| k.size)
            .max()
            .unwrap_or(0)
    }
}
