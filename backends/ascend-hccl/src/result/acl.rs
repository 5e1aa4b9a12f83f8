//! The ACL runtime's entry points, one thin function each (as cudarc's `result` module):
//! plain Rust arguments in, the `sys` function pointer called, the status mapped.
//!
//! Most return [`BackendError`] named after the entry point (through [`acl_check`]). The
//! few whose callers act on the status itself (cleanup that only logs it, the stream
//! synchronize a destroy depends on) return it as [`AclError`]. Handles are the `sys`
//! handle types; every handle passed in was created by this runtime and is not destroyed
//! yet (the RAII wrappers of the stream, event and staging layers own them), which is what
//! each `SAFETY` comment below relies on.

use std::ffi::c_void;

use memreuse_core::{BackendError, DevicePtr};

use super::{AclError, acl_check};
use crate::conversions::{device_ptr, to_address};
use crate::loader::Api;
use crate::sys;

/// The status as a `Result` of the bare status, for callers that act on the code.
fn status(code: sys::aclError) -> Result<(), AclError> {
    if code == sys::ACL_SUCCESS {
        Ok(())
    } else {
        Err(AclError(code))
    }
}

/// `aclInit(NULL)`; a runtime that answers `ACL_ERROR_REPEAT_INITIALIZE` was initialised
/// already, which counts as success.
pub(crate) fn init(api: &Api) -> Result<(), BackendError> {
    // SAFETY: a null config path is allowed by acl.h.
    let code = unsafe { (api.aclInit)(std::ptr::null()) };
    if code == sys::ACL_ERROR_REPEAT_INITIALIZE {
        return Ok(());
    }
    acl_check(code, "aclInit", 0)
}

/// `aclFinalize()`.
pub(crate) fn finalize(api: &Api) -> Result<(), BackendError> {
    // SAFETY: no arguments; the lifecycle calls it once per initialisation, after every
    // device was reset.
    acl_check(unsafe { (api.aclFinalize)() }, "aclFinalize", 0)
}

/// `aclrtSetDevice(device)`.
pub(crate) fn set_device(api: &Api, device: i32) -> Result<(), BackendError> {
    // SAFETY: plain integer argument.
    acl_check(unsafe { (api.aclrtSetDevice)(device) }, "aclrtSetDevice", 0)
}

/// `aclrtResetDevice(device)`.
pub(crate) fn reset_device(api: &Api, device: i32) -> Result<(), BackendError> {
    // SAFETY: plain integer argument.
    acl_check(
        unsafe { (api.aclrtResetDevice)(device) },
        "aclrtResetDevice",
        0,
    )
}

/// `aclrtGetDeviceCount(&n)`.
pub(crate) fn get_device_count(api: &Api) -> Result<u32, BackendError> {
    let mut n = 0u32;
    // SAFETY: valid out-pointer.
    let code = unsafe { (api.aclrtGetDeviceCount)(&raw mut n) };
    acl_check(code, "aclrtGetDeviceCount", 0)?;
    Ok(n)
}

/// `aclrtGetMemInfo(attr, &free, &total)`: `(free, total)` bytes.
pub(crate) fn get_mem_info(
    api: &Api,
    attr: sys::aclrtMemAttr,
) -> Result<(usize, usize), BackendError> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both out-pointers are valid.
    let code = unsafe { (api.aclrtGetMemInfo)(attr, &raw mut free, &raw mut total) };
    acl_check(code, "aclrtGetMemInfo", 0)?;
    Ok((free, total))
}

/// `aclrtMalloc(&p, size, policy)`; `requested` bytes go into an out-of-memory error.
pub(crate) fn malloc(
    api: &Api,
    size: usize,
    policy: sys::aclrtMemMallocPolicy,
    requested: u64,
) -> Result<DevicePtr, BackendError> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer; size and policy are plain values.
    let code = unsafe { (api.aclrtMalloc)(&raw mut p, size, policy) };
    acl_check(code, "aclrtMalloc", requested)?;
    Ok(DevicePtr(to_address(p)))
}

/// `aclrtMallocAlign32(&p, size, policy)` (optional symbol with `aclrtMalloc`'s signature,
/// resolved as `f`).
pub(crate) fn malloc_align32(
    f: sys::aclrtMalloc,
    size: usize,
    policy: sys::aclrtMemMallocPolicy,
    requested: u64,
) -> Result<DevicePtr, BackendError> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer; size and policy are plain values.
    let code = unsafe { f(&raw mut p, size, policy) };
    acl_check(code, "aclrtMallocAlign32", requested)?;
    Ok(DevicePtr(to_address(p)))
}

