//! [`CachingAllocator`]: the public face, and the malloc chain that drops the lock around
//! callbacks and observers.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::Backend;
use crate::ids::{AllocationId, DevicePtr, WorkId};

use super::block::{BlockRef, UseOwner};
use super::callbacks::{CallbackId, Registry};
use super::config::AllocatorConfig;
use super::oom::{AllocError, OomInfo};
use super::sizes::{pool_for, round_size, segment_size};
use super::snapshot::Snapshot;
use super::state::{HandOut, Request, State};
use super::stats::AllocatorStats;
use super::storage::{Storage, StorageInner};
use super::uses::EraseOutcome;

/// With `lazy_reclaim`, events are processed at malloc only above this many pending events
/// (torch_npu's threshold) or on a cache miss.
pub const LAZY_RECLAIM_EVENTS: usize = 512;

/// A free-memory callback: frees what it can (typically by dropping storages) and returns
/// true if it freed something.
pub type FreeMemoryCallback = dyn Fn() -> bool + Send + Sync;
/// An out-of-memory observer.
pub type OomObserver = dyn Fn(&OomInfo) + Send + Sync;

/// The stream-aware caching allocator of one device (docs/design.md §3). Share it as an `Arc`.
///
/// The hot path (a cached allocate or free) takes one `parking_lot` mutex. Free-memory
/// callbacks and OOM observers run without it.
pub struct CachingAllocator<B: Backend> {
    backend: Arc<B>,
    config: AllocatorConfig,
    state: Mutex<State<B>>,
    free_callbacks: Registry<FreeMemoryCallback>,
    oom_observers: Registry<OomObserver>,
    /// Where to write a snapshot at out-of-memory (`{device}` replaced by the index).
    oom_snapshot: Mutex<Option<PathBuf>>,
}

impl<B: Backend> std::fmt::Debug for CachingAllocator<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("backend", &self.backend.name())
            .field("device", &self.backend.device_index())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Drop for CachingAllocator<B> {
    /// Returns every segment to the device. Storages keep their allocator alive, so only
    /// free and pending-free blocks remain here; pending events are waited for first.
    fn drop(&mut self) {
        if let Err(e) = self.state.get_mut().release_cached() {
            tracing::warn!(%e, "memreuse allocator: could not release every segment on drop");
        }
    }
}

impl<B: Backend> CachingAllocator<B> {
    /// An allocator over `backend` with `config`.
    pub fn new(backend: Arc<B>, config: AllocatorConfig) -> Arc<Self> {
        let state = State::new(Arc::clone(&backend), config.clone());
        Arc::new(CachingAllocator {
            backend,
            config,
            state: Mutex::new(state),
            free_callbacks: Registry::new(),
            oom_observers: Registry::new(),
            oom_snapshot: Mutex::new(
                std::env::var_os(crate::observe::OOM_SNAPSHOT_ENV)
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from),
            ),
        })
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// The configuration.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// Allocates at least `bytes` bytes for use on `stream` (0 bytes gives a 512-byte block).
    ///
    /// Chain: process completed events -> best fit -> free-memory callbacks, best fit ->
    /// garbage collection -> new segment -> release cached oversize blocks, new segment ->
    /// synchronize pending events and release all unsplit cached blocks, best fit, new
    /// segment -> out of memory (trace entry, `num_ooms`, observers, error).
    pub fn allocate(
        self: &Arc<Self>,
        bytes: u64,
        stream: &B::Stream,
    ) -> Result<Storage<B>, AllocError> {
        let size = round_size(bytes, &self.config.roundup_power2_divisions);
        let req = Request {
            stream,
            stream_id: self.backend.stream_id(stream),
            requested: bytes,
            size,
            pool: pool_for(size),
            alloc_size: segment_size(size),
        };
        let out = self.malloc(&req)?;
        let allocation_id = AllocationId::fresh();
        self.backend
            .annotate_allocation(DevicePtr(out.ptr), out.size, allocation_id);
        Ok(Storage {
            inner: Arc::new(StorageInner {
                allocator: Arc::clone(self),
                block: out.block,
                ptr: DevicePtr(out.ptr),
                size: out.size,
                requested: bytes,
                stream: stream.clone(),
                stream_id: req.stream_id,
                allocation_id,
            }),
        })
    }

