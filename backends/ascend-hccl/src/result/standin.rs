//! The stand-in library's harness hooks (exported only by the stand-in, never by CANN; each
//! function takes the resolved optional symbol), one thin function each.
//!
//! The hooks that only annotate return their status ([`AclError`]) for the caller to
//! ignore: a label or an annotation that did not arrive changes no result.

use memreuse_core::BackendError;

use super::{AclError, acl_check};
use crate::sys;

/// The status as a `Result`.
fn status(code: i32) -> Result<(), AclError> {
    if code == sys::ACL_SUCCESS {
        Ok(())
    } else {
        Err(AclError(code))
    }
}

/// `memreuse_standin_configure(devices, capacity, deterministic, seed, timeout_ms)`: a
/// fresh cluster (the caller uses no stand-in handle meanwhile).
pub(crate) fn configure(
    f: sys::memreuse_standin_configure,
    devices: u32,
    capacity: u64,
    seed: Option<u64>,
    timeout_ms: u64,
) -> Result<(), BackendError> {
    // SAFETY: plain integers; the caller uses no stand-in handle during the call (worlds
    // are opened one after another).
    let code = unsafe {
        f(
            devices,
            capacity,
            i32::from(seed.is_some()),
            seed.unwrap_or(0),
            timeout_ms,
        )
    };
    acl_check(code, "memreuse_standin_configure", 0)
}

/// `memreuse_standin_set_race_detection(enabled)`: whether the next configure gives the
/// devices a race detector (the previous setting it returns is not needed).
pub(crate) fn set_race_detection(f: sys::memreuse_standin_set_race_detection, enabled: bool) {
    // SAFETY: a plain integer argument; only read by the next configure call.
    unsafe { f(i32::from(enabled)) };
}

/// `memreuse_standin_annotate(device, ptr, bytes, id)`.
pub(crate) fn annotate(
    f: sys::memreuse_standin_annotate,
    device: i32,
    ptr: u64,
    bytes: u64,
    id: u64,
) -> Result<(), AclError> {
    // SAFETY: plain integers.
    status(unsafe { f(device, ptr, bytes, id) })
}

/// `memreuse_standin_set_op_label(device, label, len)`.
pub(crate) fn set_op_label(
    f: sys::memreuse_standin_set_op_label,
    device: i32,
    label: &str,
) -> Result<(), AclError> {
    // SAFETY: `label` is valid for `label.len()` bytes during the call.
    status(unsafe { f(device, label.as_ptr().cast(), label.len()) })
}

/// `memreuse_standin_delay(s, micros)`: an exact busy period on the stream.
pub(crate) fn delay(
    f: sys::memreuse_standin_delay,
    stream: sys::aclrtStream,
    micros: u64,
) -> Result<(), BackendError> {
    // SAFETY: live stream handle, plain integer.
    let code = unsafe { f(stream, micros) };
    acl_check(code, "memreuse_standin_delay", 0)
}

/// `memreuse_standin_race_reports(device, buf, cap)`, asked for the size and then filled:
/// the report text, or `None` when the size is negative or changed between the calls.
pub(crate) fn race_reports(f: sys::memreuse_standin_race_reports, device: i32) -> Option<Vec<u8>> {
    // SAFETY: a null buffer asks only for the size.
    let needed = unsafe { f(device, std::ptr::null_mut(), 0) };
    let mut buf = vec![0u8; usize::try_from(needed).ok()?];
    // SAFETY: `buf` is valid for `buf.len()` bytes.
    let written = unsafe { f(device, buf.as_mut_ptr().cast(), buf.len()) };
    (written == needed).then_some(buf)
}
