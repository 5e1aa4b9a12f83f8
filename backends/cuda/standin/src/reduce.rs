//! Reductions for every `ncclDataType_t` and `ncclRedOp_t` of cudarc's `nccl::sys`, as
//! joint-op bodies over the regions the collective declared: the codes are decoded to
//! memreuse's [`DType`] and [`ReduceOp`] and reduced by the mock communicator's typed bodies
//! ([`memreuse_mock::collective::all_reduce_typed`]), which use core's reference arithmetic
//! (`memreuse_core::comm::combine_into`). One arithmetic everywhere: every result is
//! bit-identical to the mock backend's by construction.
//!
//! FP8 reductions need compute capability 9.0, which the stand-in's devices (8.0) lack:
//! they are `ncclInvalidArgument`, as NCCL answers on such a device. `ncclAvg` on an integer
//! type is `ncclInvalidArgument` too: NCCL would accept it, but the reference arithmetic
//! defines avg on floating types only, and the backend refuses it before calling NCCL.

use memreuse_core::BackendError;
use memreuse_core::comm::{DType, ReduceOp};
use memreuse_mock::{JointMemory, collective};

use crate::codes;

/// `ncclDataType_t` values (NCCL 2.24+, as cudarc binds them).
pub mod dtype {
    pub const INT8: u32 = 0;
    pub const UINT8: u32 = 1;
    pub const INT32: u32 = 2;
    pub const UINT32: u32 = 3;
    pub const INT64: u32 = 4;
    pub const UINT64: u32 = 5;
    pub const FLOAT16: u32 = 6;
    pub const FLOAT32: u32 = 7;
    pub const FLOAT64: u32 = 8;
    pub const BFLOAT16: u32 = 9;
    pub const FLOAT8E4M3: u32 = 10;
    pub const FLOAT8E5M2: u32 = 11;
    /// `ncclNumTypes`.
    pub const COUNT: u32 = 12;
}

/// `ncclRedOp_t` values.
pub mod op {
    pub const SUM: u32 = 0;
    pub const PROD: u32 = 1;
    pub const MAX: u32 = 2;
    pub const MIN: u32 = 3;
    pub const AVG: u32 = 4;
    /// `ncclNumOps`.
    pub const COUNT: u32 = 5;
}

const _: () = {
    use cudarc::nccl::sys::{ncclDataType_t as T, ncclRedOp_t as O};
    assert!(T::ncclInt8 as u32 == dtype::INT8 && T::ncclUint8 as u32 == dtype::UINT8);
    assert!(T::ncclInt32 as u32 == dtype::INT32 && T::ncclUint32 as u32 == dtype::UINT32);
    assert!(T::ncclInt64 as u32 == dtype::INT64 && T::ncclUint64 as u32 == dtype::UINT64);
    assert!(T::ncclFloat16 as u32 == dtype::FLOAT16 && T::ncclFloat32 as u32 == dtype::FLOAT32);
    assert!(T::ncclFloat64 as u32 == dtype::FLOAT64 && T::ncclBfloat16 as u32 == dtype::BFLOAT16);
    assert!(T::ncclFloat8e4m3 as u32 == dtype::FLOAT8E4M3);
    assert!(T::ncclFloat8e5m2 as u32 == dtype::FLOAT8E5M2);
    assert!(T::ncclNumTypes as u32 == dtype::COUNT);
    assert!(O::ncclSum as u32 == op::SUM && O::ncclProd as u32 == op::PROD);
    assert!(O::ncclMax as u32 == op::MAX && O::ncclMin as u32 == op::MIN);
    assert!(O::ncclAvg as u32 == op::AVG && O::ncclNumOps as u32 == op::COUNT);
};

/// Bytes per element, or `ncclInvalidArgument` for a value outside the enum.
pub fn elem_size(t: u32) -> Result<u64, u32> {
    Ok(match t {
        dtype::INT8 | dtype::UINT8 | dtype::FLOAT8E4M3 | dtype::FLOAT8E5M2 => 1,
        dtype::FLOAT16 | dtype::BFLOAT16 => 2,
        dtype::INT32 | dtype::UINT32 | dtype::FLOAT32 => 4,
        dtype::INT64 | dtype::UINT64 | dtype::FLOAT64 => 8,
        _ => return Err(codes::NCCL_INVALID_ARGUMENT),
    })
}

/// The memreuse type and operator of `(t, o)`, or `ncclInvalidArgument` for values
/// outside the enums and for reductions the reference arithmetic does not define (fp8;
/// avg on integers).
pub fn check(t: u32, o: u32) -> Result<(DType, ReduceOp), u32> {
    let dtype = match t {
        dtype::INT8 => DType::I8,
        dtype::UINT8 => DType::U8,
        dtype::INT32 => DType::I32,
        dtype::UINT32 => DType::U32,
        dtype::INT64 => DType::I64,
        dtype::UINT64 => DType::U64,
        dtype::FLOAT16 => DType::F16,
        dtype::FLOAT32 => DType::F32,
        dtype::FLOAT64 => DType::F64,
        dtype::BFLOAT16 => DType::BF16,
        dtype::FLOAT8E4M3 => DType::F8E4M3,
        dtype::FLOAT8E5M2 => DType::F8E5M2,
        _ => return Err(codes::NCCL_INVALID_ARGUMENT),
    };
    let op = match o {
        op::SUM => ReduceOp::Sum,
        op::PROD => ReduceOp::Prod,
        op::MAX => ReduceOp::Max,
        op::MIN => ReduceOp::Min,
        op::AVG => ReduceOp::Avg,
        _ => return Err(codes::NCCL_INVALID_ARGUMENT),
    };
    if dtype.reduces_with(op) {
        Ok((dtype, op))
    } else {
        Err(codes::NCCL_INVALID_ARGUMENT)
    }
}

fn decoded(t: u32, o: u32) -> Result<(DType, ReduceOp), BackendError> {
    check(t, o).map_err(|_| {
        BackendError::invalid_argument(
            "cuda-standin",
            "ncclReduce",
            format!("no reduction for ncclDataType_t {t} with ncclRedOp_t {o}"),
        )
    })
}

/// All-reduce body: region 0 is the input, each rank's last region the output.
pub fn all_reduce(mem: &mut JointMemory<'_>, t: u32, o: u32) -> Result<(), BackendError> {
    let (dtype, op) = decoded(t, o)?;
    collective::all_reduce_typed(mem, dtype, op)
}

/// Reduce-scatter body: region 0 the input (`size` chunks), region 1 the output chunk.
pub fn reduce_scatter(mem: &mut JointMemory<'_>, t: u32, o: u32) -> Result<(), BackendError> {
    let (dtype, op) = decoded(t, o)?;
    collective::reduce_scatter_typed(mem, dtype, op)
}