/// `aclrtFree(ptr)`.
pub(crate) fn free(api: &Api, ptr: DevicePtr) -> Result<(), BackendError> {
    // SAFETY: the caller passes an address from `malloc` that no work uses any more (the
    // `Backend::free` contract); the runtime checks the address itself.
    acl_check(unsafe { (api.aclrtFree)(device_ptr(ptr)) }, "aclrtFree", 0)
}

/// `aclrtMallocHost(&p, size)`: a pinned host buffer's address.
pub(crate) fn malloc_host(api: &Api, size: usize) -> Result<usize, BackendError> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer; the size is a plain value.
    let code = unsafe { (api.aclrtMallocHost)(&raw mut p, size) };
    acl_check(code, "aclrtMallocHost", size as u64)?;
    Ok(p as usize)
}

/// `aclrtFreeHost(ptr)`; the status only (the caller logs it).
pub(crate) fn free_host(api: &Api, ptr: usize) -> Result<(), AclError> {
    // SAFETY: the caller passes a buffer from `malloc_host` that no enqueued copy reads
    // any more (the staging pool frees only returned buffers).
    status(unsafe { (api.aclrtFreeHost)(ptr as *mut c_void) })
}

/// `aclrtCreateStream(&s)`.
pub(crate) fn create_stream(api: &Api) -> Result<sys::aclrtStream, BackendError> {
    let mut raw: sys::aclrtStream = std::ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer.
    let code = unsafe { (api.aclrtCreateStream)(&raw mut raw) };
    acl_check(code, "aclrtCreateStream", 0)?;
    Ok(raw)
}

/// `aclrtDestroyStream(s)`; the status only (a drop logs it).
pub(crate) fn destroy_stream(api: &Api, stream: sys::aclrtStream) -> Result<(), AclError> {
    // SAFETY: `stream` came from `create_stream` and is destroyed once (by its last owner).
    status(unsafe { (api.aclrtDestroyStream)(stream) })
}

/// `aclrtDestroyStreamForce(s)` (optional symbol, resolved as `f`); the status only.
pub(crate) fn destroy_stream_force(
    f: sys::aclrtDestroyStreamForce,
    stream: sys::aclrtStream,
) -> Result<(), AclError> {
    // SAFETY: as for `destroy_stream`.
    status(unsafe { f(stream) })
}

/// `aclrtSynchronizeStream(s)`; the status only (the stream's drop acts on it).
pub(crate) fn synchronize_stream(api: &Api, stream: sys::aclrtStream) -> Result<(), AclError> {
    // SAFETY: live stream handle.
    status(unsafe { (api.aclrtSynchronizeStream)(stream) })
}

/// `aclrtSynchronizeStreamWithTimeout(s, timeout_ms)` (optional symbol, resolved as `f`);
/// the status only.
pub(crate) fn synchronize_stream_with_timeout(
    f: sys::aclrtSynchronizeStreamWithTimeout,
    stream: sys::aclrtStream,
    timeout_ms: i32,
) -> Result<(), AclError> {
    // SAFETY: live stream handle, plain integer.
    status(unsafe { f(stream, timeout_ms) })
}

/// `aclrtSynchronizeDevice()` on the bound device.
pub(crate) fn synchronize_device(api: &Api) -> Result<(), BackendError> {
    // SAFETY: no arguments.
    acl_check(
        unsafe { (api.aclrtSynchronizeDevice)() },
        "aclrtSynchronizeDevice",
        0,
    )
}

/// `aclrtCreateEventWithFlag(&e, flags)`.
pub(crate) fn create_event_with_flag(
    api: &Api,
    flags: u32,
) -> Result<sys::aclrtEvent, BackendError> {
    let mut raw: sys::aclrtEvent = std::ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer; the flag is a documented value.
    let code = unsafe { (api.aclrtCreateEventWithFlag)(&raw mut raw, flags) };
    acl_check(code, "aclrtCreateEventWithFlag", 0)?;
    Ok(raw)
}

