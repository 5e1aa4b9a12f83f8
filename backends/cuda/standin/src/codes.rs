//! The `CUresult` and `ncclResult_t` values the stand-in returns, as CUDA 12.8's `cuda.h`
//! and `nccl.h` number them, each checked at compile time against cudarc's bindings (the
//! ones `memreuse-cuda` is built with). Returning only these values matters beyond style:
//! cudarc declares both as Rust enums, so a value outside them would be undefined
//! behaviour in the caller.

use cudarc::driver::sys::CUresult as Cu;
use cudarc::nccl::sys::ncclResult_t as Nc;

/// `CUDA_SUCCESS`.
pub const SUCCESS: u32 = 0;
/// `CUDA_ERROR_INVALID_VALUE`.
pub const INVALID_VALUE: u32 = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const OUT_OF_MEMORY: u32 = 2;
/// `CUDA_ERROR_NOT_INITIALIZED`.
pub const NOT_INITIALIZED: u32 = 3;
/// `CUDA_ERROR_INVALID_DEVICE`.
pub const INVALID_DEVICE: u32 = 101;
/// `CUDA_ERROR_INVALID_CONTEXT`.
pub const INVALID_CONTEXT: u32 = 201;
/// `CUDA_ERROR_INVALID_HANDLE`.
pub const INVALID_HANDLE: u32 = 400;
/// `CUDA_ERROR_NOT_READY`.
pub const NOT_READY: u32 = 600;
/// `CUDA_ERROR_ILLEGAL_ADDRESS`.
pub const ILLEGAL_ADDRESS: u32 = 700;
/// `CUDA_ERROR_LAUNCH_FAILED`.
pub const LAUNCH_FAILED: u32 = 719;
/// `CUDA_ERROR_NOT_SUPPORTED`.
pub const NOT_SUPPORTED: u32 = 801;
/// `CUDA_ERROR_UNKNOWN`.
pub const UNKNOWN: u32 = 999;

const _: () = {
    assert!(Cu::CUDA_SUCCESS as u32 == SUCCESS);
    assert!(Cu::CUDA_ERROR_INVALID_VALUE as u32 == INVALID_VALUE);
    assert!(Cu::CUDA_ERROR_OUT_OF_MEMORY as u32 == OUT_OF_MEMORY);
    assert!(Cu::CUDA_ERROR_NOT_INITIALIZED as u32 == NOT_INITIALIZED);
    assert!(Cu::CUDA_ERROR_INVALID_DEVICE as u32 == INVALID_DEVICE);
    assert!(Cu::CUDA_ERROR_INVALID_CONTEXT as u32 == INVALID_CONTEXT);
    assert!(Cu::CUDA_ERROR_INVALID_HANDLE as u32 == INVALID_HANDLE);
    assert!(Cu::CUDA_ERROR_NOT_READY as u32 == NOT_READY);
    assert!(Cu::CUDA_ERROR_ILLEGAL_ADDRESS as u32 == ILLEGAL_ADDRESS);
    assert!(Cu::CUDA_ERROR_LAUNCH_FAILED as u32 == LAUNCH_FAILED);
    assert!(Cu::CUDA_ERROR_NOT_SUPPORTED as u32 == NOT_SUPPORTED);
    assert!(Cu::CUDA_ERROR_UNKNOWN as u32 == UNKNOWN);
};

/// The names and `cuGetErrorString` texts of the codes above (the driver's own wording).
pub const DRIVER_TEXTS: [(u32, &std::ffi::CStr, &std::ffi::CStr); 12] = [
    (SUCCESS, c"CUDA_SUCCESS", c"no error"),
    (
        INVALID_VALUE,
        c"CUDA_ERROR_INVALID_VALUE",
        c"invalid argument",
    ),
    (OUT_OF_MEMORY, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (
        NOT_INITIALIZED,
        c"CUDA_ERROR_NOT_INITIALIZED",
        c"initialization error",
    ),
    (
        INVALID_DEVICE,
        c"CUDA_ERROR_INVALID_DEVICE",
        c"invalid device ordinal",
    ),
    (
        INVALID_CONTEXT,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        INVALID_HANDLE,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (NOT_READY, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (
        ILLEGAL_ADDRESS,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered",
    ),
    (
        LAUNCH_FAILED,
        c"CUDA_ERROR_LAUNCH_FAILED",
        c"unspecified launch failure",
    ),
    (
        NOT_SUPPORTED,
        c"CUDA_ERROR_NOT_SUPPORTED",
        c"operation not supported",
    ),
    (UNKNOWN, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

/// `ncclSuccess`.
pub const NCCL_SUCCESS: u32 = 0;
/// `ncclSystemError`.
pub const NCCL_SYSTEM_ERROR: u32 = 2;
/// `ncclInternalError`.
pub const NCCL_INTERNAL_ERROR: u32 = 3;
/// `ncclInvalidArgument`.
pub const NCCL_INVALID_ARGUMENT: u32 = 4;
/// `ncclInvalidUsage`.
pub const NCCL_INVALID_USAGE: u32 = 5;
/// `ncclRemoteError`.
pub const NCCL_REMOTE_ERROR: u32 = 6;
/// `ncclInProgress`.
pub const NCCL_IN_PROGRESS: u32 = 7;

const _: () = {
    assert!(Nc::ncclSuccess as u32 == NCCL_SUCCESS);
    assert!(Nc::ncclSystemError as u32 == NCCL_SYSTEM_ERROR);
    assert!(Nc::ncclInternalError as u32 == NCCL_INTERNAL_ERROR);
    assert!(Nc::ncclInvalidArgument as u32 == NCCL_INVALID_ARGUMENT);
    assert!(Nc::ncclInvalidUsage as u32 == NCCL_INVALID_USAGE);
    assert!(Nc::ncclRemoteError as u32 == NCCL_REMOTE_ERROR);
    assert!(Nc::ncclInProgress as u32 == NCCL_IN_PROGRESS);
};

/// `ncclGetErrorString`'s texts (NCCL's own wording), by `ncclResult_t`.
pub fn nccl_text(code: u32) -> &'static std::ffi::CStr {
    match code {
        NCCL_SUCCESS => c"no error",
        1 => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        NCCL_SYSTEM_ERROR => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        NCCL_INTERNAL_ERROR => c"internal error - please report this issue to the NCCL developers",
        NCCL_INVALID_ARGUMENT => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        NCCL_INVALID_USAGE => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        NCCL_REMOTE_ERROR => c"remote process exited or there was a network error",
        NCCL_IN_PROGRESS => c"NCCL operation in progress",
        _ => c"unknown result code",
    }
}
