//! The contract kit's stale-page check for backends with a race detector and the optional
//! virtual-memory interface: an unmap is a free, so unmapping a page while work on it is
//! not known complete, and mapping its physical memory again for a new use, is a reuse
//! race.

use std::fmt;

use crate::backend::Backend;
use crate::race::RaceKind;

/// Turns a backend error into a message naming the call.
fn call<T, E: fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("{what} failed: {e}"))
}

/// Runs the stale-page scenario twice, each time on a fresh device from `open` (which must
/// declare `virtual_memory`, report races and hold at least one granule of physical
/// memory): one granule mapped at the start of a four-granule range, a delay and a write
/// on a side stream, then the page unmapped, its handle mapped one granule further on and
/// written on the default stream. Without a synchronize of the side stream before the
/// unmap, the device's race reports must hold a reuse race; with it, they must be empty.
/// `Err` says which step failed or what was reported instead.
pub fn check_stale_page_unmap<B: Backend>(mut open: impl FnMut() -> B) -> Result<(), String> {
    for synchronize_first in [false, true] {
        let dev = open();
        let g = call("vm_granularity", dev.vm_granularity())?;
        let base = call("vm_reserve", dev.vm_reserve(4 * g))?;
        let h = call("vm_create_physical", dev.vm_create_physical(g))?;
        call("vm_map", dev.vm_map(base, h))?;
        let s = call("create_stream", dev.create_stream())?;
        call("delay", dev.delay(1_000, &s))?;
        call("memset_zero", dev.memset_zero(base, 64, &s))?;
        if synchronize_first {
            call("synchronize_stream", dev.synchronize_stream(&s))?;
        }
        // The stale page goes back and is mapped again for a new use.
        call("vm_unmap", dev.vm_unmap(base, g))?;
        call("vm_map", dev.vm_map(base.offset(g), h))?;
        call(
            "memset_zero",
            dev.memset_zero(base.offset(g), 64, &dev.default_stream()),
        )?;
        call("synchronize_device", dev.synchronize_device())?;
        let Some(races) = dev.race_reports() else {
            return Err("the backend reports no races (race_reports is None)".to_owned());
        };
        if synchronize_first && !races.is_empty() {
            return Err(format!(
                "the side stream was synchronized before the unmap, yet races were reported: \
                 {races:?}"
            ));
        }
        if !synchronize_first && !races.iter().any(|r| r.kind == RaceKind::Reuse) {
            return Err(format!(
                "a page unmapped while a write to it was not known complete, then mapped \
                 again, is a reuse race; reported instead: {races:?}"
            ));
        }
    }
    Ok(())
}
