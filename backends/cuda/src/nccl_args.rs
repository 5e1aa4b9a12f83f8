//! Conversions between memreuse's communicator arguments and NCCL's C types.

use std::ffi::c_void;
use std::ptr;

use cudarc::nccl::sys;
use memreuse_core::DevicePtr;
use memreuse_core::comm::{CommError, DType, ReduceOp};

use crate::device::CudaStreamHandle;

/// NCCL's type for `d` (NCCL 2.24+ has every element type memreuse has).
pub(crate) fn dtype(d: DType) -> Result<sys::ncclDataType_t, CommError> {
    use sys::ncclDataType_t as T;
    Ok(match d {
        DType::F32 => T::ncclFloat32,
        DType::F16 => T::ncclFloat16,
        DType::BF16 => T::ncclBfloat16,
        DType::F64 => T::ncclFloat64,
        DType::I8 => T::ncclInt8,
        DType::U8 => T::ncclUint8,
        DType::I32 => T::ncclInt32,
        DType::U32 => T::ncclUint32,
        DType::I64 => T::ncclInt64,
        DType::U64 => T::ncclUint64,
        DType::F8E4M3 => T::ncclFloat8e4m3,
        DType::F8E5M2 => T::ncclFloat8e5m2,
        other => {
            return Err(CommError::invalid_argument(
                "dtype",
                format!("{other} has no NCCL type in this build of the CUDA backend"),
            ));
        }
    })
}

/// NCCL's reduction for `o`.
pub(crate) fn op(o: ReduceOp) -> sys::ncclRedOp_t {
    match o {
        ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
        ReduceOp::Prod => sys::ncclRedOp_t::ncclProd,
        ReduceOp::Avg => sys::ncclRedOp_t::ncclAvg,
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