    fn malloc(&self, req: &Request<'_, B>) -> Result<HandOut, AllocError> {
        let mut st = self.state.lock();
        st.malloc_count += 1;
        if !self.config.lazy_reclaim || st.pending_events > LAZY_RECLAIM_EVENTS {
            st.process_events()?;
        }
        if let Some(out) = st.serve(req) {
            return Ok(out);
        }
        if self.config.lazy_reclaim {
            st.process_events()?;
            if let Some(out) = st.serve(req) {
                return Ok(out);
            }
        }
        if !self.free_callbacks.is_empty() {
            // Callbacks drop storages, which re-enters `free_block`: never hold the lock.
            drop(st);
            let mut freed = false;
            for cb in self.free_callbacks.snapshot() {
                freed |= cb();
            }
            st = self.state.lock();
            if freed {
                st.process_events()?;
                if let Some(out) = st.serve(req) {
                    return Ok(out);
                }
            }
        }
        // Every step below may reserve or release device memory: no block stays parked.
        st.flush_bins();
        st.garbage_collect()?;
        if let Some(slot) = st.alloc_segment(req, false)? {
            return Ok(st.hand_out(slot, req));
        }
        if st.release_available(req)?
            && let Some(slot) = st.alloc_segment(req, false)?
        {
            return Ok(st.hand_out(slot, req));
        }
        st.release_cached()?;
        // Blocks freed by the synchronization may fit without new memory (PyTorch goes
        // straight to the device here).
        if let Some(out) = st.serve(req) {
            return Ok(out);
        }
        if let Some(slot) = st.alloc_segment(req, true)? {
            return Ok(st.hand_out(slot, req));
        }
        let (info, mut err) = st.out_of_memory(req);
        drop(st);
        // The snapshot shows the moment of failure: before observers free anything.
        let template = self.oom_snapshot.lock().clone();
        if let Some(template) = template {
            match crate::observe::oom::write_oom_snapshot(self, &info, &template) {
                Ok(file) => err.snapshot = Some(file),
                Err((file, why)) => err.snapshot_error = Some((file, why.to_string())),
            }
        }
        for observer in self.oom_observers.snapshot() {
            observer(&info);
        }
        Err(AllocError::OutOfMemory(Box::new(err)))
    }

    /// Called when the last handle of a storage drops.
    pub(crate) fn free_block(&self, block: BlockRef) {
        self.state.lock().free_user(block);
    }

    fn owns(&self, storage: &Storage<B>) -> bool {
        std::ptr::eq(Arc::as_ptr(&storage.inner.allocator), self)
    }

    /// The user's `record_stream` (rule 2): `stream` uses the block, so freeing it waits for
    /// the work enqueued on `stream` so far. A no-op on the block's own stream; never erased
    /// by `erase_stream`.
    pub fn record_stream(&self, storage: &Storage<B>, stream: &B::Stream) {
        self.record(storage, stream, UseOwner::User);
    }

    /// A use of `storage` by `stream` owned by `work` (rule 4), erased by that work's
    /// [`CachingAllocator::erase_stream`].
    pub fn record_stream_for_work(&self, storage: &Storage<B>, stream: &B::Stream, work: WorkId) {
        self.record(storage, stream, UseOwner::Work(work));
    }

    fn record(&self, storage: &Storage<B>, stream: &B::Stream, owner: UseOwner) {
        let id = self.backend.stream_id(stream);
        let mut st = self.state.lock();
        if self.owns(storage) {
            st.record_use(storage.block_ref(), stream, id, owner);
        } else {
            st.stats.record_stream_calls += 1;
        }
    }

