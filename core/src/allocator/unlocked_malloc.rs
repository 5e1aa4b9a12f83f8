//! PyTorch's `release_lock_on_cudamalloc`: the device call that obtains a new segment
//! (`malloc`, or a pool's segment source) runs without the allocator's lock, so other
//! threads' cached allocations and frees go on meanwhile (a real `cudaMalloc` can take
//! milliseconds). Off by default, as in PyTorch.
//!
//! The chain prepares the request under the lock (retry count, per-process limit, the
//! pool's source), drops the lock for the device call only, and takes it again to add the
//! segment and hand the block out. What PyTorch accepts with it, memreuse does too: while
//! the lock is dropped another thread may pass the same limit check (both segments are
//! then obtained), and a pool dropped meanwhile still gets the segment (it goes back with
//! the pool's other segments). Expandable segments map their pages under the lock, as in
//! PyTorch, where the setting only concerns `cudaMalloc`.

use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;

use crate::backend::Backend;

use super::alloc_error::AllocError;
use super::caching::CachingAllocator;
use super::pool::obtain_raw;
use super::state::{Request, State};

impl<B: Backend> CachingAllocator<B> {
    /// Turns `release_lock_on_cudamalloc` on or off (docs/memory-pools.md): with it on, a
    /// new segment is obtained from the device (or a pool's source) without the
    /// allocator's lock. A pool's [`super::SegmentSource`] is then called without the lock
    /// too (it still must not call back into the allocator).
    pub fn set_release_lock_on_malloc(&self, on: bool) {
        self.release_lock_on_malloc.store(on, Ordering::Relaxed);
    }

    /// Whether `release_lock_on_cudamalloc` is on.
    pub fn release_lock_on_malloc(&self) -> bool {
        self.release_lock_on_malloc.load(Ordering::Relaxed)
    }

    /// The chain's "new segment" step: [`State::alloc_segment`], with the device call
    /// outside the lock when `release_lock_on_cudamalloc` is on.
    pub(super) fn new_segment(
        &self,
        st: &mut MutexGuard<'_, State<B>>,
        req: &Request<'_, B>,
        is_retry: bool,
    ) -> Result<Option<u32>, AllocError> {
        let su = &self.setup;
        if !self.release_lock_on_malloc()
            || (su.config.expandable_segments && !st.pools.has_source(req.lane))
        {
            return st.alloc_segment(su, req, is_retry);
        }
        if is_retry {
            st.counts.num_alloc_retries += 1;
        }
        let size = req.alloc_size;
        if st.over_limit(su, size)? {
            return Ok(None);
        }
        let source = st.segment_source(req.lane);
        let raw = MutexGuard::unlocked(st, || obtain_raw(&*su.backend, source.as_ref(), size));
        let Some(ptr) = raw? else {
            return Ok(None);
        };
        Ok(Some(st.install_segment(req, ptr, size)))
    }
}
