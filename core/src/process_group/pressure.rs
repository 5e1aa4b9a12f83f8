//! Mode 2 under memory pressure: the allocator's memory-pressure callback, the last step
//! before an out-of-memory error, waits for an in-flight work whose shelf alone keeps
//! dropped tensors alive and releases them, so the allocation can be retried. Modes 0, 1
//! and 3 need no such step: their dropped tensors are pending frees, which the allocator
//! itself synchronizes before it gives up.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::shared::PgShared;
use super::work_state::WorkState;
use crate::backend::Backend;
use crate::ids::DevicePtr;

impl<B: Backend> PgShared<B> {
    /// The allocator's memory-pressure callback (an allocation is about to fail): first
    /// what completed since the free-memory callback ran; failing that, waits on this
    /// thread for the oldest in-flight, never-waited work whose shelf alone keeps a
    /// dropped tensor alive (releasing any other frees nothing), up to the group's
    /// timeout (past it the work fails as a timeout, as the watchdog would fail it), and
    /// releases it. One work per call: the allocator retries, and calls again while the
    /// request still does not fit. A work that failed is released as every failed work
    /// is (its error stays, for `wait()` and `first_failure`).
    pub(super) fn release_inflight_for_oom(&self) -> bool {
        // Nothing shelved, nothing handed off: no scan either (modes 0, 1 and 3; a scan
        // would drop completed works whose names the OOM message still wants).
        if self.shelf_holders().is_empty() && self.to_unstash.is_empty() {
            return false;
        }
        if self.release_completed_for_oom() {
            return true;
        }
        let candidates = self.shelf_holders();
        // Only a release that frees memory is worth the wait: the oldest work holding a
        // storage that nothing but these shelves keeps alive (the user dropped it; a
        // tensor on two shelves counts once per shelf).
        let mut on_shelves: Vec<(DevicePtr, u32)> = Vec::new();
        for w in &candidates {
            w.held.shelf.with_items(|items| {
                for s in items {
                    match on_shelves.iter_mut().find(|(p, _)| *p == s.ptr()) {
                        Some((_, n)) => *n += 1,
                        None => on_shelves.push((s.ptr(), 1)),
                    }
                }
            });
        }
        let frees_memory = |w: &WorkState<B>| {
            w.held.shelf.with_items(|items| {
                items.iter().any(|s| {
                    let shelved = on_shelves
                        .iter()
                        .find(|(p, _)| *p == s.ptr())
                        .map_or(0, |(_, n)| *n);
                    self.allocator.handle_count(s.block_ref()) <= shelved
                })
            })
        };
        let Some(work) = candidates.iter().find(|w| frees_memory(w)).cloned() else {
            return false;
        };
        self.counters
            .works_waited_by_oom_callback
            .fetch_add(1, Ordering::Relaxed);
        if !self.block_until_done(&work, work.issued_at + self.settings.timeout) {
            // The deadline passed between two polls: this observation fails it.
            self.observe(&work);
        }
        self.release_completed_for_oom()
    }

    /// In-flight works never waited whose shelf holds something, oldest first.
    fn shelf_holders(&self) -> Vec<Arc<WorkState<B>>> {
        self.inflight
            .lock()
            .iter()
            .filter(|w| !w.held.shelf.is_waited() && !w.held.shelf.is_empty())
            .cloned()
            .collect()
    }
}
