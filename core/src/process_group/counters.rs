//! Process-group counters (the allocator keeps its own: record_stream calls, erase calls,
//! reuse events).

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters, updated with relaxed atomics (they are statistics, not synchronization).
#[derive(Default, Debug)]
pub(crate) struct PgCounters {
    pub(crate) works_issued: AtomicU64,
    pub(crate) works_failed: AtomicU64,
    pub(crate) shelf_stashes: AtomicU64,
    pub(crate) shelf_unstashed_by_watchdog: AtomicU64,
    pub(crate) shelf_released_by_poll: AtomicU64,
    pub(crate) shelf_released_by_oom_callback: AtomicU64,
    pub(crate) works_waited_by_oom_callback: AtomicU64,
    pub(crate) p2p_record_stream_fallbacks: AtomicU64,
    pub(crate) never_waited_warnings: AtomicU64,
}

/// A snapshot of a process group's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PgStats {
    /// Works issued (collectives, p2p, batches, barriers).
    pub works_issued: u64,
    /// Works that ended in an error (failure or timeout).
    pub works_failed: u64,
    /// Tensors stashed on shelves (mode 2).
    pub shelf_stashes: u64,
    /// Shelves the watchdog moved to the to-unstash list (drained by the main thread).
    pub shelf_unstashed_by_watchdog: u64,
    /// Shelves released because the main thread found their work complete at a
    /// process-group call.
    pub shelf_released_by_poll: u64,
    /// Shelves released by the allocator's free-memory callback before an OOM.
    pub shelf_released_by_oom_callback: u64,
    /// In-flight works the allocator's memory-pressure callback waited for (mode 2, an
    /// allocation about to fail while their shelves held memory).
    pub works_waited_by_oom_callback: u64,
    /// Point-to-point works that fell back to `record_stream` in mode 2.
    pub p2p_record_stream_fallbacks: u64,
    /// Works warned about once: complete, never waited, still holding memory.
    pub never_waited_warnings: u64,
}

impl PgCounters {
    pub(crate) fn snapshot(&self) -> PgStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PgStats {
            works_issued: r(&self.works_issued),
            works_failed: r(&self.works_failed),
            shelf_stashes: r(&self.shelf_stashes),
            shelf_unstashed_by_watchdog: r(&self.shelf_unstashed_by_watchdog),
            shelf_released_by_poll: r(&self.shelf_released_by_poll),
            shelf_released_by_oom_callback: r(&self.shelf_released_by_oom_callback),
            works_waited_by_oom_callback: r(&self.works_waited_by_oom_callback),
            p2p_record_stream_fallbacks: r(&self.p2p_record_stream_fallbacks),
            never_waited_warnings: r(&self.never_waited_warnings),
        }
    }
}
