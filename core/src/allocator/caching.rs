//! [`CachingAllocator`]: the public face, and the malloc chain that drops the lock around
//! callbacks and observers.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::Backend;
use crate::ids::{AllocationId, DevicePtr, WorkId};

use super::alloc_error::AllocError;
use super::callbacks::Registry;
use super::config::{AllocatorConfig, ConfigError};
use super::index::{BlockRef, HandOut};
use super::oom::{AtMiss, OomHooks, beyond_device};
use super::pending::EraseOutcome;
use super::pool::DEFAULT_LANE;
use super::segment_events::Subscribers;
use super::sizes::{pool_for, round_size, segment_size};
use super::snapshot::Snapshot;
use super::state::{Request, Setup, State};
use super::stats::AllocatorStats;
use super::storage::{Hand, Storage};
use super::stream_use::UseOwner;
use super::use_ledger::UseLedger;

/// With `lazy_reclaim`, events are processed at malloc only above this many pending events
/// (torch_npu's threshold) or on a cache miss.
pub const LAZY_RECLAIM_EVENTS: usize = 512;

/// A free-memory callback: frees what it can (typically by dropping storages) and returns
/// true if it freed something.
pub type FreeMemoryCallback = dyn Fn() -> bool + Send + Sync;

/// The stream-aware caching allocator of one device (docs/design.md §3). Share it as an `Arc`.
///
/// The hot path (a cached allocate or free) takes one `parking_lot` mutex. Free-memory
/// callbacks and OOM observers run without it.
///
/// # Failed event queries
/// A freed block whose event query or synchronization fails (a failed collective on the
/// stream that used it, say) is quarantined. The failure is the failed operation's to
/// report (the work's `wait`, the stream's synchronize already returned it), so the
/// allocator does not repeat it on unrelated calls: it logs one `tracing` warning per
/// block; the block is never reused while quarantined (`quarantined_bytes` in
/// [`AllocatorStats`]); every other request is served; and the block returns to the pool
/// after a synchronize of every stream that used it succeeds
/// ([`CachingAllocator::release_quarantined`], [`CachingAllocator::empty_cache`]).
///
/// # Streams of another device
/// [`CachingAllocator::allocate`] refuses a stream its backend does not own
/// ([`Backend::owns_stream`]) with [`AllocError::ForeignStream`];
/// [`CachingAllocator::try_record_stream`] does too, and
/// [`CachingAllocator::record_stream`] ignores such a stream (counting the call), so no
/// event is ever recorded on a stream this device cannot wait for.
pub struct CachingAllocator<B: Backend> {
    /// The backend and the configuration, held once (read without the lock; the locked
    /// state borrows them).
    pub(super) setup: Setup<B>,
    pub(super) state: Mutex<State<B>>,
    pub(super) free_callbacks: Registry<FreeMemoryCallback>,
    /// Last-resort callbacks (they may block), called only when the chain found no memory.
    pub(super) pressure_callbacks: Registry<FreeMemoryCallback>,
    /// Observers, explainers and the snapshot file of an out-of-memory.
    pub(super) oom: OomHooks,
    /// Declared stream uses of recent hand-outs, for race advice; `None` unless enabled.
    pub(super) use_ledger: Mutex<Option<UseLedger>>,
    /// Whether `use_ledger` is on (read without its lock on the hot path).
    pub(super) use_ledger_on: std::sync::atomic::AtomicBool,
    /// Segment-event subscribers and their delivery (`segment_events.rs`).
    pub(super) segment_subscribers: Subscribers,
    /// `release_lock_on_cudamalloc` (`unlocked_malloc.rs`).
    pub(super) release_lock_on_malloc: std::sync::atomic::AtomicBool,
}

impl<B: Backend> std::fmt::Debug for CachingAllocator<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("backend", &self.setup.backend.name())
            .field("device", &self.setup.backend.device_index())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Drop for CachingAllocator<B> {
    /// Returns every segment to the device. Storages keep their allocator alive, so only
    /// free and pending-free blocks remain here; pending events are waited for first.
    /// (Memory pools keep their allocator alive too, so every pool was released already.)
    fn drop(&mut self) {
        if let Err(e) = self.state.get_mut().release_cached(&self.setup) {
            tracing::warn!(%e, "memreuse allocator: could not release every segment on drop");
        }
        self.deliver_segment_events();
    }
}

