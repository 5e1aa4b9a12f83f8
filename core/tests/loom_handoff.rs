//! Loom model of the mode-2 shelf hand-off between the watchdog and the main thread.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p memreuse-core --test loom_handoff
//! --release` (`.ci/loom` does, in its own target dir). Loom explores every interleaving
//! of the real `Shelf` / `HandoffList` code (their locks and atomics are loom's under
//! `--cfg loom`).
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use memreuse_core::process_group::handoff::{HandoffList, Shelf};

/// Counts its own drops: released exactly once means the counter ends at the number of
/// items, and no item is dropped twice (a double release would over-count).
struct Item(Arc<AtomicUsize>);

impl Drop for Item {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn wait_racing_the_watchdog_releases_each_item_exactly_once_before_wait_returns() {
    loom::model(|| {
        let released = Arc::new(AtomicUsize::new(0));
        let shelf = Arc::new(Shelf::default());
        let list = Arc::new(HandoffList::<u32, Item>::default());
        shelf.stash(Item(Arc::clone(&released)));
        shelf.stash(Item(Arc::clone(&released)));

        // Watchdog: the work completed; hand its shelf over.
        let (wd_shelf, wd_list) = (Arc::clone(&shelf), Arc::clone(&list));
        let watchdog = loom::thread::spawn(move || {
            wd_list.hand_over(7, &wd_shelf);
        });

        // Main thread: wait() = release step, then drain the hand-off list.
        if shelf.mark_waited() {
            drop(shelf.unstash());
        }
        drop(list.drain());
        // Nothing of the work is held once wait() returned, whatever the interleaving.
        assert_eq!(released.load(Ordering::SeqCst), 2);

        watchdog.join().unwrap();
        assert!(list.is_empty());
        assert!(shelf.is_empty());
        assert_eq!(released.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn never_waited_work_is_handed_over_once_and_drained_by_the_main_thread() {
    loom::model(|| {
        let released = Arc::new(AtomicUsize::new(0));
        let shelf = Arc::new(Shelf::default());
        let list = Arc::new(HandoffList::<u32, Item>::default());
        shelf.stash(Item(Arc::clone(&released)));

        // Two watchdog passes race (a pass by the watchdog thread and the main thread's
        // own poll at a process-group call).
        let (a_shelf, a_list) = (Arc::clone(&shelf), Arc::clone(&list));
        let pass = loom::thread::spawn(move || a_list.hand_over(1, &a_shelf));
        let main_pass = list.hand_over(1, &shelf);
        let wd_pass = pass.join().unwrap();
        assert!(main_pass ^ wd_pass, "exactly one pass hands the shelf over");

        // The watchdog never dropped anything itself.
        assert_eq!(released.load(Ordering::SeqCst), 0);
        let drained = list.drain();
        assert_eq!(drained.len(), 1);
        drop(drained);
        assert_eq!(released.load(Ordering::SeqCst), 1);
    });
}
