//! Element types and reduction operators, with their names and the rules that say which
//! reductions are defined.

use std::fmt;
use std::str::FromStr;

/// Element type of a communicated buffer: every type NCCL and HCCL communicate in.
///
/// The enum is `non_exhaustive` so that a type a future NCCL adds (fp4, say) does not break
/// matches downstream. The fp8 types are for data movement (all_gather, broadcast,
/// all_to_all, send/recv): no reference arithmetic is defined for them, so a reduction on
/// one is refused unless a backend says it can do it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16: binary32's exponent with a 7-bit significand.
    BF16,
    /// IEEE 754 binary64.
    F64,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
    /// 8-bit float, 4 exponent and 3 significand bits (OCP E4M3, NCCL's `ncclFloat8e4m3`).
    F8E4M3,
    /// 8-bit float, 5 exponent and 2 significand bits (OCP E5M2, NCCL's `ncclFloat8e5m2`).
    F8E5M2,
}

impl DType {
    /// Every element type, in the order of their names in [`DType::NAMES`].
    pub const ALL: [DType; 12] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
        DType::F8E4M3,
        DType::F8E5M2,
    ];

    /// The names [`DType::name`] gives and [`DType::from_str`] accepts, as one line for
    /// error messages.
    pub const NAMES: &'static str =
        "f32, f16, bf16, f64, i8, u8, i32, u32, i64, u64, f8e4m3, f8e5m2";

    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> u64 {
        match self {
            DType::I8 | DType::U8 | DType::F8E4M3 | DType::F8E5M2 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// The lowercase name used in schedules, reports and errors (`bf16`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
        }
    }

    /// Whether the type is a floating-point type (fp8 included).
    pub const fn is_floating(self) -> bool {
        matches!(
            self,
            DType::F32 | DType::F16 | DType::BF16 | DType::F64 | DType::F8E4M3 | DType::F8E5M2
        )
    }

    /// Whether the type is one of the two fp8 types.
    pub const fn is_fp8(self) -> bool {
        matches!(self, DType::F8E4M3 | DType::F8E5M2)
    }

    /// Whether the type is a signed integer type.
    pub const fn is_signed_integer(self) -> bool {
        matches!(self, DType::I8 | DType::I32 | DType::I64)
    }

    /// Whether the type is an unsigned integer type.
    pub const fn is_unsigned_integer(self) -> bool {
        matches!(self, DType::U8 | DType::U32 | DType::U64)
    }

    /// Explicit significand bits of a floating type (10 for f16, 7 for bf16, 23 for f32, 52
    /// for f64, 3 and 2 for the fp8 types); `None` for integers. Every integer of magnitude
    /// up to `2^(bits + 1)` is exact in the type, which is the bound that makes a sum
    /// independent of its order.
    pub const fn significand_bits(self) -> Option<u32> {
        match self {
            DType::F16 => Some(10),
            DType::BF16 => Some(7),
            DType::F32 => Some(23),
            DType::F64 => Some(52),
            DType::F8E4M3 => Some(3),
            DType::F8E5M2 => Some(2),
            _ => None,
        }
    }

    /// Whether `op` is a defined reduction on this type in the reference arithmetic
    /// ([`combine_into`](crate::comm::combine_into)): `Avg` on floating types only, no
    /// reduction on fp8. A backend may accept more (NCCL reduces fp8 on compute capability
    /// 9.0 and later); it must refuse what it cannot do before anything is enqueued.
    pub const fn reduces_with(self, op: ReduceOp) -> bool {
        if self.is_fp8() {
            return false;
        }
        !matches!(op, ReduceOp::Avg) || self.is_floating()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that names no element type or reduction.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?}: valid are {valid}")]
pub struct UnknownName {
    /// What was being named (`element type`, `reduce op`).
    pub what: &'static str,
    /// The string given.
    pub given: String,
    /// The valid names, comma-separated.
    pub valid: &'static str,
}

impl FromStr for DType {
    type Err = UnknownName;

    /// Parses a name of [`DType::NAMES`] (exact, lowercase).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| UnknownName {
                what: "element type",
                given: s.to_owned(),
                valid: DType::NAMES,
            })
    }
}

/// Element-wise reduction.
///
/// NCCL's `ncclPreMulSum` is left out: it carries a scalar per rank, which no schedule or
/// policy of this project needs, and an enum of plain operators keeps every backend's
/// mapping a table.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Sum divided by the number of ranks (floating types only; NCCL's `ncclAvg`).
    Avg,
}

impl ReduceOp {
    /// Every operator.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Avg,
    ];

    /// The names [`ReduceOp::name`] gives, as one line for error messages.
    pub const NAMES: &'static str = "sum, prod, max, min, avg";

    /// The lowercase name (`sum`).
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
        }
    }

    /// One f32 combining step: `Avg` combines as `Sum` (the division by the rank count is
    /// [`finish_average`](crate::comm::finish_average)'s). Kept for f32-only callers; typed
    /// buffers go through [`combine_into`](crate::comm::combine_into).
    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            ReduceOp::Sum | ReduceOp::Avg => a + b,
            ReduceOp::Prod => a * b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = UnknownName;

    /// Parses a name of [`ReduceOp::NAMES`] (exact, lowercase).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| UnknownName {
                what: "reduce op",
                given: s.to_owned(),
                valid: ReduceOp::NAMES,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_list_every_type() {
        for t in DType::ALL {
            assert_eq!(t.name().parse::<DType>(), Ok(t));
            assert!(DType::NAMES.split(", ").any(|n| n == t.name()));
        }
        assert_eq!(DType::NAMES.split(", ").count(), DType::ALL.len());
        for o in ReduceOp::ALL {
            assert_eq!(o.name().parse::<ReduceOp>(), Ok(o));
        }
        let e = "bfloat16".parse::<DType>().unwrap_err().to_string();
        assert!(e.contains("\"bfloat16\"") && e.contains("bf16"), "{e}");
    }

    #[test]
    fn average_is_for_floating_types_and_fp8_does_not_reduce() {
        assert!(DType::BF16.reduces_with(ReduceOp::Avg));
        assert!(!DType::I64.reduces_with(ReduceOp::Avg));
        assert!(DType::I64.reduces_with(ReduceOp::Prod));
        assert!(!DType::F8E4M3.reduces_with(ReduceOp::Sum));
        assert!(!DType::F8E5M2.reduces_with(ReduceOp::Max));
    }

    #[test]
    fn sizes() {
        let sizes: Vec<u64> = DType::ALL.iter().map(|t| t.size_bytes()).collect();
        assert_eq!(sizes, [4, 2, 2, 8, 1, 1, 4, 4, 8, 8, 1, 1]);
    }
}
