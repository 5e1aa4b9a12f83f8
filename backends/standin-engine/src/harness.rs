//! The `memreuse_standin_*` hooks every stand-in exports, written once: a face calls
//! [`crate::export_harness!`] with its [`Face`] type and gets these C symbols, answering in
//! its codes. A real vendor library exports none of them, so a backend that finds them
//! knows it runs on a stand-in.
//!
//! | symbol | returns | does |
//! | --- | --- | --- |
//! | `memreuse_standin_configure(devices, capacity, deterministic, seed, timeout_ms)` | code | a fresh cluster (every handle of the old one becomes unknown; call while none is in use) |
//! | `memreuse_standin_set_race_detection(enabled)` | previous (0/1) | whether the next `configure` gives the devices a race detector (default 1) |
//! | `memreuse_standin_annotate(device, ptr, bytes, id)` | code | `annotate_allocation` on the device |
//! | `memreuse_standin_set_op_label(device, label, len)` | code | labels the next ops (diagnostics) |
//! | `memreuse_standin_delay(stream, micros)` | code | enqueues an exact device busy period |
//! | `memreuse_standin_race_reports(device, buf, cap)` | bytes needed (negative: a code) | race reports as text lines ([`memreuse_core::race::format_race_lines`]) |
//! | `memreuse_standin_race_count()` | count | races found on every device |
//! | `memreuse_standin_inject_malloc_oom(device, nth)` | code | the device's `nth` next raw allocation fails as out of memory (the face's OOM code) |
//! | `memreuse_standin_inject_call_failure(name, nth, code)` | code | the `nth` next call (1: the next) of export `name` answers `code` without running |
//! | `memreuse_standin_pending_failures()` | count | injected call failures not yet taken |
//! | `memreuse_standin_calls(name)` | count | how often export `name` was called |
//! | `memreuse_standin_live_streams()` | count | stream handles not destroyed |
//! | `memreuse_standin_profile()` | C string | the build variant (install profile) |
//!
//! The functions below are the hooks' bodies; the macro only gives them their C names.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use memreuse_core::{AllocationId, Backend, DevicePtr};
use memreuse_mock::{FaultKind, MallocFault, MockConfig, MockDevice};

use crate::code::ResultCode;
use crate::face::Face;
use crate::guard::guard;

/// Whether the next configure gives its devices a race detector: off when the runner
/// judges races with its adaptor alone (`--race-check adaptor`).
static RACE_DETECTION: AtomicBool = AtomicBool::new(true);

fn device<F: Face>(index: i32) -> Result<MockDevice, F::Code> {
    usize::try_from(index)
        .ok()
        .and_then(F::device)
        .ok_or(F::INVALID_DEVICE)
}

/// `memreuse_standin_set_race_detection`.
pub fn set_race_detection(enabled: i32) -> i32 {
    i32::from(RACE_DETECTION.swap(enabled != 0, Ordering::AcqRel))
}

/// `memreuse_standin_configure`.
pub fn configure<F: Face>(
    devices: u32,
    capacity: u64,
    deterministic: i32,
    seed: u64,
    timeout_ms: u64,
) -> F::Code {
    guard("memreuse_standin_configure", F::INTERNAL, || {
        if devices == 0 || capacity == 0 {
            return Err(F::INVALID_VALUE);
        }
        let mut config = MockConfig::with_capacity(capacity);
        config.race_detection = RACE_DETECTION.load(Ordering::Acquire);
        if deterministic != 0 {
            config = config.deterministic(seed);
        }
        if timeout_ms > 0 {
            config.joint_timeout = Duration::from_millis(timeout_ms);
        }
        F::configure(devices as usize, config)?;
        crate::faults::clear();
        Ok(())
    })
}

/// `memreuse_standin_annotate`.
pub fn annotate<F: Face>(device_index: i32, ptr: u64, bytes: u64, id: u64) -> F::Code {
    guard("memreuse_standin_annotate", F::INTERNAL, || {
        device::<F>(device_index)?.annotate_allocation(DevicePtr(ptr), bytes, AllocationId(id));
        Ok(())
    })
}

/// `memreuse_standin_set_op_label`.
///
/// # Safety
/// `label` is null or valid for reads of `len` bytes.
pub unsafe fn set_op_label<F: Face>(
    device_index: i32,
    label: *const c_char,
    len: usize,
) -> F::Code {
    guard("memreuse_standin_set_op_label", F::INTERNAL, || {
        if label.is_null() {
            return Err(F::INVALID_VALUE);
        }
        // SAFETY: `label` is valid for reads of `len` bytes (caller contract), not null.
        let bytes = unsafe { std::slice::from_raw_parts(label.cast::<u8>(), len) };
        device::<F>(device_index)?.set_op_label(&String::from_utf8_lossy(bytes));
        Ok(())
    })
}

/// `memreuse_standin_delay`.
pub fn delay<F: Face>(stream: *mut c_void, micros: u64) -> F::Code {
    guard("memreuse_standin_delay", F::INTERNAL, || {
        let (device, stream) = F::stream(stream)?;
        device.delay(micros, &stream).map_err(|e| F::mock_code(&e))
    })
}

