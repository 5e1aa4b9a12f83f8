//! Conversions between memreuse's communicator arguments and NCCL's C types.

use std::ffi::c_void;
use std::ptr;

use cudarc::nccl::sys;
use memreuse_core::DevicePtr;
use memreuse_core::comm::{CommError, DType, ReduceOp};

use crate::device::CudaStreamHandle;

/// NCCL's type for `d` (the CUDA backend moves f32 only).
pub(crate) fn dtype(d: DType) -> Result<sys::ncclDataType_t, CommError> {
    match d {
        DType::F32 => Ok(sys::ncclDataType_t::ncclFloat32),
        other => Err(CommError::invalid_argument(
            "dtype",
            format!("{other:?} is not supported by the CUDA backend"),
        )),
    }
}

/// NCCL's reduction for `o`.
pub(crate) fn op(o: ReduceOp) -> sys::ncclRedOp_t {
    match o {
        ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
        ReduceOp::Max => sys::ncclRedOp_t::ncclMax,
        ReduceOp::Min => sys::ncclRedOp_t::ncclMin,
    }
}

/// The stream as the runtime-API handle NCCL takes.
pub(crate) fn raw_stream(s: &CudaStreamHandle) -> sys::cudaStream_t {
    s.raw().cu_stream().cast()
}

/// A device address as the pointer NCCL takes (never dereferenced on the host).
pub(crate) fn dev(p: DevicePtr) -> *mut c_void {
    ptr::without_provenance_mut(p.addr() as usize)
}

/// The `index`-th chunk of `count` elements of `dt` starting at `p`.
pub(crate) fn chunk(p: DevicePtr, index: usize, count: usize, dt: DType) -> DevicePtr {
    p.offset(index as u64 * count as u64 * dt.size_bytes())
}