impl<B: Backend> CachingAllocator<B> {
    /// An allocator over `backend` with `config`, refusing a setting the backend cannot
    /// provide: `expandable_segments:True` on a backend without the `virtual_memory`
    /// capability is [`ConfigError::Unsupported`] naming the backend. Prefer this to
    /// [`CachingAllocator::new`] wherever the configuration comes from a user.
    pub fn try_new(backend: Arc<B>, config: AllocatorConfig) -> Result<Arc<Self>, ConfigError> {
        if config.expandable_segments && !backend.capabilities().virtual_memory {
            return Err(ConfigError::Unsupported {
                key: "expandable_segments",
                backend: backend.name().to_owned(),
                needs: "the virtual_memory capability (reserve, map and unmap device pages)",
            });
        }
        if config.expandable_segments {
            let granularity = backend.vm_granularity().unwrap_or(1).max(1);
            if config.expandable_segments_page_size % granularity != 0 {
                return Err(ConfigError::PageSize {
                    page: config.expandable_segments_page_size,
                    granularity,
                    backend: backend.name().to_owned(),
                });
            }
        }
        Ok(Self::new(backend, config))
    }

    /// An allocator over `backend` with `config`.
    ///
    /// Infallible, as PyTorch's allocator is: `expandable_segments:True` on a backend
    /// without virtual memory falls back to ordinary segments with a `tracing` warning
    /// (PyTorch warns and does the same). [`CachingAllocator::try_new`] refuses it instead,
    /// and a large-pool page size that is not a multiple of the backend's granularity,
    /// which this rounds up to one.
    pub fn new(backend: Arc<B>, mut config: AllocatorConfig) -> Arc<Self> {
        if config.expandable_segments && !backend.capabilities().virtual_memory {
            tracing::warn!(
                backend = backend.name(),
                "memreuse allocator: expandable_segments:True needs virtual memory, which this backend lacks; using ordinary segments"
            );
            config.expandable_segments = false;
        }
        let state = State::new(&config);
        let release_lock = config.release_lock_on_malloc;
        Arc::new(CachingAllocator {
            setup: Setup { backend, config },
            state: Mutex::new(state),
            free_callbacks: Registry::new(),
            pressure_callbacks: Registry::new(),
            oom: OomHooks::from_env(),
            use_ledger: Mutex::new(None),
            use_ledger_on: std::sync::atomic::AtomicBool::new(false),
            segment_subscribers: Subscribers::default(),
            release_lock_on_malloc: std::sync::atomic::AtomicBool::new(release_lock),
        })
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.setup.backend
    }

    /// The configuration.
    pub fn config(&self) -> &AllocatorConfig {
        &self.setup.config
    }

    /// Allocates at least `bytes` bytes for use on `stream` (0 bytes gives a 512-byte block).
    ///
    /// Chain: process completed events -> best fit -> free-memory callbacks, best fit ->
    /// garbage collection -> new segment -> a cached block of a `use_on_oom` memory pool ->
    /// release cached oversize blocks, new segment ->
    /// synchronize pending events and release all unsplit cached blocks, best fit, new
    /// segment -> memory-pressure callbacks, then the release and retry again while they
    /// free something -> out of memory (trace entry, `num_ooms`, observers, error).
    ///
    /// Inside a [`super::PoolScope`] of this thread that covers `stream`, the block comes
    /// from that memory pool ([`super::MemPool`]).
    #[inline]
    pub fn allocate(
        self: &Arc<Self>,
        bytes: u64,
        stream: &B::Stream,
    ) -> Result<Storage<B>, AllocError> {
        self.allocate_in(bytes, stream, None)
    }

