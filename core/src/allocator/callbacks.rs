//! Registries of free-memory callbacks and OOM observers.
//!
//! They live behind their own small lock, not the allocator's, and are cloned out before
//! being called, so a callback may drop storages (re-entering `free`), register callbacks,
//! or read stats without deadlocking.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Identity of a registered callback or observer, for removal.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CallbackId(pub u64);

/// Callbacks of one kind, in registration order.
pub(crate) struct Registry<F: ?Sized> {
    entries: Mutex<Vec<(CallbackId, Arc<F>)>>,
}

impl<F: ?Sized> Registry<F> {
    pub fn new() -> Self {
        Registry {
            entries: Mutex::new(Vec::new()),
        }
    }

    pub fn add(&self, f: Arc<F>) -> CallbackId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = CallbackId(NEXT.fetch_add(1, Ordering::Relaxed));
        self.entries.lock().push((id, f));
        id
    }

    pub fn remove(&self, id: CallbackId) {
        self.entries.lock().retain(|(i, _)| *i != id);
    }

    pub fn is_empty(&self) -> bool {
        self.entries.lock().is_empty()
    }

    /// A copy of the callbacks, to call after the registry lock is released.
    pub fn snapshot(&self) -> Vec<Arc<F>> {
        self.entries
            .lock()
            .iter()
            .map(|(_, f)| Arc::clone(f))
            .collect()
    }
}
