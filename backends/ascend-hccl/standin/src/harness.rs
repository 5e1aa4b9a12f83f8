//! The `memreuse_standin_*` symbols: what the test harness (and, when it finds them, the
//! `memreuse-ascend` backend) uses to configure the stand-in, feed its race detector, read
//! race reports and inject faults. A real CANN install exports none of them.
//!
//! | symbol | returns | does |
//! | --- | --- | --- |
//! | `memreuse_standin_configure(devices, capacity, deterministic, seed, timeout_ms)` | ACL code | replaces the cluster with a fresh one (call while no handle is in use) |
//! | `memreuse_standin_annotate(device, ptr, bytes, id)` | ACL code | `annotate_allocation` on the device |
//! | `memreuse_standin_set_op_label(device, label, len)` | ACL code | labels the next ops (diagnostics) |
//! | `memreuse_standin_delay(stream, micros)` | ACL code | enqueues a device busy period |
//! | `memreuse_standin_set_race_detection(enabled)` | previous (0/1) | whether the next `configure` gives the devices a race detector (default 1) |
//! | `memreuse_standin_race_reports(device, buf, cap)` | bytes needed | race reports as text lines |
//! | `memreuse_standin_race_count()` | count | races found on every device of the cluster |
//! | `memreuse_standin_inject_malloc_oom(device, nth)` | ACL code | the `nth` next device malloc fails with 207001 |
//! | `memreuse_standin_inject_collective_failure(comm, k)` | HCCL code | the comm's `k`-th collective fails |
//! | `memreuse_standin_set_comm_async_error(comm, code)` | HCCL code | what `HcclGetCommAsyncError` reports |
//! | `memreuse_standin_calls(name)` | count | how often symbol `name` was called |
//! | `memreuse_standin_set_comm_busy(comm, n)` | HCCL code | the next `n` `HcclCommDestroy` calls on `comm` answer `HCCL_E_AGAIN` |
//! | `memreuse_standin_set_stuck_calls(comm, n)` | HCCL code | the next `n` HCCL calls on `comm` block on the host until it is destroyed (a call stuck inside HCCL) |
//! | `memreuse_standin_blocked_calls(comm)` | count | calls on `comm` blocked right now (negative: an HCCL code) |
//! | `memreuse_standin_set_behaviour(bits)` | previous bits | behaviour profile (1: async error unsupported, 2: group unsupported, 4: barrier unsupported, 8: virtual memory unsupported) |
//! | `memreuse_standin_last_root_info_device()` | device | the current device of the thread that made the last root info (-1: none) |
//! | `memreuse_standin_live_streams()` | count | stream handles not destroyed |
//! | `memreuse_standin_profile()` | C string | the build variant: `default`, `cann80` or `cann85` |
//!
//! The behaviour profile is also read from `MEMREUSE_STANDIN_BEHAVIOUR` (comma-separated
//! `async-error-unsupported`, `group-unsupported`, `barrier-unsupported`,
//! `vm-unsupported`) whenever the cluster is (re)configured; an unknown name makes
//! configuration fail.
//!
//! Race report lines: `KIND START END` then, for the earlier and the later access,
//! `STREAM R|W ALLOC`, then a tab, the earlier op, a tab, the later op (KIND is `reuse` or
//! `schedule`, ALLOC 0 when unannotated).

#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, c_char, c_void};
use std::fmt::Write as _;
use std::time::Duration;

use memreuse_core::{AccessKind, AllocationId, Backend, DevicePtr, RaceAccess, RaceKind};
use memreuse_mock::{FaultKind, MallocFault, MockConfig};

use crate::{STATE, code, device_at, fresh_state, guard, hcode, stream_of, with_state};

fn device(index: i32) -> Result<memreuse_mock::MockDevice, i32> {
    usize::try_from(index)
        .ok()
        .and_then(device_at)
        .ok_or(code::INVALID_DEVICE)
}