/// `memreuse_standin_race_reports`: the bytes the reports need (written when `buf` holds
/// them), or a negated code.
///
/// # Safety
/// `buf` is null or valid for writes of `cap` bytes.
pub unsafe fn race_reports<F: Face>(device_index: i32, buf: *mut c_char, cap: usize) -> i64
where
    i64: From<F::Code>,
{
    let mut needed = 0i64;
    let rc = guard("memreuse_standin_race_reports", F::INTERNAL, || {
        let reports = device::<F>(device_index)?
            .race_reports()
            .unwrap_or_default();
        let text = memreuse_core::race::format_race_lines(&reports);
        needed = text.len() as i64;
        if !buf.is_null() && cap >= text.len() {
            // SAFETY: `buf` is valid for writes of `cap` bytes (contract) and
            // `text.len() <= cap` (checked).
            unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len()) };
        }
        Ok(())
    });
    if rc == F::Code::SUCCESS {
        needed
    } else {
        -i64::from(rc)
    }
}

/// `memreuse_standin_race_count`.
pub fn race_count<F: Face>() -> u64 {
    let mut total = 0;
    guard("memreuse_standin_race_count", F::INTERNAL, || {
        total = F::race_count();
        Ok(())
    });
    total
}

/// `memreuse_standin_inject_malloc_oom`.
pub fn inject_malloc_oom<F: Face>(device_index: i32, nth: u64) -> F::Code {
    guard("memreuse_standin_inject_malloc_oom", F::INTERNAL, || {
        device::<F>(device_index)?.inject_malloc_fault(MallocFault {
            nth,
            kind: FaultKind::OutOfMemory,
        });
        Ok(())
    })
}

/// `memreuse_standin_inject_call_failure`.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
pub unsafe fn inject_call_failure<F: Face>(name: *const c_char, nth: u64, code: i64) -> F::Code {
    guard("memreuse_standin_inject_call_failure", F::INTERNAL, || {
        if name.is_null() || F::Code::from_raw(code).is_none() {
            return Err(F::INVALID_VALUE);
        }
        // SAFETY: a NUL-terminated string (caller contract), checked non-null.
        let name = unsafe { CStr::from_ptr(name) };
        if crate::faults::inject_call_failure(&name.to_string_lossy(), nth, code) {
            Ok(())
        } else {
            Err(F::INVALID_VALUE)
        }
    })
}

/// `memreuse_standin_pending_failures`.
pub fn pending_failures() -> u64 {
    std::panic::catch_unwind(crate::faults::pending_call_failures).unwrap_or(0)
}

/// `memreuse_standin_calls`.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
pub unsafe fn calls(name: *const c_char) -> u64 {
    if name.is_null() {
        return 0;
    }
    // SAFETY: `name` is a NUL-terminated string (caller contract), checked non-null.
    let name = unsafe { CStr::from_ptr(name) };
    std::panic::catch_unwind(|| crate::guard::calls_of(&name.to_string_lossy())).unwrap_or(0)
}

/// `memreuse_standin_live_streams`.
pub fn live_streams<F: Face>() -> u64 {
    std::panic::catch_unwind(F::live_streams).unwrap_or(0)
}

/// `memreuse_standin_profile`.
pub fn profile<F: Face>() -> *const c_char {
    F::profile().as_ptr()
}

/// Exports the harness hooks of the module docs as C symbols answering in `$face`'s codes
/// (`$face` implements [`Face`]). Invoke once, in the stand-in's cdylib crate.
#[macro_export]
macro_rules! export_harness {
    ($face:ty) => {
        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_set_race_detection(enabled: i32) -> i32 {
            $crate::harness::set_race_detection(enabled)
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_configure(
            devices: u32,
            capacity: u64,
            deterministic: i32,
            seed: u64,
            timeout_ms: u64,
        ) -> <$face as $crate::Face>::Code {
            $crate::harness::configure::<$face>(devices, capacity, deterministic, seed, timeout_ms)
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_annotate(
            device: i32,
            ptr: u64,
            bytes: u64,
            id: u64,
        ) -> <$face as $crate::Face>::Code {
            $crate::harness::annotate::<$face>(device, ptr, bytes, id)
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_set_op_label(
            device: i32,
            label: *const ::std::ffi::c_char,
            len: usize,
        ) -> <$face as $crate::Face>::Code {
            // SAFETY: the C caller's contract is this function's.
            unsafe { $crate::harness::set_op_label::<$face>(device, label, len) }
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_delay(
            stream: *mut ::std::ffi::c_void,
            micros: u64,
        ) -> <$face as $crate::Face>::Code {
            $crate::harness::delay::<$face>(stream, micros)
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_race_reports(
            device: i32,
            buf: *mut ::std::ffi::c_char,
            cap: usize,
        ) -> i64 {
            // SAFETY: the C caller's contract is this function's.
            unsafe { $crate::harness::race_reports::<$face>(device, buf, cap) }
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_race_count() -> u64 {
            $crate::harness::race_count::<$face>()
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_inject_malloc_oom(
            device: i32,
            nth: u64,
        ) -> <$face as $crate::Face>::Code {
            $crate::harness::inject_malloc_oom::<$face>(device, nth)
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_inject_call_failure(
            name: *const ::std::ffi::c_char,
            nth: u64,
            code: i64,
        ) -> <$face as $crate::Face>::Code {
            // SAFETY: the C caller's contract is this function's.
            unsafe { $crate::harness::inject_call_failure::<$face>(name, nth, code) }
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_pending_failures() -> u64 {
            $crate::harness::pending_failures()
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_calls(name: *const ::std::ffi::c_char) -> u64 {
            // SAFETY: the C caller's contract is this function's.
            unsafe { $crate::harness::calls(name) }
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_live_streams() -> u64 {
            $crate::harness::live_streams::<$face>()
        }

        #[unsafe(no_mangle)]
        unsafe extern "C" fn memreuse_standin_profile() -> *const ::std::ffi::c_char {
            $crate::harness::profile::<$face>()
        }
    };
}
