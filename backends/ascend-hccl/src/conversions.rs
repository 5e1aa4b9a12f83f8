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

/// The HCCL data type of `dtype`: every memreuse type has one (HCCL's enum lists both
/// fp8 formats NCCL has), so data movement takes every type; `None` only for a type added
/// to memreuse after this mapping.
pub(crate) fn hccl_dtype(dtype: DType) -> Option<sys::HcclDataType> {
    Some(match dtype {
        DType::F32 => sys::HCCL_DATA_TYPE_FP32,
        DType::F16 => sys::HCCL_DATA_TYPE_FP16,
        DType::BF16 => sys::HCCL_DATA_TYPE_BFP16,
        DType::F64 => sys::HCCL_DATA_TYPE_FP64,
        DType::I8 => sys::HCCL_DATA_TYPE_INT8,
        DType::U8 => sys::HCCL_DATA_TYPE_UINT8,
        DType::I32 => sys::HCCL_DATA_TYPE_INT32,
        DType::U32 => sys::HCCL_DATA_TYPE_UINT32,
        DType::I64 => sys::HCCL_DATA_TYPE_INT64,
        DType::U64 => sys::HCCL_DATA_TYPE_UINT64,
        DType::F8E4M3 => sys::HCCL_DATA_TYPE_FP8E4M3,
        DType::F8E5M2 => sys::HCCL_DATA_TYPE_FP8E5M2,
        _ => return None,
    })
}

/// Whether HCCL reduces `dtype` with `op`. CANN documents `HcclAllReduce` and
/// `HcclReduceScatter` on INT8, INT16, INT32, INT64, FP16, FP32 and BFP16 only (no unsigned
/// types, no FP64, no fp8), with the operators SUM, PROD, MAX and MIN; where it does not say
/// whether every operator works on every one of those types, this backend takes the
/// reading that all do. `Avg` is refused, not emulated: a sum then a scale would be a
/// second kernel with its own rounding, and PyTorch's HCCL process group refuses it too.
pub(crate) fn hccl_reduces(dtype: DType, op: ReduceOp) -> bool {
    let typed = matches!(
        dtype,
        DType::I8 | DType::I32 | DType::I64 | DType::F16 | DType::F32 | DType::BF16
    );
    typed && op != ReduceOp::Avg
}

/// The refusal of a reduction HCCL cannot do, naming the type, the operator and the backend.
pub(crate) fn refuse_reduction(call: &'static str, dtype: DType, op: ReduceOp) -> CommError {
    CommError::unsupported_reduction(
        "ascend",
        call,
        dtype,
        op,
        "HCCL reduces i8, i32, i64, f16, f32 and bf16 with sum, prod, max and min (no avg)",
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_maps_to_the_hccl_enum_value_cann_lists() {
        // HcclDataType: INT8=0, INT16=1, INT32=2, FP16=3, FP32=4, INT64=5, UINT64=6,
        // UINT8=7, UINT16=8, UINT32=9, FP64=10, BFP16=11, INT128=12, HIF8=14, FP8E4M3=15,
        // FP8E5M2=16, FP8E8M0=17.
        let want = [
            (DType::I8, 0),
            (DType::I32, 2),
            (DType::F16, 3),
            (DType::F32, 4),
            (DType::I64, 5),
            (DType::U64, 6),
            (DType::U8, 7),
            (DType::U32, 9),
            (DType::F64, 10),
            (DType::BF16, 11),
            (DType::F8E4M3, 15),
            (DType::F8E5M2, 16),
        ];
        assert_eq!(want.len(), DType::ALL.len());
        for (dtype, code) in want {
            assert_eq!(hccl_dtype(dtype), Some(code), "{dtype}");
        }
    }

    #[test]
    fn every_reduce_op_but_avg_maps_to_the_hccl_enum_value() {
        let want = [
            (ReduceOp::Sum, 0),
            (ReduceOp::Prod, 1),
            (ReduceOp::Max, 2),
            (ReduceOp::Min, 3),
        ];
        for (op, code) in want {
            assert_eq!(hccl_op("all_reduce", op).unwrap(), code, "{op}");
        }
        let avg = hccl_op("all_reduce", ReduceOp::Avg)
            .unwrap_err()
            .to_string();
        assert!(avg.contains("avg") && avg.contains("ascend"), "{avg}");
    }

    #[test]
    fn hccl_reduces_the_documented_types_with_its_four_operators() {
        let reducible = [
            DType::I8,
            DType::I32,
            DType::I64,
            DType::F16,
            DType::F32,
            DType::BF16,
        ];
        for dtype in DType::ALL {
            for op in ReduceOp::ALL {
                let want = reducible.contains(&dtype) && op != ReduceOp::Avg;
                assert_eq!(hccl_reduces(dtype, op), want, "{dtype} {op}");
            }
        }
        let why = refuse_reduction("all_reduce", DType::U8, ReduceOp::Sum).to_string();
        assert!(
            why.contains("u8") && why.contains("sum") && why.contains("ascend"),
            "{why}"
        );
    }
}
