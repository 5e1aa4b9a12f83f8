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

/// Whether this backend passes `o` on `d` to NCCL: the reference arithmetic's rule
/// ([`DType::reduces_with`]). NCCL itself also averages integers and reduces fp8 on
/// compute capability 9.0 and newer; the backend refuses both, so that the reductions it
/// accepts, and their results, are the same on every device and on every other backend
/// (it does not query the compute capability: one rule everywhere, no device-dependent
/// surprises in a job that moves between machines).
pub(crate) fn reduces(d: DType, o: ReduceOp) -> bool {
    d.reduces_with(o)
}

/// NCCL's type and operator for a reduction of `o` on `d`, or the `InvalidArgument` of
/// `call` naming the type, the operator and the backend: refused before anything is
/// enqueued.
pub(crate) fn reduction(
    call: &'static str,
    d: DType,
    o: ReduceOp,
) -> Result<(sys::ncclDataType_t, sys::ncclRedOp_t), CommError> {
    if !reduces(d, o) {
        let why = if d.is_fp8() {
            "fp8 types move data but are not reduced (NCCL needs sm_90+ for that)"
        } else {
            "avg is for floating types"
        };
        return Err(CommError::unsupported_reduction("cuda", call, d, o, why));
    }
    Ok((dtype(d)?, op(o)))
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
