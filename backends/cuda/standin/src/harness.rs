//! The `memreuse_standin_*` symbols: what the test harness and, when it finds them, the
//! `memreuse-cuda` backend use to configure the stand-in, feed its race detector, read its
//! race reports and inject faults. A real driver exports none of them.
//!
//! Those every stand-in has come from the engine (`memreuse_standin_engine::harness`, the
//! same names and signatures as the Ascend stand-in's), answering in `CUresult`s:
//! configure, race detection, annotations, op labels, exact delays, race reports and
//! count, call counters, live streams, profile (`default`, `no-vm` or `old-nccl`), and the
//! fault injection:
//!
//! | symbol | does |
//! | --- | --- |
//! | `memreuse_standin_inject_malloc_oom(device, nth)` | the device's `nth` next raw allocation (`cuMemAlloc_v2`, `cuMemCreate`) answers `CUDA_ERROR_OUT_OF_MEMORY` |
//! | `memreuse_standin_inject_call_failure(name, nth, code)` | the `nth` next call of export `name` answers `code` without running: e.g. `cuMemMap` with `CUDA_ERROR_OUT_OF_MEMORY` (2), `ncclAllReduce` with `ncclUnhandledCudaError` (1) |
//! | `memreuse_standin_pending_failures()` | injected call failures not yet taken |
//!
//! The CUDA ones:
//!
//! | symbol | returns | does |
//! | --- | --- | --- |
//! | `memreuse_standin_live_allocations()` | count | `cuMemAlloc` allocations not freed |
//! | `memreuse_standin_set_comm_async_error(comm, code)` | `ncclResult_t` | `ncclCommGetAsyncError` on `comm` reports `code` from now on (sticky: an NCCL error a real communicator hits on its own, such as a peer's failure); `comm` 0: every live communicator |

#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, c_void};

use memreuse_core::BackendError;
use memreuse_mock::{MockConfig, MockDevice, MockStream};
use memreuse_standin_engine::Face;

use crate::codes;

/// The driver face of the engine's harness hooks.
struct Driver;

impl Face for Driver {
    type Code = u32;

    const INTERNAL: u32 = codes::UNKNOWN;
    const INVALID_VALUE: u32 = codes::INVALID_VALUE;
    const INVALID_DEVICE: u32 = codes::INVALID_DEVICE;

    fn device(index: usize) -> Option<MockDevice> {
        crate::state::device_at(index)
    }

    fn race_count() -> u64 {
        crate::state::race_count()
    }

    fn configure(devices: usize, config: MockConfig) -> Result<(), u32> {
        crate::state::configure(devices, config).map_err(|_| codes::UNKNOWN)?;
        crate::memory::reset();
        crate::vm::reset();
        crate::nccl::reset();
        Ok(())
    }

    fn stream(raw: *mut c_void) -> Result<(MockDevice, MockStream), u32> {
        crate::stream::stream_of(raw as usize).map(|s| (s.device, s.stream))
    }

    fn mock_code(e: &BackendError) -> u32 {
        crate::state::cu_code(e)
    }

    fn live_streams() -> u64 {
        crate::state::live_streams()
    }

    fn profile() -> &'static CStr {
        if cfg!(feature = "no-vm") {
            c"no-vm"
        } else if cfg!(feature = "old-nccl") {
            c"old-nccl"
        } else {
            c"default"
        }
    }
}

memreuse_standin_engine::export_harness!(Driver);

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_live_allocations() -> u64 {
    std::panic::catch_unwind(crate::memory::live_allocations).unwrap_or(0)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memreuse_standin_set_comm_async_error(comm: usize, code: u32) -> u32 {
    crate::state::guard(
        "memreuse_standin_set_comm_async_error",
        codes::NCCL_INTERNAL_ERROR,
        || crate::nccl::set_async_error(comm, code),
    )
}
