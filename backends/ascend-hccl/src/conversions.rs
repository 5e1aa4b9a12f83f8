//! Conversions from memreuse's types to the C types of the ABI (as wgpu-hal's `conv.rs`):
//! device addresses as `void*`, data types and reduction operators as their HCCL enum
//! values. Nothing here calls the runtime.

use std::ffi::c_void;

use memreuse_core::DevicePtr;
use memreuse_core::comm::{CommError, DType, ReduceOp};

use crate::sys;

/// A device address as the `void*` the C signatures take.
pub(crate) fn device_ptr(p: DevicePtr) -> *mut c_void {
    address(p.addr())
}

/// A raw address (a reservation, a mapping, a physical handle) as a `void*`.
pub(crate) fn address(addr: u64) -> *mut c_void {
    addr as usize as *mut c_void
}

/// A `void*` the runtime returned, as the integer the rest of the crate keeps.
pub(crate) fn to_address(p: *mut c_void) -> u64 {
    p as usize as u64
}

/// The HCCL data type of `dtype`, where HCCL has one this backend passes.
pub(crate) fn hccl_dtype(dtype: DType) -> Option<sys::HcclDataType> {
    match dtype {
        DType::F32 => Some(sys::HCCL_DATA_TYPE_FP32),
        _ => None,
    }
}

/// The HCCL reduction operator of `op`. HCCL's operators are SUM, PROD, MAX and MIN:
/// `Avg` is refused before anything is enqueued.
pub(crate) fn hccl_op(call: &'static str, op: ReduceOp) -> Result<sys::HcclReduceOp, CommError> {
    match op {
        ReduceOp::Sum => Ok(sys::HCCL_REDUCE_SUM),
        ReduceOp::Prod => Ok(sys::HCCL_REDUCE_PROD),
        ReduceOp::Max => Ok(sys::HCCL_REDUCE_MAX),
        ReduceOp::Min => Ok(sys::HCCL_REDUCE_MIN),
        ReduceOp::Avg => Err(CommError::invalid_argument(
            call,
            "the ascend backend cannot reduce with avg: HCCL's operators are sum, prod, max \
             and min",
        )),
    }
}
