//! Registration of the allocator's callbacks, observers and explainers, and of the use
//! ledger: what runs beside the malloc chain, never inside its lock.

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::Backend;

use super::caching::{CachingAllocator, FreeMemoryCallback};
use super::callbacks::CallbackId;
use super::oom::{OomExplainer, OomObserver};
use super::segment_events::{SegmentEventFailure, SegmentSubscriber};
use super::use_ledger::UseLedger;

impl<B: Backend> CachingAllocator<B> {
    /// Registers a free-memory callback, called (without the allocator lock) when no cached
    /// block fits, before new device memory is requested.
    pub fn add_free_memory_callback(&self, cb: Arc<FreeMemoryCallback>) -> CallbackId {
        self.free_callbacks.add(cb)
    }

    /// Unregisters a free-memory callback.
    pub fn remove_free_memory_callback(&self, id: CallbackId) {
        self.free_callbacks.remove(id);
    }

    /// Registers a memory-pressure callback: the last resort of an allocation about to fail
    /// (after the free-memory callbacks, the cache release and the synchronization of
    /// pending frees), called without the allocator lock. Unlike a free-memory callback it
    /// may block (a process group waits there for in-flight works whose shelves hold
    /// memory). While any returns true, the allocator releases its cache, retries, and
    /// calls them again if the request still does not fit.
    pub fn add_memory_pressure_callback(&self, cb: Arc<FreeMemoryCallback>) -> CallbackId {
        self.pressure_callbacks.add(cb)
    }

    /// Unregisters a memory-pressure callback.
    pub fn remove_memory_pressure_callback(&self, id: CallbackId) {
        self.pressure_callbacks.remove(id);
    }

    /// Starts recording which streams each hand-out is declared to be used on (the last
    /// `capacity` hand-outs), for [`crate::race::advise`]. Off by default: it costs a lock
    /// per hand-out and per `record_stream`.
    pub fn enable_use_ledger(&self, capacity: usize) {
        *self.use_ledger.lock() = Some(UseLedger::new(capacity));
        self.use_ledger_on
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A copy of the use ledger, if [`CachingAllocator::enable_use_ledger`] was called.
    pub fn use_ledger(&self) -> Option<UseLedger> {
        self.use_ledger.lock().clone()
    }

    /// Registers an explainer, called at out-of-memory without the allocator lock, that
    /// adds to the error's culprits what the caller knows (a process group names its
    /// works' operations and reports the shelves of works never waited).
    pub fn add_oom_explainer(&self, explain: Arc<OomExplainer>) -> CallbackId {
        self.oom.add_explainer(explain)
    }

    /// Removes an explainer registered with [`CachingAllocator::add_oom_explainer`].
    pub fn remove_oom_explainer(&self, id: CallbackId) {
        self.oom.remove_explainer(id);
    }

    /// Where a viewer snapshot (pickle) is written at out-of-memory, before the error
    /// returns; `{device}` in the path becomes the device index. Initialized from
    /// `MEMREUSE_OOM_SNAPSHOT`; `None` turns it off. The error's message names the file.
    pub fn set_oom_snapshot_path(&self, path: Option<PathBuf>) {
        self.oom.set_snapshot_path(path);
    }

    /// The OOM snapshot path template, if set.
    pub fn oom_snapshot_path(&self) -> Option<PathBuf> {
        self.oom.snapshot_path()
    }

    /// Registers an OOM observer, called (without the allocator lock) before an
    /// out-of-memory error is returned.
    pub fn add_oom_observer(&self, cb: Arc<OomObserver>) -> CallbackId {
        self.oom.add_observer(cb)
    }

    /// Unregisters an OOM observer.
    pub fn remove_oom_observer(&self, id: CallbackId) {
        self.oom.remove_observer(id);
    }

    /// Subscribes to segment events (docs/segment-events.md): from now on `subscriber` is
    /// told, outside the allocator's lock and in order, of every segment obtained or given
    /// back, every expandable range reserved or released and every page range mapped or
    /// unmapped. Segments that exist already are in [`CachingAllocator::snapshot`].
    pub fn subscribe_segment_events(&self, subscriber: Arc<SegmentSubscriber>) -> CallbackId {
        let id = self.segment_subscribers.add(subscriber);
        self.state.lock().seg_events.on = true;
        id
    }

    /// Unsubscribes; once none is left, events are no longer queued.
    pub fn unsubscribe_segment_events(&self, id: CallbackId) {
        let mut st = self.state.lock();
        if !self.segment_subscribers.remove(id) {
            st.seg_events.on = false;
        }
    }

    /// The subscriber failures (errors and panics) recorded since the last call, oldest
    /// first, and how many there were in all (the list keeps at most
    /// [`super::MAX_KEPT_FAILURES`]).
    pub fn take_segment_event_failures(&self) -> (Vec<SegmentEventFailure>, u64) {
        self.segment_subscribers.take_failures()
    }
}