    /// [`CachingAllocator::allocate`] from the memory pool `pool`, whatever the scopes say.
    /// A pool that was dropped or closed, or that is not this allocator's, is refused
    /// ([`super::PoolError`]); [`super::MemPool::allocate`] is the usual way in.
    pub fn allocate_in_pool(
        self: &Arc<Self>,
        pool: super::MemPoolId,
        bytes: u64,
        stream: &B::Stream,
    ) -> Result<Storage<B>, AllocError> {
        self.allocate_in(bytes, stream, Some(pool))
    }

    #[inline]
    fn allocate_in(
        self: &Arc<Self>,
        bytes: u64,
        stream: &B::Stream,
        pool: Option<super::MemPoolId>,
    ) -> Result<Storage<B>, AllocError> {
        if !self.setup.backend.owns_stream(stream) {
            return Err(self.foreign_stream("allocate"));
        }
        let size = round_size(bytes, &self.setup.config.roundup_power2_divisions);
        let mut req = Request {
            stream,
            stream_id: self.setup.backend.stream_id(stream),
            requested: bytes,
            size,
            pool: pool_for(size),
            alloc_size: segment_size(size),
            lane: DEFAULT_LANE,
        };
        let (out, allocation_id) = self.malloc(&mut req, pool)?;
        if self
            .use_ledger_on
            .load(std::sync::atomic::Ordering::Relaxed)
            && let Some(l) = self.use_ledger.lock().as_mut()
        {
            l.handed_out(allocation_id);
        }
        self.setup
            .backend
            .annotate_allocation(DevicePtr(out.ptr), out.size, allocation_id);
        Ok(Storage {
            allocator: Arc::clone(self),
            hand: Hand {
                block: out.block,
                ptr: DevicePtr(out.ptr),
                size: out.size,
                requested: bytes,
                stream: stream.clone(),
                stream_id: req.stream_id,
                allocation_id,
            },
        })
    }

    #[cold]
    pub(super) fn foreign_stream(&self, call: &'static str) -> AllocError {
        AllocError::ForeignStream {
            call,
            backend: self.setup.backend.name().to_owned(),
            device: self.setup.backend.device_index(),
        }
    }

    fn malloc(
        &self,
        req: &mut Request<'_, B>,
        pool: Option<super::MemPoolId>,
    ) -> Result<(HandOut, AllocationId), AllocError> {
        let mut st = self.state.lock();
        if pool.is_some() || st.pools.routing() {
            req.lane = st.pools.lane_for(pool, req.stream_id)?;
        }
        let out = self
            .malloc_locked(&mut st, req)
            .map(|out| (out, st.next_allocation_id()));
        let deliver = st.seg_events.pending();
        drop(st);
        if deliver {
            self.deliver_segment_events();
        }
        out
    }

    /// Delivers the queued segment events to the subscribers, outside the lock
    /// (`segment_events.rs`).
    #[cold]
    pub(super) fn deliver_segment_events(&self) {
        self.segment_subscribers.deliver(
            || self.state.lock().seg_events.take(),
            || self.state.lock().seg_events.pending(),
        );
    }

    fn malloc_locked(
        &self,
        st: &mut parking_lot::MutexGuard<'_, State<B>>,
        req: &Request<'_, B>,
    ) -> Result<HandOut, AllocError> {
        let su = &self.setup;
        st.index.tick();
        if !st.pending.is_empty()
            && (!su.config.lazy_reclaim || st.pending.in_flight() > LAZY_RECLAIM_EVENTS)
        {
            st.process_events(su);
        }
        if let Some(out) = st.serve(req) {
            return Ok(out);
        }
        self.malloc_slow(st, req)
    }

