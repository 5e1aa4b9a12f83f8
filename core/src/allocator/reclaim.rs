//! Getting memory back: completed events, oversize and cached segments, garbage
//! collection, and the out-of-memory report at the end of the chain.

use crate::backend::Backend;
use crate::error::BackendError;

use super::oom::{OomInfo, OutOfMemory};
use super::pool::PoolKey;
use super::sizes::PoolKind;
use super::state::{Request, State};
use super::trace::TraceAction;

impl<B: Backend> State<B> {
    /// Frees every pending block whose events all completed (PyTorch's `process_events`).
    /// On a query error, the blocks already handled stay handled and the rest stay pending.
    pub fn process_events(&mut self) -> Result<(), BackendError> {
        let mut i = 0;
        while i < self.pending.len() {
            let slot = self.pending[i];
            let b = self.slab.get_mut(slot);
            let mut j = 0;
            while j < b.events.len() {
                if self.backend.query_event(&b.events[j].1)? {
                    let (_, e) = b.events.swap_remove(j);
                    self.events.put(e);
                    self.pending_events -= 1;
                } else {
                    j += 1;
                }
            }
            if b.events.is_empty() {
                self.pending.swap_remove(i);
                self.free_to_pool(slot);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Waits for every pending event on the host and frees the blocks
    /// (PyTorch's `synchronize_and_free_events`; counted in `num_sync_all_streams`).
    pub fn synchronize_and_free_events(&mut self) -> Result<(), BackendError> {
        self.stats.num_sync_all_streams += 1;
        for &slot in &self.pending {
            for (_, e) in &self.slab.get(slot).events {
                self.backend.synchronize_event(e)?;
            }
        }
        while let Some(slot) = self.pending.pop() {
            let b = self.slab.get_mut(slot);
            self.pending_events -= b.events.len();
            for (_, e) in b.events.drain(..) {
                self.events.put(e);
            }
            self.free_to_pool(slot);
        }
        Ok(())
    }

    /// Releases cached oversize segments of the request's stream: one large enough, or
    /// several, largest first, until enough bytes went back (PyTorch's
    /// `release_available_cached_blocks`). True when enough was released.
    pub fn release_available(&mut self, req: &Request<'_, B>) -> Result<bool, BackendError> {
        let max_split = self.config.max_split_size;
        if max_split == u64::MAX {
            return Ok(false);
        }
        let key_size = req.size.max(max_split);
        if let Some(k) = self.pool(req.pool).lower_bound(req.stream_id, key_size)
            && self.slab.get(k.slot).is_whole_segment()
        {
            self.release_segment(k.slot)?;
            return Ok(true);
        }
        let victims: Vec<PoolKey> = self
            .pool(req.pool)
            .below(req.stream_id, key_size)
            .take_while(|k| k.size >= max_split)
            .filter(|k| self.slab.get(k.slot).is_whole_segment())
            .collect();
        let mut released = 0u64;
        for k in victims {
            if released >= key_size {
                break;
            }
            self.release_segment(k.slot)?;
            released += k.size;
        }
        Ok(released >= key_size)
    }

    /// Synchronizes all pending events, then releases every free whole-segment block of
    /// every stream (PyTorch's `release_cached_blocks`).
    pub fn release_cached(&mut self) -> Result<(), BackendError> {
        self.flush_bins();
        self.synchronize_and_free_events()?;
        for kind in [PoolKind::Small, PoolKind::Large] {
            let victims: Vec<u32> = self
                .pool(kind)
                .iter()
                .filter(|k| self.slab.get(k.slot).is_whole_segment())
                .map(|k| k.slot)
                .collect();
            for slot in victims {
                self.release_segment(slot)?;
            }
        }
        Ok(())
    }

    /// PyTorch's `garbage_collect_cached_blocks`: with a per-process limit and a GC
    /// threshold, once reserved memory passes threshold x limit, release unsplit large
    /// cached blocks, oldest (by mallocs since they were cached) first, until the excess is
    /// reclaimed. No synchronization.
    pub fn garbage_collect(&mut self) -> Result<(), BackendError> {
        let Some(threshold) = self.config.garbage_collection_threshold else {
            return Ok(());
        };
        let Some(limit) = self.limit()? else {
            return Ok(());
        };
        let gc_threshold = (threshold * limit as f64) as u64;
        let reserved = self.stats.reserved_bytes.aggregate.current;
        if reserved <= gc_threshold {
            return Ok(());
        }
        let target = reserved - gc_threshold;
        let mut candidates: Vec<(u32, u64, u64)> = self
            .large
            .iter()
            .filter(|k| self.slab.get(k.slot).is_whole_segment())
            .map(|k| {
                (
                    k.slot,
                    self.malloc_count - self.slab.get(k.slot).gc_base,
                    k.size,
                )
            })
            .collect();
        let mut total_age: u64 = candidates.iter().map(|c| c.1).sum();
        let mut reclaimed = 0u64;
        let mut freed_one = true;
        while reclaimed < target && freed_one && !candidates.is_empty() {
            let threshold_age = total_age as f64 / candidates.len() as f64;
            freed_one = false;
            let mut i = 0;
            while i < candidates.len() {
                let (slot, age, size) = candidates[i];
                if age as f64 >= threshold_age {
                    self.release_segment(slot)?;
                    reclaimed += size;
                    total_age -= age;
                    freed_one = true;
                    candidates.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }
        Ok(())
    }

    /// The end of the chain: records the `oom` trace entry, counts it, and builds the
    /// observers' info and the error.
    pub fn out_of_memory(&mut self, req: &Request<'_, B>) -> (OomInfo, OutOfMemory) {
        let mem = self.backend.memory_info().unwrap_or_default();
        let limit = self.limit().ok().flatten();
        self.stats.num_ooms += 1;
        self.trace.push(
            TraceAction::Oom,
            0,
            req.requested,
            req.stream_id,
            Some(mem.free),
        );
        let allocated = self.stats.allocated_bytes.aggregate.current;
        let reserved = self.stats.reserved_bytes.aggregate.current;
        let device = self.backend.device_index();
        let info = OomInfo {
            device,
            requested: req.requested,
            limit,
            device_free: mem.free,
            device_total: mem.total,
            allocated,
            reserved,
        };
        let err = OutOfMemory {
            device,
            requested: req.requested,
            device_total: mem.total,
            device_free: mem.free,
            allocated,
            reserved_unallocated: reserved - allocated,
            limit,
            largest_free_block: self.largest_free_block(),
            cached_free: self.stats.cached_free_bytes,
            fragmentation: self.fragmentation(),
            snapshot: None,
            snapshot_error: None,
        };
        (info, err)
    }
}
