//! The ACL runtime's virtual-memory entry points (all optional symbols, so each function
//! takes the resolved function pointer), one thin function each. Arguments are the values
//! the runtime documents: reserve with alignment 0, `expectPtr` NULL and flags 0; a map at
//! offset 0 with flags 0; physical memory with flags 0.
//!
//! `aclrtReserveMemAddress` returns its status ([`AclError`]): the capability probe acts
//! on `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`. The others return [`BackendError`] named after
//! the entry point.

use std::ffi::c_void;

use memreuse_core::BackendError;

use super::{AclError, acl_check};
use crate::conversions::{address, to_address};
use crate::sys;

/// `aclrtReserveMemAddress(&p, size, 0, NULL, 0)`: the reserved range's base.
pub(crate) fn reserve_mem_address(
    f: sys::aclrtReserveMemAddress,
    size: usize,
) -> Result<u64, AclError> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer; alignment 0, expectPtr NULL and flags 0 are the
    // documented values.
    let code = unsafe { f(&raw mut p, size, 0, std::ptr::null_mut(), 0) };
    if code == sys::ACL_SUCCESS {
        Ok(to_address(p))
    } else {
        Err(AclError(code))
    }
}

/// `aclrtReleaseMemAddress(base)`.
pub(crate) fn release_mem_address(
    f: sys::aclrtReleaseMemAddress,
    base: u64,
) -> Result<(), BackendError> {
    // SAFETY: the caller passes a live reservation of this runtime with nothing mapped in
    // it (the device's ledger checked it), released once.
    let code = unsafe { f(address(base)) };
    acl_check(code, "aclrtReleaseMemAddress", 0)
}

/// `aclrtMallocPhysical(&h, size, prop, 0)`: the handle; `requested` bytes go into an
/// out-of-memory error.
pub(crate) fn malloc_physical(
    f: sys::aclrtMallocPhysical,
    size: usize,
    prop: &sys::aclrtPhysicalMemProp,
    requested: u64,
) -> Result<u64, BackendError> {
    let mut h: sys::aclrtDrvMemHandle = std::ptr::null_mut();
    // SAFETY: `h` is a valid out-pointer, `prop` lives for the call and has the header's
    // layout (checked at compile time in `sys`); flags 0 is the documented value.
    let code = unsafe { f(&raw mut h, size, std::ptr::from_ref(prop), 0) };
    acl_check(code, "aclrtMallocPhysical", requested)?;
    Ok(to_address(h))
}

/// `aclrtFreePhysical(handle)`.
pub(crate) fn free_physical(f: sys::aclrtFreePhysical, handle: u64) -> Result<(), BackendError> {
    // SAFETY: the caller passes a live, unmapped handle of this runtime, freed once (the
    // device's ledger checked it).
    let code = unsafe { f(address(handle)) };
    acl_check(code, "aclrtFreePhysical", 0)
}

/// `aclrtMapMem(at, size, 0, handle, 0)`.
pub(crate) fn map_mem(
    f: sys::aclrtMapMem,
    at: u64,
    size: usize,
    handle: u64,
) -> Result<(), BackendError> {
    // SAFETY: the caller checked (in the device's ledger) that `at` lies in a live
    // reservation with no mapping over the range, that the handle is live and unmapped,
    // and that the size is the handle's; offset 0 and flags 0 are the documented values.
    let code = unsafe { f(address(at), size, 0, address(handle), 0) };
    acl_check(code, "aclrtMapMem", 0)
}

/// `aclrtUnmapMem(at)`.
pub(crate) fn unmap_mem(f: sys::aclrtUnmapMem, at: u64) -> Result<(), BackendError> {
    // SAFETY: the caller checked that `at` is a live mapping of this runtime; no enqueued
    // work still uses it (the `Backend::vm_unmap` contract).
    let code = unsafe { f(address(at)) };
    acl_check(code, "aclrtUnmapMem", 0)
}

/// `aclrtMemGetAllocationGranularity(prop, option, &g)`.
pub(crate) fn mem_get_allocation_granularity(
    f: sys::aclrtMemGetAllocationGranularity,
    prop: &mut sys::aclrtPhysicalMemProp,
    option: sys::aclrtMemGranularityOptions,
) -> Result<usize, BackendError> {
    let mut g = 0usize;
    // SAFETY: both pointers are valid for the call; `prop` has the header's layout
    // (checked at compile time in `sys`).
    let code = unsafe { f(std::ptr::from_mut(prop), option, &raw mut g) };
    acl_check(code, "aclrtMemGetAllocationGranularity", 0)?;
    Ok(g)
}
