//! The `memreuse_standin_*` symbols: what the test harness (and, when it finds them, the
//! `memreuse-ascend` backend) uses to configure the stand-in, feed its race detector, read
//! race reports and inject faults. A real CANN install exports none of them.
//!
//! The hooks every stand-in has come from the engine (`memreuse_standin_engine::harness`:
//! configure, race detection, annotations, op labels, delays, race reports and count,
//! `inject_malloc_oom` (207001 here), `inject_call_failure`, call counters, live streams,
//! profile `default`, `cann80` or `cann85`), answering in ACL codes. The Ascend ones:
//!
//! | symbol | returns | does |
//! | --- | --- | --- |
//! | `memreuse_standin_inject_collective_failure(comm, k)` | HCCL code | the comm's `k`-th collective fails |
//! | `memreuse_standin_set_comm_async_error(comm, code)` | HCCL code | what `HcclGetCommAsyncError` reports |
//! | `memreuse_standin_set_comm_busy(comm, n)` | HCCL code | the next `n` `HcclCommDestroy` calls on `comm` answer `HCCL_E_AGAIN` |
//! | `memreuse_standin_set_stuck_calls(comm, n)` | HCCL code | the next `n` HCCL calls on `comm` block on the host until it is destroyed (a call stuck inside HCCL) |
//! | `memreuse_standin_blocked_calls(comm)` | count | calls on `comm` blocked right now (negative: an HCCL code) |
//! | `memreuse_standin_set_behaviour(bits)` | previous bits | behaviour profile (1: async error unsupported, 2: group unsupported, 4: barrier unsupported, 8: virtual memory unsupported) |
//! | `memreuse_standin_last_root_info_device()` | device | the current device of the thread that made the last root info (-1: none) |
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

use std::ffi::{CStr, c_void};

use memreuse_core::BackendError;
use memreuse_mock::{MockConfig, MockDevice, MockStream};
use memreuse_standin_engine::Face;

use crate::{CLUSTER, code, guard, hcode, stream_of};

/// The ACL face of the engine's harness hooks.
struct Acl;

impl Face for Acl {
    type Code = i32;

    const INTERNAL: i32 = code::INTERNAL_ERROR;
    const INVALID_VALUE: i32 = code::INVALID_PARAM;
    const INVALID_DEVICE: i32 = code::INVALID_DEVICE;

    fn device(index: usize) -> Option<MockDevice> {
        crate::device_at(index)
    }

    fn race_count() -> u64 {
        CLUSTER.race_count()
    }

    fn configure(devices: usize, config: MockConfig) -> Result<(), i32> {
        let behaviour = behaviour_from_env().ok_or(code::INVALID_PARAM)?;
        crate::hccl::BEHAVIOUR.store(behaviour, std::sync::atomic::Ordering::Release);
        CLUSTER
            .configure(devices, config)
            .map_err(|_| code::INTERNAL_ERROR)?;
        crate::vm::reset();
        Ok(())
    }

    fn stream(raw: *mut c_void) -> Result<(MockDevice, MockStream), i32> {
        stream_of(raw).map(|s| (s.device, s.stream))
    }

    fn mock_code(e: &BackendError) -> i32 {
        crate::acl_code(e)
    }

    fn live_streams() -> u64 {
        crate::live_streams()
    }

    fn profile() -> &'static CStr {
        if cfg!(feature = "cann80") {
            c"cann80"
        } else if cfg!(feature = "cann85") {
            c"cann85"
        } else {
            c"default"
        }
    }
}

memreuse_standin_engine::export_harness!(Acl);

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