    #[cold]
    fn malloc_slow(
        &self,
        st: &mut parking_lot::MutexGuard<'_, State<B>>,
        req: &Request<'_, B>,
    ) -> Result<HandOut, AllocError> {
        let su = &self.setup;
        // What was pending when the request missed the cache, taken just before a step
        // that changes it (never on every miss: `AtMiss`).
        let mut at_miss = AtMiss::default();
        if beyond_device(st, su, req) {
            return Err(AllocError::OutOfMemory(
                self.oom.fail(self, st, su, req, at_miss),
            ));
        }
        if su.config.lazy_reclaim {
            at_miss.capture(st);
            st.process_events(su);
            if let Some(out) = st.serve(req) {
                return Ok(out);
            }
        }
        if !self.free_callbacks.is_empty() {
            at_miss.capture(st);
            // Callbacks drop storages, which re-enters `drop_handle`: never hold the lock.
            let freed = parking_lot::MutexGuard::unlocked(st, || {
                let mut freed = false;
                for cb in self.free_callbacks.snapshot() {
                    freed |= cb();
                }
                freed
            });
            if freed {
                st.process_events(su);
                if let Some(out) = st.serve(req) {
                    return Ok(out);
                }
            }
        }
        st.garbage_collect(su)?;
        if let Some(slot) = self.new_segment(st, req, false)? {
            return Ok(st.hand_out(slot, req));
        }
        // PyTorch's `try_mempool_fallback`: a `use_on_oom` pool's cached block before the
        // costly releases.
        if let Some(out) = st.serve_on_oom(req) {
            return Ok(out);
        }
        if st.release_available_for(su, req)?
            && let Some(slot) = self.new_segment(st, req, false)?
        {
            return Ok(st.hand_out(slot, req));
        }
        at_miss.capture(st);
        st.release_cached(su)?;
        // Blocks freed by the synchronization may fit without new memory (PyTorch goes
        // straight to the device here). Not with expandable segments: there PyTorch's
        // growth (`find_expandable_block`) is what finds them, in address order, and
        // serving them by best fit first changes which block a request gets.
        if !su.config.expandable_segments
            && let Some(out) = st.serve(req)
        {
            return Ok(out);
        }
        if let Some(slot) = self.new_segment(st, req, true)? {
            return Ok(st.hand_out(slot, req));
        }
        if let Some(out) = self.relieve_pressure(st, su, req)? {
            return Ok(out);
        }
        Err(AllocError::OutOfMemory(
            self.oom.fail(self, st, su, req, at_miss),
        ))
    }

    /// The last step before out of memory: the memory-pressure callbacks (which may block,
    /// so only now) run without the lock; while one freed something, the cache is released
    /// and the request retried.
    #[cold]
    fn relieve_pressure(
        &self,
        st: &mut parking_lot::MutexGuard<'_, State<B>>,
        su: &Setup<B>,
        req: &Request<'_, B>,
    ) -> Result<Option<HandOut>, AllocError> {
        while !self.pressure_callbacks.is_empty() {
            let freed = parking_lot::MutexGuard::unlocked(st, || {
                let mut freed = false;
                for cb in self.pressure_callbacks.snapshot() {
                    freed |= cb();
                }
                freed
            });
            if !freed {
                break;
            }
            st.release_cached(su)?;
            if let Some(out) = st.serve(req) {
                return Ok(Some(out));
            }
            if let Some(slot) = self.new_segment(st, req, true)? {
                return Ok(Some(st.hand_out(slot, req)));
            }
        }
        Ok(None)
    }

    /// Drops one handle of `block`; the last one frees the block.
    #[inline]
    pub(crate) fn drop_handle(&self, block: BlockRef) {
        self.state.lock().free_user(&self.setup, block);
    }

    /// Counts one more handle of the allocated `block`; false when it is not allocated.
    pub(crate) fn add_handle(&self, block: BlockRef) -> bool {
        self.state.lock().index.add_handle(block)
    }

    /// Handles of the allocated `block`.
    pub(crate) fn handle_count(&self, block: BlockRef) -> u32 {
        self.state.lock().index.handles(block)
    }