/// Whether the next `memreuse_standin_configure` gives its devices a race detector: off when
/// the runner judges races with its adaptor alone (`--race-check adaptor`).
static RACE_DETECTION: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_set_race_detection(enabled: i32) -> i32 {
    i32::from(RACE_DETECTION.swap(enabled != 0, std::sync::atomic::Ordering::AcqRel))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_configure(
    devices: u32,
    capacity: u64,
    deterministic: i32,
    seed: u64,
    timeout_ms: u64,
) -> i32 {
    guard("memreuse_standin_configure", code::INTERNAL_ERROR, || {
        if devices == 0 || capacity == 0 {
            return Err(code::INVALID_PARAM);
        }
        let mut config = MockConfig::with_capacity(capacity);
        config.race_detection = RACE_DETECTION.load(std::sync::atomic::Ordering::Acquire);
        if deterministic != 0 {
            config = config.deterministic(seed);
        }
        if timeout_ms > 0 {
            config.joint_timeout = Duration::from_millis(timeout_ms);
        }
        let behaviour = behaviour_from_env().ok_or(code::INVALID_PARAM)?;
        crate::hccl::BEHAVIOUR.store(behaviour, std::sync::atomic::Ordering::Release);
        let state = fresh_state(devices as usize, config).map_err(|_| code::INTERNAL_ERROR)?;
        *STATE.lock() = Some(state);
        crate::vm::reset();
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_annotate(
    device_index: i32,
    ptr: u64,
    bytes: u64,
    id: u64,
) -> i32 {
    guard("memreuse_standin_annotate", code::INTERNAL_ERROR, || {
        device(device_index)?.annotate_allocation(DevicePtr(ptr), bytes, AllocationId(id));
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_set_op_label(
    device_index: i32,
    label: *const c_char,
    len: usize,
) -> i32 {
    guard(
        "memreuse_standin_set_op_label",
        code::INTERNAL_ERROR,
        || {
            if label.is_null() {
                return Err(code::INVALID_PARAM);
            }
            // SAFETY: `label` is valid for reads of `len` bytes (caller contract).
            let bytes = unsafe { std::slice::from_raw_parts(label.cast::<u8>(), len) };
            device(device_index)?.set_op_label(&String::from_utf8_lossy(bytes));
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_delay(stream: *mut c_void, micros: u64) -> i32 {
    guard("memreuse_standin_delay", code::INTERNAL_ERROR, || {
        let s = stream_of(stream)?;
        s.device
            .delay(micros, &s.stream)
            .map_err(|e| crate::acl_code(&e))
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
    let rc = guard(
        "memreuse_standin_race_reports",
        code::INTERNAL_ERROR,
        || {
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
                // SAFETY: `buf` is valid for writes of `cap` bytes (contract) and
                // `text.len() <= cap` (checked).
                unsafe {
                    std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
                };
            }
            Ok(())
        },
    );
    if rc == 0 { needed } else { -i64::from(rc) }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_race_count() -> u64 {
    let mut total = 0;
    guard("memreuse_standin_race_count", 0, || {
        total = with_state(|s| {
            s.devices
                .iter()
                .map(memreuse_mock::MockDevice::race_count)
                .sum()
        })
        .unwrap_or(0);
        Ok(())
    });
    total
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_inject_malloc_oom(device_index: i32, nth: u64) -> i32 {
    guard(
        "memreuse_standin_inject_malloc_oom",
        code::INTERNAL_ERROR,
        || {
            device(device_index)?.inject_malloc_fault(MallocFault {
                nth,
                kind: FaultKind::OutOfMemory,
            });
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_inject_collective_failure(comm: *mut c_void, k: u64) -> i32 {
    guard(
        "memreuse_standin_inject_collective_failure",
        hcode::E_INTERNAL,
        || crate::hccl::inject_collective_failure(comm, k),
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_set_comm_async_error(comm: *mut c_void, code: i32) -> i32 {
    guard(
        "memreuse_standin_set_comm_async_error",
        hcode::E_INTERNAL,
        || crate::hccl::set_async_error(comm, code),
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_calls(name: *const c_char) -> u64 {
    if name.is_null() {
        return 0;
    }
    // SAFETY: `name` is a NUL-terminated string (caller contract), checked non-null.
    let name = unsafe { CStr::from_ptr(name) };
    std::panic::catch_unwind(|| crate::calls_of(&name.to_string_lossy())).unwrap_or(0)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_set_comm_busy(comm: *mut c_void, n: i32) -> i32 {
    guard("memreuse_standin_set_comm_busy", hcode::E_INTERNAL, || {
        crate::comm_of(comm)?
            .shared
            .busy_destroys
            .store(n, std::sync::atomic::Ordering::Release);
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_set_behaviour(bits: u32) -> u32 {
    crate::hccl::BEHAVIOUR.swap(bits, std::sync::atomic::Ordering::AcqRel)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_last_root_info_device() -> i32 {
    crate::hccl::last_root_device()
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_live_streams() -> u64 {
    std::panic::catch_unwind(crate::live_streams).unwrap_or(0)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_profile() -> *const c_char {
    let name: &CStr = if cfg!(feature = "cann80") {
        c"cann80"
    } else if cfg!(feature = "cann85") {
        c"cann85"
    } else {
        c"default"
    };
    name.as_ptr()
}

/// The behaviour bits named in `MEMREUSE_STANDIN_BEHAVIOUR` (`None`: an unknown name).
pub(crate) fn behaviour_from_env() -> Option<u32> {
    let value = std::env::var("MEMREUSE_STANDIN_BEHAVIOUR").unwrap_or_default();
    let mut bits = 0;
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let (_, bit) = crate::hccl::behaviour::NAMES
            .iter()
            .find(|(n, _)| *n == name)?;
        bits |= bit;
    }
    Some(bits)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_set_stuck_calls(comm: *mut c_void, n: i32) -> i32 {
    guard(
        "memreuse_standin_set_stuck_calls",
        hcode::E_INTERNAL,
        || crate::hccl::set_stuck_calls(comm, n),
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_blocked_calls(comm: *mut c_void) -> i32 {
    let mut n = 0;
    let rc = guard("memreuse_standin_blocked_calls", hcode::E_INTERNAL, || {
        n = crate::hccl::blocked_calls(comm)?;
        Ok(())
    });
    if rc == 0 { n } else { -rc }
}
