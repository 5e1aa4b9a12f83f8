//! The pool-aware steps of the allocator's chain, under its lock: raw memory from a
//! pool's source, the oversize release within a pool, the `use_on_oom` fallback of an
//! ordinary allocation, and a pool's own release.
//!
//! # The chain of a pool allocation
//! The same chain as an ordinary one, within the pool's lane: best fit in the pool, new
//! segment (from the pool's source, else the device; never an expandable segment, as
//! PyTorch, whose private pools do not support them), release of the pool's cached
//! oversize segments, the allocator-wide release (the default pools and released pools,
//! never another live pool: PyTorch's `release_cached_blocks({0, 0})`), retry, out of
//! memory.

use std::sync::Arc;

use crate::backend::Backend;
use crate::error::BackendError;
use crate::ids::DevicePtr;

use super::super::alloc_error::AllocError;
use super::super::index::HandOut;
use super::super::state::{Request, Setup, State};
use super::error::PoolError;
use super::id::MemPoolId;
use super::source::{SegmentSource, SourceMemory, unusable};
use super::stats::MemPoolStats;
use super::table::{DEFAULT_LANE, Life, PoolCounts};

impl<B: Backend> State<B> {
    /// The segment source of `lane`'s pool, with the pool's id (`None`: the device).
    pub(crate) fn segment_source(&self, lane: u32) -> Option<(MemPoolId, Arc<dyn SegmentSource>)> {
        self.pools
            .entry(lane)
            .and_then(|e| e.source.clone().map(|s| (e.id, s)))
    }

    /// Gives the raw memory of the segment at `base` (`size` bytes, `lane`) back to where
    /// it came from.
    pub(crate) fn free_raw(
        &mut self,
        su: &Setup<B>,
        lane: u32,
        base: u64,
        size: u64,
    ) -> Result<(), BackendError> {
        match self.pools.entry(lane).and_then(|e| e.source.clone()) {
            Some(source) => source.free(SourceMemory {
                ptr: DevicePtr(base),
                len: size,
            }),
            None => su.backend.free(DevicePtr(base)),
        }
    }

    /// Counts a segment of `size` bytes added to (`added`) or taken from `lane`.
    pub(crate) fn count_pool_segment(&mut self, lane: u32, size: u64, added: bool) {
        if let Some(e) = self.pools.entry_mut(lane) {
            let c = &mut e.counts;
            if added {
                c.num_device_alloc += 1;
                c.reserved += size;
                c.peak_reserved = c.peak_reserved.max(c.reserved);
            } else {
                c.num_device_free += 1;
                c.reserved -= size;
            }
        }
    }

    /// PyTorch's `release_available_cached_blocks` for `req`'s lane: the default lane's is
    /// `release_available`; a pool's releases the pool's own oversize segments.
    pub(crate) fn release_available_for(
        &mut self,
        su: &Setup<B>,
        req: &Request<'_, B>,
    ) -> Result<bool, BackendError> {
        if req.lane == DEFAULT_LANE {
            return self.release_available(su, req);
        }
        let max_split = su.config.max_split_size;
        // Expandable segments have no oversize segments to release (as `release_available`).
        if max_split == u64::MAX
            || (su.config.expandable_segments && !self.pools.has_source(req.lane))
        {
            return Ok(false);
        }
        let victims =
            self.index
                .oversize_victims_in(req.stream_id, req.lane, req.pool, req.size, max_split);
        for slot in victims.slots {
            self.release_segment(su, slot)?;
        }
        Ok(victims.enough)
    }

    /// `use_on_oom`: an ordinary request the cache and the device could not serve takes a
    /// cached block of a live `use_on_oom` pool on its stream (best fit, pools in creation
    /// order), as PyTorch's `try_mempool_fallback` does right after the first failed
    /// device allocation, before the releases. No new segment is made for it in the pool.
    #[cold]
    pub(crate) fn serve_on_oom(&mut self, req: &Request<'_, B>) -> Option<HandOut> {
        if req.lane != DEFAULT_LANE {
            return None;
        }
        let lanes: Vec<u32> = self.pools.use_on_oom_lanes().collect();
        for lane in lanes {
            if let Some(slot) = self
                .index
                .best_fit_in(req.stream_id, lane, req.pool, req.size)
            {
                return Some(self.hand_out(slot, req));
            }
        }
        None
    }

    /// A pool's `empty_cache`: waits for the pending frees (all of them: PyTorch waits for
    /// the pool's), then returns every free whole segment of the pool.
    pub(crate) fn empty_pool(&mut self, su: &Setup<B>, lane: u32) -> Result<(), BackendError> {
        self.synchronize_and_free_events(su);
        if su.config.expandable_segments {
            self.unmap_lane_pages(su, lane)?;
        }
        for slot in self.index.free_segments_in(lane) {
            self.release_segment(su, slot)?;
        }
        Ok(())
    }

    /// The pool of `lane` takes no more allocations (`how`: dropped or closed); its free
    /// segments go back now, the rest as they become free and the allocator releases them.
    pub(crate) fn release_pool(
        &mut self,
        su: &Setup<B>,
        lane: u32,
        how: &'static str,
    ) -> Result<(), BackendError> {
        if let Some(e) = self.pools.entry_mut(lane) {
            e.life = Life::Released(how);
        }
        self.index.release_lane(lane);
        self.empty_pool(su, lane)
    }

    /// The statistics of the pool of `lane`.
    pub(crate) fn pool_stats(&self, lane: u32) -> MemPoolStats {
        let f = self.index.lane_figures(lane);
        let (id, counts, live) = self.pools.entry(lane).map_or_else(
            || (MemPoolId::DEFAULT, PoolCounts::default(), false),
            |e| (e.id, e.counts, e.life == Life::Live),
        );
        MemPoolStats {
            id,
            segments: f.segments,
            reserved_bytes: f.reserved,
            peak_reserved_bytes: counts.peak_reserved,
            allocated_bytes: f.allocated,
            allocations: f.allocations,
            active_bytes: f.active,
            requested_bytes: f.requested,
            cached_free_bytes: f.cached_free,
            num_device_alloc: counts.num_device_alloc,
            num_device_free: counts.num_device_free,
            live,
        }
    }
}

/// `size` bytes of raw memory for a new segment: from `source` (a pool's, with its id) if
/// given, else the device. `Ok(None)` is out of memory. Touches no allocator state, so the
/// chain may call it without the lock (`release_lock_on_malloc`).
pub(crate) fn obtain_raw<B: Backend>(
    backend: &B,
    source: Option<&(MemPoolId, Arc<dyn SegmentSource>)>,
    size: u64,
) -> Result<Option<u64>, AllocError> {
    let Some((id, source)) = source else {
        return match backend.malloc(size) {
            Ok(p) => Ok(Some(p.addr())),
            Err(e) if e.is_out_of_memory() => Ok(None),
            Err(e) => Err(e.into()),
        };
    };
    let id = *id;
    let memory = match source.alloc(size) {
        Ok(m) => m,
        Err(e) if e.is_out_of_memory() => return Ok(None),
        Err(error) => {
            return Err(PoolError::SourceFailed {
                id,
                source_name: source.name().to_owned(),
                error: Box::new(error),
            }
            .into());
        }
    };
    if let Some(mut reason) = unusable(memory, size) {
        if let Err(e) = source.free(memory) {
            use std::fmt::Write as _;
            let _ = write!(reason, "; handing it back failed too: {e}");
        }
        return Err(PoolError::BadMemory {
            id,
            source_name: source.name().to_owned(),
            reason,
        }
        .into());
    }
    Ok(Some(memory.ptr.addr()))
}
