//! Getting memory back: completed events, quarantined blocks, oversize and cached
//! segments, garbage collection, and the out-of-memory report at the end of the chain.
//!
//! # Quarantine
//! A pending-free block whose event query (or synchronization) fails cannot be proven
//! unused: the device may still be working on it, or may never say. Such a block is
//! *quarantined*: it leaves the pending list, it counts in `quarantined_bytes` instead of
//! `pending_free_bytes`, and it is never reused while quarantined. The failure itself is not
//! the allocator's to report: the operation that failed (a work's `wait`, the stream's
//! synchronize) already returned it to its caller, so `allocate`, `process_events` and
//! `empty_cache` keep succeeding (a request the allocator can serve is served) and the
//! quarantine is logged once per block (`tracing` warning) instead of failing unrelated calls. It returns to the pool only after a synchronize of every stream that
//! used it succeeds ([`super::CachingAllocator::release_quarantined`], `empty_cache`, or the
//! synchronizing step of a failing allocation).

use crate::backend::Backend;
use crate::error::BackendError;

use super::oom::{OomInfo, OutOfMemory};
use super::sizes::PoolKind;
use super::state::{Request, State};
use super::trace::TraceAction;

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

impl<B: Backend> State<B> {
    /// Moves the pending block at `pending[i]` into quarantine (its events go back to the
    /// pool: re-recording replaces their failed recording).
    fn quarantine_pending(&mut self, i: usize) {
        let slot = self.pending.swap_remove(i);
        let d = &mut self.dev[slot as usize];
        self.pending_events -= d.events.len();
        for (_, e) in d.events.drain(..) {
            self.events.put(e);
        }
        self.index.quarantine(slot);
        self.quarantined.push(slot);
    }

    /// Frees every pending block whose events all completed (PyTorch's `process_events`).
    /// A block whose event query fails is quarantined (and logged); every other pending
    /// block is still processed.
    pub fn process_events(&mut self) {
        let mut i = 0;
        while i < self.pending.len() {
            let slot = self.pending[i];
            let d = &mut self.dev[slot as usize];
            let mut j = 0;
            let mut failed = false;
            while j < d.events.len() {
                match self.backend.query_event(&d.events[j].1) {
                    Ok(true) => {
                        let (_, e) = d.events.swap_remove(j);
                        self.events.put(e);
                        self.pending_events -= 1;
                    }
                    Ok(false) => j += 1,
                    Err(e) => {
                        log_quarantine(&e, self.index.block(slot).size);
                        failed = true;
                        break;
                    }
                }
            }
            if failed {
                self.quarantine_pending(i);
            } else if d.events.is_empty() {
                self.pending.swap_remove(i);
                self.release_to_pool(slot);
            } else {
                i += 1;
            }
        }
    }

    /// Waits for every pending event on the host and frees the blocks
    /// (PyTorch's `synchronize_and_free_events`; counted in `num_sync_all_streams`). A block
    /// whose event cannot be waited for is quarantined (and logged); every other block is
    /// freed.
    pub fn synchronize_and_free_events(&mut self) {
        self.counts.num_sync_all_streams += 1;
        let mut i = 0;
        while i < self.pending.len() {
            let slot = self.pending[i];
            let failed = self.dev[slot as usize]
                .events
                .iter()
                .find_map(|(_, e)| self.backend.synchronize_event(e).err());
            if let Some(e) = failed {
                log_quarantine(&e, self.index.block(slot).size);
                self.quarantine_pending(i);
            } else {
                i += 1;
            }
        }
        while let Some(slot) = self.pending.pop() {
            let d = &mut self.dev[slot as usize];
            self.pending_events -= d.events.len();
            for (_, e) in d.events.drain(..) {
                self.events.put(e);
            }
            self.release_to_pool(slot);
        }
    }

    /// Synchronizes the streams that used each quarantined block; a block whose streams all
    /// synchronized returns to the pool. Returns the bytes returned, or the first failure
    /// (the blocks it concerns stay quarantined; the others are still tried).
    pub fn release_quarantined(&mut self) -> Result<u64, BackendError> {
        let mut first_err = None;
        let mut released = 0;
        let mut i = 0;
        while i < self.quarantined.len() {
            let slot = self.quarantined[i];
            let uses = &self.dev[slot as usize].uses;
            let failed = uses.iter().enumerate().find_map(|(k, u)| {
                if uses[..k].iter().any(|earlier| earlier.id == u.id) {
                    return None;
                }
                self.backend.synchronize_stream(&u.stream).err()
            });
            if let Some(e) = failed {
                first_err.get_or_insert(e);
                i += 1;
            } else {
                self.quarantined.swap_remove(i);
                released += self.index.block(slot).size;
                self.release_to_pool(slot);
            }
        }
        first_err.map_or(Ok(released), Err)
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
        if let Some(k) = self.index.lower_bound(req.stream_id, req.pool, key_size)
            && self.index.is_free_segment(k.slot)
        {
            self.release_segment(k.slot)?;
            return Ok(true);
        }
        let victims: Vec<_> = self
            .index
            .below(req.stream_id, req.pool, key_size)
            .into_iter()
            .take_while(|k| k.size >= max_split)
            .filter(|k| self.index.is_free_segment(k.slot))
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

    /// Retries quarantined blocks (failures stay quarantined: each was reported once
    /// already), synchronizes all pending events, then releases every free whole-segment
    /// block of every stream (PyTorch's `release_cached_blocks`). A pending block that
    /// cannot be synchronized is quarantined; only a failure to release a segment is
    /// returned.
    pub fn release_cached(&mut self) -> Result<(), BackendError> {
        if !self.quarantined.is_empty()
            && let Err(e) = self.release_quarantined()
        {
            tracing::debug!(%e, "memreuse allocator: quarantined blocks stay quarantined");
        }
        self.synchronize_and_free_events();
        for kind in [PoolKind::Small, PoolKind::Large] {
            let victims: Vec<u32> = self
                .index
                .free_blocks(kind)
                .into_iter()
                .filter(|k| self.index.is_free_segment(k.slot))
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
        let reserved = self.index.figures().reserved_bytes.current();
        if reserved <= gc_threshold {
            return Ok(());
        }
        let target = reserved - gc_threshold;
        let now = self.index.clock();
        let mut candidates: Vec<(u32, u64, u64)> = self
            .index
            .free_blocks(PoolKind::Large)
            .into_iter()
            .filter(|k| self.index.is_free_segment(k.slot))
            .map(|k| {
                let since = match self.index.block(k.slot).state {
                    super::index::BlockState::Free { since } => since,
                    _ => now,
                };
                (k.slot, now - since, k.size)
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
        self.counts.num_ooms += 1;
        self.trace.push(
            TraceAction::Oom,
            0,
            req.requested,
            req.stream_id,
            Some(mem.free),
        );
        let f = self.index.figures();
        let allocated = f.allocated_bytes.current();
        let reserved = f.reserved_bytes.current();
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
            largest_free_block: self.index.largest_free_block(),
            cached_free: f.cached_free_bytes,
            fragmentation: self.index.fragmentation(),
            culprits: self.pending_culprits(),
            snapshot: None,
            snapshot_error: None,
        };
        (info, err)
    }
}
