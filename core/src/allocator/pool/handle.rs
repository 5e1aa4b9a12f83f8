//! [`MemPool`], the public face of a memory pool (PyTorch's `torch.cuda.MemPool`), and
//! [`PoolScope`], the guard that routes a thread's allocations into it
//! (`torch.cuda.use_mem_pool`).

use std::marker::PhantomData;
use std::sync::Arc;

use crate::backend::Backend;

use super::super::alloc_error::AllocError;
use super::super::caching::CachingAllocator;
use super::super::storage::Storage;
use super::error::PoolError;
use super::id::MemPoolId;
use super::source::SegmentSource;
use super::stats::MemPoolStats;
use super::table::MemPoolOptions;

/// A memory pool of one allocator: segments of its own that no other pool and no ordinary
/// allocation ever uses (docs/memory-pools.md).
///
/// Allocate from it with [`MemPool::allocate`], or route a thread's ordinary
/// [`CachingAllocator::allocate`] calls into it with [`MemPool::scope`]. Dropping it (or
/// [`MemPool::close`]) ends it: its cached segments go back to the device at once, blocks
/// still allocated from it stay valid and their segments go back once freed (at the
/// allocator's next `empty_cache` or out-of-memory release), and allocating from it is
/// refused with [`PoolError::Released`]. The pool keeps its allocator alive.
pub struct MemPool<B: Backend> {
    allocator: Arc<CachingAllocator<B>>,
    id: MemPoolId,
    lane: u32,
    options: MemPoolOptions,
    /// Set by `close`, so the drop does not release twice.
    closed: bool,
}

impl<B: Backend> std::fmt::Debug for MemPool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemPool")
            .field("id", &self.id)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> CachingAllocator<B> {
    /// A new memory pool whose segments come from the device.
    pub fn create_pool(self: &Arc<Self>, options: MemPoolOptions) -> MemPool<B> {
        self.create_pool_with_source(options, None)
    }

    /// A new memory pool whose segments come from `source` (the device when `None`), as a
    /// `torch.cuda.MemPool` built on a `CUDAPluggableAllocator`.
    pub fn create_pool_with_source(
        self: &Arc<Self>,
        options: MemPoolOptions,
        source: Option<Arc<dyn SegmentSource>>,
    ) -> MemPool<B> {
        let id = MemPoolId::fresh();
        let lane = {
            let mut st = self.state.lock();
            let plain = source.is_some();
            let lane = st.pools.create(id, options, source);
            st.index.add_lane(lane, options.no_split, plain);
            lane
        };
        MemPool {
            allocator: Arc::clone(self),
            id,
            lane,
            options,
            closed: false,
        }
    }

    /// The statistics of the pool `id` (also after it was dropped, while this allocator
    /// lives); [`PoolError::Unknown`] for an id that is not this allocator's.
    pub fn pool_stats(&self, id: MemPoolId) -> Result<MemPoolStats, PoolError> {
        let st = self.state.lock();
        let lane = st.pools.lane_of(id)?;
        Ok(st.pool_stats(lane))
    }
}

impl<B: Backend> MemPool<B> {
    /// The pool's id (`segment_pool_id` in snapshots).
    pub fn id(&self) -> MemPoolId {
        self.id
    }

    /// The options it was created with.
    pub fn options(&self) -> MemPoolOptions {
        self.options
    }

    /// The allocator it belongs to.
    pub fn allocator(&self) -> &Arc<CachingAllocator<B>> {
        &self.allocator
    }

    /// Allocates at least `bytes` bytes for `stream` from this pool (the allocator's chain
    /// within the pool: `pool/malloc.rs`).
    pub fn allocate(&self, bytes: u64, stream: &B::Stream) -> Result<Storage<B>, AllocError> {
        self.allocator.allocate_in_pool(self.id, bytes, stream)
    }

    /// Routes this thread's [`CachingAllocator::allocate`] calls on `streams` (every stream
    /// when empty) into this pool until the guard drops, as `torch.cuda.use_mem_pool`.
    /// Scopes nest: the innermost open scope of the thread that covers the stream wins.
    /// A stream of another device is refused ([`AllocError::ForeignStream`], nothing
    /// routed).
    pub fn scope(&self, streams: &[B::Stream]) -> Result<PoolScope<'_, B>, AllocError> {
        let backend = self.allocator.backend();
        if streams.iter().any(|s| !backend.owns_stream(s)) {
            return Err(self.allocator.foreign_stream("MemPool::scope"));
        }
        let ids = streams.iter().map(|s| backend.stream_id(s)).collect();
        let token = self.allocator.state.lock().pools.open_scope(self.lane, ids);
        Ok(PoolScope {
            pool: self,
            token,
            not_send: PhantomData,
        })
    }

    /// Waits for pending frees, then returns every free whole segment of this pool to
    /// where it came from (PyTorch's `emptyCache(mempool_id)`); the pool stays usable. The
    /// allocator's own [`CachingAllocator::empty_cache`] leaves a live pool's segments
    /// alone, as PyTorch's does.
    pub fn empty_cache(&self) -> Result<(), AllocError> {
        let a = &self.allocator;
        let released = a.state.lock().empty_pool(&a.setup, self.lane);
        a.deliver_segment_events();
        Ok(released?)
    }

    /// The pool's statistics.
    pub fn stats(&self) -> MemPoolStats {
        self.allocator.state.lock().pool_stats(self.lane)
    }

    /// Ends the pool as dropping it does, returning the error of giving back its cached
    /// segments instead of deferring it. Allocating from its id afterwards is refused with
    /// [`PoolError::Released`].
    pub fn close(mut self) -> Result<(), AllocError> {
        self.closed = true;
        let a = &self.allocator;
        let released = a.state.lock().release_pool(&a.setup, self.lane, "closed");
        a.deliver_segment_events();
        Ok(released?)
    }
}

impl<B: Backend> Drop for MemPool<B> {
    /// Ends the pool (see [`MemPool`]). A failure to give back a segment cannot be returned
    /// here: it is logged and reported by the allocator's next
    /// [`CachingAllocator::process_events`].
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        let a = &self.allocator;
        let mut st = a.state.lock();
        if let Err(e) = st.release_pool(&a.setup, self.lane, "dropped") {
            tracing::warn!(%e, pool = %self.id, "memreuse allocator: a dropped memory pool could not give back every segment");
            st.deferred = Some(e);
        }
        drop(st);
        a.deliver_segment_events();
    }
}

/// While alive, this thread's allocations on the scope's streams come from its pool
/// ([`MemPool::scope`]). Not `Send`: the routing belongs to the thread that opened it.
#[must_use = "the scope routes allocations only while the guard is alive"]
pub struct PoolScope<'a, B: Backend> {
    pool: &'a MemPool<B>,
    token: u64,
    not_send: PhantomData<*const ()>,
}

impl<B: Backend> PoolScope<'_, B> {
    /// The pool allocations are routed to.
    pub fn pool(&self) -> &MemPool<B> {
        self.pool
    }
}

impl<B: Backend> std::fmt::Debug for PoolScope<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolScope")
            .field("pool", &self.pool.id)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Drop for PoolScope<'_, B> {
    fn drop(&mut self) {
        self.pool
            .allocator
            .state
            .lock()
            .pools
            .close_scope(self.token);
    }
}
