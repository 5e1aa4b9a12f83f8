//! The `memreuse_standin_*` symbols: what the test harness and, when it finds them, the
//! `memreuse-cuda` backend use to configure the stand-in, feed its race detector and read
//! its race reports. A real driver exports none of them. The same names and signatures as
//! the Ascend stand-in's, with CUDA result codes:
//!
//! | symbol | returns | does |
//! | --- | --- | --- |
//! | `memreuse_standin_configure(devices, capacity, deterministic, seed, timeout_ms)` | `CUresult` | a fresh cluster (every handle of the old one becomes unknown) |
//! | `memreuse_standin_set_race_detection(enabled)` | previous (0/1) | whether the next `configure` gives the devices a race detector (default 1) |
//! | `memreuse_standin_annotate(device, ptr, bytes, id)` | `CUresult` | `annotate_allocation` on the device |
//! | `memreuse_standin_set_op_label(device, label, len)` | `CUresult` | labels the next ops |
//! | `memreuse_standin_delay(stream, micros)` | `CUresult` | enqueues an exact device busy period |
//! | `memreuse_standin_race_reports(device, buf, cap)` | bytes needed (negative: a code) | race reports as text lines (format of the Ascend stand-in) |
//! | `memreuse_standin_race_count()` | count | races found on every device |
//! | `memreuse_standin_calls(name)` | count | how often symbol `name` was called |
//! | `memreuse_standin_live_streams()` / `memreuse_standin_live_allocations()` | count | streams and `cuMemAlloc` allocations not destroyed |
//! | `memreuse_standin_profile()` | C string | `default`, `no-vm` or `old-nccl` |

#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, c_char};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use memreuse_core::{AccessKind, AllocationId, Backend, DevicePtr, RaceAccess, RaceKind};
use memreuse_mock::MockConfig;

use crate::codes;
use crate::state::{device_at, guard, with_state};

fn device(index: i32) -> Result<memreuse_mock::MockDevice, u32> {
    usize::try_from(index)
        .ok()
        .and_then(device_at)
        .ok_or(codes::INVALID_DEVICE)
}

static RACE_DETECTION: AtomicBool = AtomicBool::new(true);

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_set_race_detection(enabled: i32) -> i32 {
    i32::from(RACE_DETECTION.swap(enabled != 0, Ordering::AcqRel))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_configure(
    devices: u32,
    capacity: u64,
    deterministic: i32,
    seed: u64,
    timeout_ms: u64,
) -> u32 {
    guard("memreuse_standin_configure", codes::UNKNOWN, || {
        if devices == 0 || capacity == 0 {
            return Err(codes::INVALID_VALUE);
        }
        let mut config = MockConfig::with_capacity(capacity);
        config.race_detection = RACE_DETECTION.load(Ordering::Acquire);
        if deterministic != 0 {
            config = config.deterministic(seed);
        }
        if timeout_ms > 0 {
            config.joint_timeout = Duration::from_millis(timeout_ms);
        }
        crate::state::configure(devices as usize, config).map_err(|_| codes::UNKNOWN)?;
        crate::memory::reset();
        crate::vm::reset();
        crate::nccl::reset();
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_annotate(
    device_index: i32,
    ptr: u64,
    bytes: u64,
    id: u64,
) -> u32 {
    guard("memreuse_standin_annotate", codes::UNKNOWN, || {
        device(device_index)?.annotate_allocation(DevicePtr(ptr), bytes, AllocationId(id));
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_set_op_label(
    device_index: i32,
    label: *const c_char,
    len: usize,
) -> u32 {
    guard("memreuse_standin_set_op_label", codes::UNKNOWN, || {
        if label.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: `label` is valid for reads of `len` bytes (caller contract).
        let bytes = unsafe { std::slice::from_raw_parts(label.cast::<u8>(), len) };
        device(device_index)?.set_op_label(&String::from_utf8_lossy(bytes));
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_delay(stream: usize, micros: u64) -> u32 {
    guard("memreuse_standin_delay", codes::UNKNOWN, || {
        let s = crate::stream::stream_of(stream)?;
        s.device
            .delay(micros, &s.stream)
            .map_err(|e| crate::state::cu_code(&e))
    })
}

fn access_text(out: &mut String, a: &RaceAccess) {
    let kind = match a.kind {
        AccessKind::Read => 'R',
        AccessKind::Write => 'W',
    };
    let _ = write!(
        out,
        " {} {kind} {}",
        a.stream.0,
        a.allocation.map_or(0, |id| id.0)
    );
}

fn clean(op: &str) -> String {
    op.replace(['\t', '\n'], " ")
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_race_reports(
    device_index: i32,
    buf: *mut c_char,
    cap: usize,
) -> i64 {
    let mut needed = 0i64;
    let rc = guard("memreuse_standin_race_reports", codes::UNKNOWN, || {
        let reports = device(device_index)?.race_reports().unwrap_or_default();
        let mut text = String::new();
        for r in &reports {
            let kind = match r.kind {
                RaceKind::Reuse => "reuse",
                RaceKind::Schedule => "schedule",
            };
            let _ = write!(text, "{kind} {} {}", r.range.start, r.range.end);
            access_text(&mut text, &r.earlier);
            access_text(&mut text, &r.later);
            let _ = writeln!(text, "\t{}\t{}", clean(&r.earlier.op), clean(&r.later.op));
        }
        needed = text.len() as i64;
        if !buf.is_null() && cap >= text.len() {
            // SAFETY: `buf` is valid for writes of `cap` bytes (contract), and
            // `text.len() <= cap` (checked).
            unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len()) };
        }
        Ok(())
    });
    if rc == 0 { needed } else { -i64::from(rc) }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_race_count() -> u64 {
    let mut total = 0;
    guard("memreuse_standin_race_count", codes::UNKNOWN, || {
        total = with_state(|s| {
            s.devices
                .iter()
                .map(memreuse_mock::MockDevice::race_count)
                .sum()
        })?;
        Ok(())
    });
    total
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_calls(name: *const c_char) -> u64 {
    if name.is_null() {
        return 0;
    }
    // SAFETY: `name` is a NUL-terminated string (caller contract), checked non-null.
    let name = unsafe { CStr::from_ptr(name) };
    std::panic::catch_unwind(|| crate::state::calls_of(&name.to_string_lossy())).unwrap_or(0)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_live_streams() -> u64 {
    std::panic::catch_unwind(crate::state::live_streams).unwrap_or(0)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_live_allocations() -> u64 {
    std::panic::catch_unwind(crate::memory::live_allocations).unwrap_or(0)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_profile() -> *const c_char {
    let name: &CStr = if cfg!(feature = "no-vm") {
        c"no-vm"
    } else if cfg!(feature = "old-nccl") {
        c"old-nccl"
    } else {
        c"default"
    };
    name.as_ptr()
}
