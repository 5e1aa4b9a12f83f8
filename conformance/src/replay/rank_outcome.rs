//! What one rank of a replay observed: its checks, counters, peaks, series and files, which
//! the replay sums into the run's record.

use super::capture::Artifact;

/// What one rank observed.
#[derive(Debug, Default)]
pub struct RankOutcome {
    /// Global rank.
    pub rank: usize,
    /// The contents of every `check` (the bytes of each value in its own type), in
    /// program order.
    pub checks: Vec<Vec<u8>>,
    /// Checks that differed from the reference.
    pub mismatches: u64,
    /// Bytes still allocated after teardown and group shutdown.
    pub leaked_bytes: u64,
    /// Allocator peaks.
    pub peak_allocated_bytes: u64,
    /// Allocator peaks.
    pub peak_reserved_bytes: u64,
    /// Allocator and process-group counters.
    pub reuse_events_created: u64,
    /// Counter.
    pub record_stream_calls: u64,
    /// Counter.
    pub erase_stream_calls: u64,
    /// Counter.
    pub shelf_stashes: u64,
    /// Counter.
    pub shelf_unstashed_by_watchdog: u64,
    /// Counter.
    pub alloc_retries: u64,
    /// Counter.
    pub ooms: u64,
    /// Device allocation calls of the allocator (`AllocatorStats::num_device_alloc`).
    pub device_alloc_calls: u64,
    /// Device free calls of the allocator (`AllocatorStats::num_device_free`).
    pub device_free_calls: u64,
    /// Page map calls of expandable segments (`AllocatorStats::num_device_map`).
    pub device_map_calls: u64,
    /// Page unmap calls of expandable segments (`AllocatorStats::num_device_unmap`).
    pub device_unmap_calls: u64,
    /// (allocated, reserved) after every op.
    pub series: Vec<(u64, u64)>,
    /// Wall time of each body iteration.
    pub iteration_ms: Vec<f64>,
    /// Why the rank stopped early.
    pub error: Option<String>,
    /// Snapshot, timeline and metrics files written (`--snapshot-dir`, `--trace-dir`).
    pub artifacts: Vec<Artifact>,
    /// Files that could not be written.
    pub artifact_errors: Vec<String>,
}

impl RankOutcome {
    pub(crate) fn failed(rank: usize, error: String) -> RankOutcome {
        RankOutcome {
            rank,
            error: Some(error),
            ..RankOutcome::default()
        }
    }
}
