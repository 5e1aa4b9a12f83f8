//! The smallest device a setting fits on: the smallest capacity on the 2 MiB grid whose
//! replay runs out of memory nowhere.
//!
//! Fitting is not monotonic in the capacity: on a smaller device the out-of-memory chain
//! releases cached blocks (and the garbage collector's threshold moves), the layout after it
//! differs, and a history that fails at some capacity can fit at a smaller one. A bisection
//! therefore finds *a* capacity that fits while the one below it does not, not necessarily
//! the smallest: on `traces/llama.trace.gz` with `expandable_segments:True` the history fits
//! at 4038-4042 MiB, runs out of memory at 4044-4050, fits at 4052, fails at 4054-4056 and
//! fits from 4058 up; the bisection this replaced answered 4058 MiB. The search is
//! exhaustive instead: it replays every capacity on the
//! grid upwards from the live peak (no allocator fits below it, since every byte the
//! program holds at once is reserved) and returns the first that fits. A capacity at or above
//! the setting's reserved peak on an unlimited device fits by construction for every setting
//! whose rules do not read the capacity (no request fails, so nothing that depends on it
//! runs); settings that read it (`per_process_memory_fraction`,
//! `garbage_collection_threshold`) are searched on past that peak, up to twice it.
//!
//! Cost: one replay per 2 MiB between the live peak and the answer.

use memreuse_core::{AllocError, AllocatorConfig};

use super::history::ReplayHistory;
use super::replay::replay;

/// The granularity of the search: segment sizes are multiples of it.
pub const CAPACITY_STEP: u64 = 2 << 20;

/// The smallest capacity (a multiple of [`CAPACITY_STEP`]) on which `history` fits under
/// `config`, given `unlimited_peak`, its reserved peak without a limit; `None` when nothing
/// up to twice that peak fits (only possible for settings that read the capacity).
pub fn smallest_fitting_capacity(
    history: &ReplayHistory,
    config: &AllocatorConfig,
    unlimited_peak: u64,
) -> Result<Option<u64>, AllocError> {
    let first = history.live_peak_bytes().div_ceil(CAPACITY_STEP).max(1);
    let peak = unlimited_peak.div_ceil(CAPACITY_STEP).max(first);
    let reads_capacity = config.per_process_memory_fraction.is_some()
        || config.garbage_collection_threshold.is_some();
    let last = if reads_capacity {
        peak.saturating_mul(2)
    } else {
        peak
    };
    for step in first..=last {
        let capacity = step * CAPACITY_STEP;
        let figures = replay(history, config.clone(), capacity, &mut |_| {})?;
        if figures.first_oom_entry.is_none() {
            return Ok(Some(capacity));
        }
    }
    Ok(None)
}
