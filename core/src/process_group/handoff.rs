//! The shelf hand-off between the watchdog and the main thread (mode 2).
//!
//! Three parties touch a work's shelf: the main thread at `wait()`, the watchdog when it
//! sees the work complete, and the main thread again when it drains what the watchdog
//! handed over (or the process group's drop). The rules, model-checked by loom in
//! `core/tests/loom_handoff.rs`:
//! - every stashed item is released exactly once (never lost, never twice);
//! - the watchdog never drops an item itself: it moves items to the hand-off list;
//! - after `wait()` returns (release + drain), nothing of that work is held, even when
//!   the watchdog was halfway through handing it over.

use crate::sync::{AtomicBool, Mutex, Ordering};

/// A locked list of strong handles kept alive until their work is known to be done.
#[derive(Debug)]
pub struct Shelf<T> {
    items: Mutex<Vec<T>>,
    waited: AtomicBool,
}

impl<T> Default for Shelf<T> {
    fn default() -> Self {
        Shelf {
            items: Mutex::new(Vec::new()),
            waited: AtomicBool::new(false),
        }
    }
}

impl<T> Shelf<T> {
    /// Keeps `item` alive until it is released.
    pub fn stash(&self, item: T) {
        self.items.lock().push(item);
    }

    /// Takes every stashed item out; the shelf is empty afterwards. The caller drops the
    /// items outside every lock (dropping a storage re-enters the allocator).
    #[must_use = "dropping the returned items is what releases them"]
    pub fn unstash(&self) -> Vec<T> {
        std::mem::take(&mut *self.items.lock())
    }

    /// True when nothing is stashed.
    pub fn is_empty(&self) -> bool {
        self.items.lock().is_empty()
    }

    /// Runs `f` on the stashed items under the shelf's lock (to measure them; `f` must
    /// not touch the shelf).
    pub fn with_items<R>(&self, f: impl FnOnce(&[T]) -> R) -> R {
        f(&self.items.lock())
    }

    /// Number of stashed items.
    pub fn len(&self) -> usize {
        self.items.lock().len()
    }

    /// Marks the shelf's work as waited; true for the first caller only, who then runs the
    /// release step.
    pub fn mark_waited(&self) -> bool {
        !self.waited.swap(true, Ordering::AcqRel)
    }

    /// True once `wait()` ran its release step.
    pub fn is_waited(&self) -> bool {
        self.waited.load(Ordering::Acquire)
    }
}

/// The list the watchdog fills with the items of completed works and the main thread
/// drains. `K` identifies the work (the draining thread re-observes its completion).
#[derive(Debug)]
pub struct HandoffList<K, T> {
    entries: Mutex<Vec<(K, Vec<T>)>>,
}

impl<K, T> Default for HandoffList<K, T> {
    fn default() -> Self {
        HandoffList {
            entries: Mutex::new(Vec::new()),
        }
    }
}

impl<K, T> HandoffList<K, T> {
    /// Watchdog side: the work `key` completed; move what its shelf holds to the list
    /// unless `wait()` already released it. Returns whether anything was moved.
    pub fn hand_over(&self, key: K, shelf: &Shelf<T>) -> bool {
        // Take the list lock *before* emptying the shelf: a `wait()` that finds the shelf
        // already empty then blocks in `drain` until these items are on the list, so it
        // never returns while they sit in this thread's hands (lock order: list, shelf).
        let mut entries = self.entries.lock();
        if shelf.is_waited() {
            return false;
        }
        let items = shelf.unstash();
        if items.is_empty() {
            return false;
        }
        entries.push((key, items));
        true
    }

    /// Main-thread side: takes everything handed over so far.
    #[must_use = "dropping the returned items is what releases them"]
    pub fn drain(&self) -> Vec<(K, Vec<T>)> {
        std::mem::take(&mut *self.entries.lock())
    }

    /// True when nothing waits to be drained.
    pub fn is_empty(&self) -> bool {
        self.entries.lock().is_empty()
    }

    /// Runs `f` on what waits to be drained, under the list's lock (to measure it; `f`
    /// must not touch the list).
    pub fn with_entries<R>(&self, f: impl FnOnce(&[(K, Vec<T>)]) -> R) -> R {
        f(&self.entries.lock())
    }
}