/// `aclrtCreateEventExWithFlag(&e, flags)` (optional symbol with
/// `aclrtCreateEventWithFlag`'s signature, resolved as `f`).
pub(crate) fn create_event_ex_with_flag(
    f: sys::aclrtCreateEventWithFlag,
    flags: u32,
) -> Result<sys::aclrtEvent, BackendError> {
    let mut raw: sys::aclrtEvent = std::ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer; the flag is a documented value.
    let code = unsafe { f(&raw mut raw, flags) };
    acl_check(code, "aclrtCreateEventExWithFlag", 0)?;
    Ok(raw)
}

/// `aclrtDestroyEvent(e)`; the status only (the pool logs it).
pub(crate) fn destroy_event(api: &Api, event: sys::aclrtEvent) -> Result<(), AclError> {
    // SAFETY: created by `create_event*`, destroyed once (it left the pool).
    status(unsafe { (api.aclrtDestroyEvent)(event) })
}

/// `aclrtRecordEvent(e, s)`.
pub(crate) fn record_event(
    api: &Api,
    event: sys::aclrtEvent,
    stream: sys::aclrtStream,
) -> Result<(), BackendError> {
    // SAFETY: live handles (owned by their RAII wrappers).
    let code = unsafe { (api.aclrtRecordEvent)(event, stream) };
    acl_check(code, "aclrtRecordEvent", 0)
}

/// `aclrtResetEvent(e, s)`.
pub(crate) fn reset_event(
    api: &Api,
    event: sys::aclrtEvent,
    stream: sys::aclrtStream,
) -> Result<(), BackendError> {
    // SAFETY: live handles; the event is re-recorded on the same stream next.
    let code = unsafe { (api.aclrtResetEvent)(event, stream) };
    acl_check(code, "aclrtResetEvent", 0)
}

/// `aclrtQueryEventStatus(e, &status)`: the recorded status.
pub(crate) fn query_event_status(
    api: &Api,
    event: sys::aclrtEvent,
) -> Result<sys::aclrtEventRecordedStatus, BackendError> {
    let mut recorded = sys::ACL_EVENT_RECORDED_STATUS_NOT_READY;
    // SAFETY: live handle, valid out-pointer.
    let code = unsafe { (api.aclrtQueryEventStatus)(event, &raw mut recorded) };
    acl_check(code, "aclrtQueryEventStatus", 0)?;
    Ok(recorded)
}

/// `aclrtSynchronizeEvent(e)`.
pub(crate) fn synchronize_event(api: &Api, event: sys::aclrtEvent) -> Result<(), BackendError> {
    // SAFETY: live handle.
    let code = unsafe { (api.aclrtSynchronizeEvent)(event) };
    acl_check(code, "aclrtSynchronizeEvent", 0)
}

/// `aclrtStreamWaitEvent(s, e)`.
pub(crate) fn stream_wait_event(
    api: &Api,
    stream: sys::aclrtStream,
    event: sys::aclrtEvent,
) -> Result<(), BackendError> {
    // SAFETY: live handles.
    let code = unsafe { (api.aclrtStreamWaitEvent)(stream, event) };
    acl_check(code, "aclrtStreamWaitEvent", 0)
}

/// `aclrtMemsetAsync(ptr, max, value, count, s)` on device memory.
pub(crate) fn memset_async(
    api: &Api,
    ptr: DevicePtr,
    max: usize,
    value: i32,
    count: usize,
    stream: sys::aclrtStream,
) -> Result<(), BackendError> {
    // SAFETY: the device address is checked by the runtime; live stream.
    let code = unsafe { (api.aclrtMemsetAsync)(device_ptr(ptr), max, value, count, stream) };
    acl_check(code, "aclrtMemsetAsync", 0)
}

/// `aclrtMemcpyAsync(dst, dest_max, src, count, kind, s)`.
///
/// # Safety
/// A host end (`kind` names which) must stay valid for `count` bytes, and not be read
/// (destination) or written (source) by anyone else, until the stream passed the copy.
/// Device ends are checked by the runtime.
pub(crate) unsafe fn memcpy_async(
    api: &Api,
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: sys::aclrtMemcpyKind,
    stream: sys::aclrtStream,
) -> Result<(), BackendError> {
    // SAFETY: the caller keeps host ends valid until the stream passed the copy; device
    // ends are checked by the runtime; live stream.
    let code = unsafe { (api.aclrtMemcpyAsync)(dst, dest_max, src, count, kind, stream) };
    acl_check(code, "aclrtMemcpyAsync", 0)
}
