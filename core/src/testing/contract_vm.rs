//! The contract kit's check of the optional virtual-memory interface
//! ([`crate::virtual_memory`]).

use crate::backend::Backend;
use crate::error::BackendError;

/// What [`virtual_memory`] returns: `Err` names the broken rule.
type CheckResult = Result<(), String>;

fn call<T>(what: &str, r: Result<T, BackendError>) -> Result<T, String> {
    r.map_err(|e| format!("{what} failed: {e}"))
}

/// A backend that does not declare the capability refuses `vm_reserve` with
/// [`BackendError::Unsupported`] (so the allocator can say which backend lacks it); one
/// that declares it follows the rules of [`crate::virtual_memory`]: a power-of-two
/// granularity, unaligned sizes refused, map/unmap/release in order, release of a mapped
/// handle refused.
pub(super) fn virtual_memory<B: Backend>(b: &B) -> CheckResult {
    if !b.capabilities().virtual_memory {
        return match b.vm_reserve(1 << 21) {
            Err(BackendError::Unsupported { .. }) => Ok(()),
            Err(e) => Err(format!(
                "virtual_memory is not declared, but vm_reserve failed with {e} instead of \
                 BackendError::Unsupported"
            )),
            Ok(p) => Err(format!(
                "virtual_memory is not declared, but vm_reserve returned {p}"
            )),
        };
    }
    let g = call("vm_granularity", b.vm_granularity())?;
    if !g.is_power_of_two() {
        return Err(format!("vm_granularity is {g}, not a power of two"));
    }
    if b.vm_create_physical(g + 1).is_ok() {
        return Err(format!(
            "vm_create_physical({}) succeeded with a size that is not a multiple of the \
             granularity {g}",
            g + 1
        ));
    }
    let base = call("vm_reserve", b.vm_reserve(4 * g))?;
    if base.addr() % g != 0 {
        return Err(format!("vm_reserve returned {base}, not a multiple of {g}"));
    }
    let handle = call("vm_create_physical", b.vm_create_physical(g))?;
    let page = base.offset(g);
    call("vm_map", b.vm_map(page, handle))?;
    let out = if b.vm_release_physical(handle).is_ok() {
        Err("vm_release_physical accepted a mapped handle".to_owned())
    } else if b.vm_release(base).is_ok() {
        Err("vm_release accepted a range with a mapped page".to_owned())
    } else {
        let s = b.default_stream();
        call("memset_zero of a mapped page", b.memset_zero(page, g, &s))
            .and_then(|()| call("synchronize_stream", b.synchronize_stream(&s)))
    };
    out.and(call("vm_unmap", b.vm_unmap(page, g)))
        .and(call("vm_release_physical", b.vm_release_physical(handle)))
        .and(call("vm_release", b.vm_release(base)))
}