    fn owns(&self, storage: &Storage<B>) -> bool {
        std::ptr::eq(Arc::as_ptr(&storage.allocator), self)
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

    /// As [`CachingAllocator::record_stream`], but a stream of another device is refused
    /// with [`AllocError::ForeignStream`] (nothing recorded) instead of ignored.
    pub fn try_record_stream(
        &self,
        storage: &Storage<B>,
        stream: &B::Stream,
    ) -> Result<(), AllocError> {
        if self.record(storage, stream, UseOwner::User) {
            Ok(())
        } else {
            Err(self.foreign_stream("record_stream"))
        }
    }

    /// Records the use; false (nothing recorded, the call counted) for a stream of another
    /// device. The one writer of `record_stream_calls`: every call counts once, whatever
    /// it records.
    fn record(&self, storage: &Storage<B>, stream: &B::Stream, owner: UseOwner) -> bool {
        let backend = &self.setup.backend;
        let foreign = !backend.owns_stream(stream);
        if foreign {
            tracing::warn!(
                device = backend.device_index(),
                "memreuse allocator: record_stream with a stream of another device ignored"
            );
        }
        let id = (!foreign).then(|| backend.stream_id(stream));
        let mut st = self.state.lock();
        st.counts.record_stream_calls += 1;
        let Some(id) = id else {
            return false;
        };
        if self.owns(storage) {
            st.record_use(storage.block_ref(), stream, id, owner);
            drop(st);
            if self
                .use_ledger_on
                .load(std::sync::atomic::Ordering::Relaxed)
                && let Some(l) = self.use_ledger.lock().as_mut()
            {
                l.declared(storage.allocation_id(), id);
            }
        }
        true
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
        let block = self.owns(storage).then(|| storage.block_ref());
        self.erase(block, work, stream, current)
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
        self.erase(Some(block), work, stream, current)
    }

    /// The one writer of `erase_stream_calls`: every call counts once; `None` is a storage
    /// of another allocator ([`EraseOutcome::StaleBlock`]).
    fn erase(
        &self,
        block: Option<BlockRef>,
        work: WorkId,
        stream: &B::Stream,
        current: &B::Stream,
    ) -> EraseOutcome {
        let ids = block.map(|b| {
            let backend = &self.setup.backend;
            (b, backend.stream_id(stream), backend.stream_id(current))
        });
        let mut st = self.state.lock();
        st.counts.erase_stream_calls += 1;
        match ids {
            Some((b, id, current)) => st.erase(b, work, id, current),
            None => EraseOutcome::StaleBlock,
        }
    }

    /// Frees every pending block whose events completed. Also reports a backend failure met
    /// earlier inside a drop, if any.
    pub fn process_events(&self) -> Result<(), AllocError> {
        let mut st = self.state.lock();
        if let Some(e) = st.deferred.take() {
            return Err(AllocError::Backend(e));
        }
        st.process_events(&self.setup);
        Ok(())
    }

    /// Synchronizes every pending event (as PyTorch's `empty_cache` does), then releases
    /// every free whole-segment cached block to the device. Quarantined blocks whose streams
    /// now synchronize return to the pool first; a pending block that cannot be
    /// synchronized is quarantined (logged, not returned) and the rest still released. The
    /// error returned is a failure to release a segment to the device.
    pub fn empty_cache(&self) -> Result<(), AllocError> {
        let released = self.state.lock().release_cached(&self.setup);
        self.deliver_segment_events();
        Ok(released?)
    }

    /// Synchronizes the streams that used each quarantined block and returns the blocks
    /// whose streams all synchronized to the pool. Returns the bytes that went back, or the
    /// first synchronize failure (those blocks stay quarantined; the others were tried).
    pub fn release_quarantined(&self) -> Result<u64, AllocError> {
        Ok(self.state.lock().release_quarantined(&self.setup)?)
    }

    /// A copy of the statistics, with the fragmentation of the cached free blocks (an
    /// O(free blocks) walk of the pools under the lock).
    pub fn stats(&self) -> AllocatorStats {
        self.state.lock().stats()
    }

    /// Resets every peak to its current value.
    pub fn reset_peak_stats(&self) {
        self.state.lock().index.reset_peaks();
    }

    /// Segments, blocks and the trace (records a `snapshot` trace entry).
    pub fn snapshot(&self) -> Snapshot {
        self.state.lock().snapshot(&self.setup)
    }
}