    /// Removes `work`'s use of `stream` from `storage`'s block (rule 4), only when the
    /// block's allocation stream is `current`.
    pub fn erase_stream(
        &self,
        storage: &Storage<B>,
        stream: &B::Stream,
        work: WorkId,
        current: &B::Stream,
    ) -> EraseOutcome {
        if !self.owns(storage) {
            self.state.lock().stats.erase_stream_calls += 1;
            return EraseOutcome::StaleBlock;
        }
        self.erase_stream_by_block(storage.block_ref(), work, stream, current)
    }

    /// The mode-3 path for a storage already dropped (rule 5): like
    /// [`CachingAllocator::erase_stream`], and a no-op ([`EraseOutcome::StaleBlock`]) when
    /// `block` no longer refers to the block it was taken from.
    pub fn erase_stream_by_block(
        &self,
        block: BlockRef,
        work: WorkId,
        stream: &B::Stream,
        current: &B::Stream,
    ) -> EraseOutcome {
        let id = self.backend.stream_id(stream);
        let current = self.backend.stream_id(current);
        self.state.lock().erase(block, work, id, current)
    }

    /// Frees every pending block whose events completed. Also reports a backend failure met
    /// earlier inside a drop, if any.
    pub fn process_events(&self) -> Result<(), AllocError> {
        let mut st = self.state.lock();
        if let Some(e) = st.deferred.take() {
            return Err(AllocError::Backend(e));
        }
        st.process_events()?;
        Ok(())
    }

    /// Synchronizes every pending event (as PyTorch's `empty_cache` does), then releases
    /// every free whole-segment cached block to the device.
    pub fn empty_cache(&self) -> Result<(), AllocError> {
        self.state.lock().release_cached()?;
        Ok(())
    }

    /// A copy of the statistics, with the fragmentation of the cached free blocks (an
    /// O(free blocks) walk of the pools under the lock).
    pub fn stats(&self) -> AllocatorStats {
        let st = self.state.lock();
        let mut stats = st.stats.clone();
        stats.fragmentation = st.fragmentation();
        stats
    }

    /// Resets every peak to its current value.
    pub fn reset_peak_stats(&self) {
        self.state.lock().stats.reset_peaks();
    }

    /// Turns lazy coalescing (the exact-size fast path of parked free blocks) off or on.
    /// Its effects are exactly those of eager merging, so this only exists for tests that
    /// check that equivalence by running an eager twin.
    #[doc(hidden)]
    pub fn set_lazy_coalescing(&self, on: bool) {
        let mut st = self.state.lock();
        st.flush_bins();
        st.bin_capacity = if on { super::bins::BIN_CAPACITY } else { 0 };
    }

    /// Segments, blocks and the trace (records a `snapshot` trace entry).
    pub fn snapshot(&self) -> Snapshot {
        self.state.lock().snapshot()
    }

    /// Registers a free-memory callback, called (without the allocator lock) when no cached
    /// block fits, before new device memory is requested.
    pub fn add_free_memory_callback(&self, cb: Arc<FreeMemoryCallback>) -> CallbackId {
        self.free_callbacks.add(cb)
    }

    /// Unregisters a free-memory callback.
    pub fn remove_free_memory_callback(&self, id: CallbackId) {
        self.free_callbacks.remove(id);
    }

    /// Where a viewer snapshot (pickle) is written at out-of-memory, before the error
    /// returns; `{device}` in the path becomes the device index. Initialized from
    /// `MEMREUSE_OOM_SNAPSHOT`; `None` turns it off. The error's message names the file.
    pub fn set_oom_snapshot_path(&self, path: Option<PathBuf>) {
        *self.oom_snapshot.lock() = path;
    }

    /// The OOM snapshot path template, if set.
    pub fn oom_snapshot_path(&self) -> Option<PathBuf> {
        self.oom_snapshot.lock().clone()
    }

    /// Registers an OOM observer, called (without the allocator lock) before an
    /// out-of-memory error is returned.
    pub fn add_oom_observer(&self, cb: Arc<OomObserver>) -> CallbackId {
        self.oom_observers.add(cb)
    }

    /// Unregisters an OOM observer.
    pub fn remove_oom_observer(&self, id: CallbackId) {
        self.oom_observers.remove(id);
    }
}
