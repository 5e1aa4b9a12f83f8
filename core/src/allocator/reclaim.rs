//! Getting memory back: oversize and cached segments and garbage collection (which blocks
//! go is the index's choice, `index/victims.rs`; this layer releases them in that order),
//! after the pending frees settle (`pending.rs`).

use crate::backend::Backend;
use crate::error::BackendError;

use super::sizes::PoolKind;
use super::state::{Request, Setup, State};

impl<B: Backend> State<B> {
    /// Releases cached oversize segments of the request's stream: one large enough, or
    /// several, largest first, until enough bytes went back (PyTorch's
    /// `release_available_cached_blocks`). True when enough was released.
    pub fn release_available(
        &mut self,
        su: &Setup<B>,
        req: &Request<'_, B>,
    ) -> Result<bool, BackendError> {
        let max_split = su.config.max_split_size;
        // Expandable segments have no oversize segments to release: the chain's next step
        // unmaps free pages instead.
        if max_split == u64::MAX || su.config.expandable_segments {
            return Ok(false);
        }
        let victims = self
            .index
            .oversize_victims(req.stream_id, req.pool, req.size, max_split);
        for slot in victims.slots {
            self.release_segment(su, slot)?;
        }
        Ok(victims.enough)
    }

    /// Retries quarantined blocks (failures stay quarantined: each was reported once
    /// already), synchronizes all pending events, then releases every free whole-segment
    /// block of every stream (PyTorch's `release_cached_blocks`). A pending block that
    /// cannot be synchronized is quarantined; only a failure to release a segment is
    /// returned.
    pub fn release_cached(&mut self, su: &Setup<B>) -> Result<(), BackendError> {
        if !self.pending.none_quarantined()
            && let Err(e) = self.release_quarantined(su)
        {
            tracing::debug!(%e, "memreuse allocator: quarantined blocks stay quarantined");
        }
        self.synchronize_and_free_events(su);
        if su.config.expandable_segments {
            self.unmap_free_pages(su, None, None)?;
        }
        for kind in [PoolKind::Small, PoolKind::Large] {
            for slot in self.index.free_segments(kind) {
                self.release_segment(su, slot)?;
            }
        }
        Ok(())
    }

    /// PyTorch's `garbage_collect_cached_blocks`: with a per-process limit and a GC
    /// threshold, once reserved memory passes threshold x limit, release unsplit large
    /// cached blocks, oldest (by mallocs since they were cached) first, until the excess is
    /// reclaimed. No synchronization. Releases nothing with expandable segments, as PyTorch
    /// (`BlockIndex::gc_victims`).
    pub fn garbage_collect(&mut self, su: &Setup<B>) -> Result<(), BackendError> {
        let Some(threshold) = su.config.garbage_collection_threshold else {
            return Ok(());
        };
        let Some(limit) = self.limit(su)? else {
            return Ok(());
        };
        let gc_threshold = (threshold * limit as f64) as u64;
        let reserved = self.index.figures().reserved_bytes.current();
        if reserved <= gc_threshold {
            return Ok(());
        }
        let target = reserved - gc_threshold;
        // With expandable segments the victims are none (PyTorch skips expandable blocks).
        for slot in self.index.gc_victims(target) {
            self.release_segment(su, slot)?;
        }
        Ok(())
    }
}
