//! The never-waited warning: a work seen complete that nobody waited, still holding memory
//! (its shelf in mode 2, or work-owned stream uses on live tensors in modes 1 and 3, which
//! make their frees wait for the comm stream), is reported once, after the group's
//! `unwaited_warning_after`. A shelf handed off to the drain list still counts until it is
//! drained (the watchdog hands it over in the same pass that first sees the work complete).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::shared::PgShared;
use super::work_state::WorkState;
use crate::allocator::Storage;
use crate::backend::Backend;

impl<B: Backend> PgShared<B> {
    /// A work just seen complete: remembered if it was never waited and still holds memory.
    pub(super) fn note_unwaited(&self, w: &Arc<WorkState<B>>) {
        let _ = w.seen_done_at.set(Instant::now());
        if !w.warned_unwaited.load(Ordering::Relaxed) && self.unwaited_bytes(w) > 0 {
            self.unwaited.lock().push(Arc::clone(w));
        }
    }

    /// Bytes held for `w` without it having been waited: what its policy holds, and its
    /// shelf on the hand-off list, not drained yet (still held, by the list).
    fn unwaited_bytes(&self, w: &WorkState<B>) -> u64 {
        if w.held.shelf.is_waited() {
            return 0;
        }
        let handed: u64 = self.to_unstash.with_entries(|entries| {
            entries
                .iter()
                .filter(|(k, _)| k.id == w.id)
                .flat_map(|(_, items)| items.iter().map(Storage::size))
                .sum()
        });
        w.held.unwaited_bytes() + handed
    }

    /// Warns, once per work, about remembered works past the warning delay that are still
    /// unwaited and holding memory; forgets works waited or released since.
    pub(super) fn warn_unwaited(&self) {
        let works: Vec<Arc<WorkState<B>>> = self.unwaited.lock().clone();
        if works.is_empty() {
            return;
        }
        let after = self.settings.unwaited_warning_after;
        let mut done = Vec::new();
        for w in works {
            let bytes = self.unwaited_bytes(&w);
            if bytes == 0 {
                done.push(w.id);
                continue;
            }
            if w.seen_done_at.get().is_some_and(|t| t.elapsed() >= after)
                && !w.warned_unwaited.swap(true, Ordering::AcqRel)
            {
                self.counters
                    .never_waited_warnings
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    work = %w.id,
                    op = w.op,
                    bytes,
                    "memreuse process group: {} ({}) completed but was never waited and still holds {}; call wait() on it (or drop the tensors it used)",
                    w.id,
                    w.op,
                    crate::allocator::FormatSize(bytes),
                );
                done.push(w.id);
            }
        }
        if !done.is_empty() {
            self.unwaited.lock().retain(|w| !done.contains(&w.id));
        }
    }
}
