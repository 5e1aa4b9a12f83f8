//! The smallest device a setting fits on: bisection over capacities, each a full replay.
//!
//! Reserved memory is made of segments whose sizes are multiples of 2 MiB, so capacities
//! are searched in 2 MiB steps between the live peak (no allocator fits below it) and the
//! setting's reserved peak on an unlimited device (which fits by construction). Fitting is
//! not strictly monotonic in the capacity (on a smaller device the out-of-memory retry frees
//! cached blocks and the layout changes), so the answer is a capacity that fits while the
//! one 2 MiB below it does not: the smallest such capacity the bisection meets, not
//! necessarily the smallest of all.

use memreuse_core::{AllocError, AllocatorConfig};

use super::history::ReplayHistory;
use super::replay::replay;

/// The granularity of the search: segment sizes are multiples of it.
pub const CAPACITY_STEP: u64 = 2 << 20;

/// The smallest capacity (a multiple of [`CAPACITY_STEP`]) found on which `history` fits
/// under `config`, given `unlimited_peak`, its reserved peak without a limit.
pub fn smallest_fitting_capacity(
    history: &ReplayHistory,
    config: &AllocatorConfig,
    unlimited_peak: u64,
) -> Result<u64, AllocError> {
    let fits = |capacity: u64| -> Result<bool, AllocError> {
        let figures = replay(history, config.clone(), capacity, &mut |_| {})?;
        Ok(figures.first_oom_entry.is_none())
    };
    // In steps: `hi` fits; `lo` is known not to fit (or is the floor).
    let mut hi = unlimited_peak.div_ceil(CAPACITY_STEP);
    let mut lo = (history.live_peak_bytes() / CAPACITY_STEP).saturating_sub(1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid * CAPACITY_STEP)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi * CAPACITY_STEP)
}
