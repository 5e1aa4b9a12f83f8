//! Why a replay ran out of memory, in a few words: what the reader changes depends on it.
//!
//! In order (the first that holds is the reason):
//! - **live**: the bytes the program holds plus the request pass the device: no allocator
//!   setting can serve it;
//! - **cap**: the device had room for the request, the per-process limit
//!   (`per_process_memory_fraction`) did not;
//! - **rounding**: the device had the request's own bytes free, but not the segment or page
//!   it is rounded up to (a 20 MiB segment for a request between 1 and 10 MiB, a whole
//!   expandable page, `roundup_power2_divisions`), or the blocks handed out are larger than
//!   what was asked for;
//! - **fragmentation**: free device memory plus cached free blocks would hold the request,
//!   but no one free block (or run that can grow) does.

use memreuse_core::OutOfMemory;

/// MiB with one decimal, as the table prints sizes (not shared with `output.rs`, which
/// depends on the replay's figures that this module fills).
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The reason for `oom`, raised on a device of `capacity` bytes while the program held
/// `live` requested bytes.
pub fn oom_reason(oom: &OutOfMemory, live: u64, capacity: u64) -> String {
    let request = oom.requested;
    if live.saturating_add(request) > capacity {
        return format!(
            "live: the program holds {} and asks {} more on a {} device",
            mib(live),
            mib(request),
            mib(capacity)
        );
    }
    if let Some(limit) = oom.limit
        && limit < oom.device_total
        && oom.device_free >= request
    {
        return format!(
            "cap: per_process_memory_fraction allows {} of the {} device",
            mib(limit),
            mib(oom.device_total)
        );
    }
    if oom.device_free >= request {
        return format!(
            "rounding: {} requested, {} free on the device, but the segment or page it is rounded up to does not fit",
            mib(request),
            mib(oom.device_free)
        );
    }
    if oom.device_free.saturating_add(oom.cached_free) >= request {
        return format!(
            "fragmentation: {} free on the device and {} cached, but no free block holds {} (largest {})",
            mib(oom.device_free),
            mib(oom.cached_free),
            mib(request),
            mib(oom.largest_free_block)
        );
    }
    format!(
        "rounding: the blocks handed out hold {} for {} requested",
        mib(oom.allocated),
        mib(live)
    )
}
