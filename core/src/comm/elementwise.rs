//! The reference arithmetic of every element type: element-wise reduction over
//! little-endian byte buffers, and conversion of single values.
//!
//! Every host-side communicator (the mock, the stand-ins, Vulkan's host proxy) reduces with
//! these functions, so a reduction gives the same bits on every backend that uses them;
//! schedules keep their values exact in the type (the conformance validator's bound), so a
//! device that reduces in another order or at higher precision gives the same bits too.
//!
//! Rules, as NCCL computes on a device: integers wrap (two's complement); f32 and f64
//! combine in their own type; f16 and bf16 are widened to f32, combined and rounded back to
//! nearest-even at each step; `Avg` divides the finished sum by the rank count the same
//! way. Max and min of floats follow `f32::max`/`f32::min` (a NaN loses to a number). The
//! fp8 types have conversions ([`read_f64`], [`write_f64`]) but no reduction.

use half::{bf16, f16};

use super::{DType, ReduceOp};

/// Why a buffer could not be combined.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ElementwiseError {
    /// The operator is not defined on the type ([`DType::reduces_with`]).
    #[error("{op} is not defined on {dtype} (avg is for floating types; fp8 types do not reduce)")]
    Unsupported {
        /// The element type.
        dtype: DType,
        /// The operator.
        op: ReduceOp,
    },
    /// A buffer's length is not a whole number of elements.
    #[error("{len} bytes are not a whole number of {dtype} elements ({} bytes each)", dtype.size_bytes())]
    NotWholeElements {
        /// The element type.
        dtype: DType,
        /// The length in bytes.
        len: usize,
    },
    /// The two buffers differ in length.
    #[error("buffers of {acc} and {src} bytes cannot be combined element-wise")]
    LengthMismatch {
        /// The accumulator's length.
        acc: usize,
        /// The source's length.
        src: usize,
    },
}

fn whole(dtype: DType, len: usize) -> Result<usize, ElementwiseError> {
    // usize -> u64 never truncates on supported targets; element sizes are 1..=8.
    let size = dtype.size_bytes() as usize;
    if len % size == 0 {
        Ok(size)
    } else {
        Err(ElementwiseError::NotWholeElements { dtype, len })
    }
}

macro_rules! combine_int {
    ($t:ty, $op:expr, $acc:expr, $src:expr) => {{
        const N: usize = size_of::<$t>();
        for (a, b) in $acc.chunks_exact_mut(N).zip($src.chunks_exact(N)) {
            let mut x = [0u8; N];
            x.copy_from_slice(a);
            let mut y = [0u8; N];
            y.copy_from_slice(b);
            let (x, y) = (<$t>::from_le_bytes(x), <$t>::from_le_bytes(y));
            let r = match $op {
                ReduceOp::Sum | ReduceOp::Avg => x.wrapping_add(y),
                ReduceOp::Prod => x.wrapping_mul(y),
                ReduceOp::Max => x.max(y),
                ReduceOp::Min => x.min(y),
            };
            a.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

fn step_f32(op: ReduceOp, x: f32, y: f32) -> f32 {
    op.apply(x, y)
}

fn step_f64(op: ReduceOp, x: f64, y: f64) -> f64 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => x + y,
        ReduceOp::Prod => x * y,
        ReduceOp::Max => x.max(y),
        ReduceOp::Min => x.min(y),
    }
}

/// `acc[i] = op(acc[i], src[i])` for every element of `dtype` (for `Avg`, the sum: call
/// [`finish_average`] once every rank is combined). Ranks are combined by calling this in
/// rank order, rank 0's buffer being the initial `acc`.
///
/// # Errors
/// [`ElementwiseError`] when `op` is not defined on `dtype`, the lengths differ or are not
/// whole elements; `acc` is unchanged then.
pub fn combine_into(
    dtype: DType,
    op: ReduceOp,
    acc: &mut [u8],
    src: &[u8],
) -> Result<(), ElementwiseError> {
    if !dtype.reduces_with(op) {
        return Err(ElementwiseError::Unsupported { dtype, op });
    }
    if acc.len() != src.len() {
        return Err(ElementwiseError::LengthMismatch {
            acc: acc.len(),
            src: src.len(),
        });
    }
    whole(dtype, acc.len())?;
    match dtype {
        DType::I8 => combine_int!(i8, op, acc, src),
        DType::U8 => combine_int!(u8, op, acc, src),
        DType::I32 => combine_int!(i32, op, acc, src),
        DType::U32 => combine_int!(u32, op, acc, src),
        DType::I64 => combine_int!(i64, op, acc, src),
        DType::U64 => combine_int!(u64, op, acc, src),
        DType::F32 => {
            for (a, b) in acc.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
                let x = f32::from_le_bytes([a[0], a[1], a[2], a[3]]);
                let y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                a.copy_from_slice(&step_f32(op, x, y).to_le_bytes());
            }
        }
        DType::F64 => {
            for (a, b) in acc.chunks_exact_mut(8).zip(src.chunks_exact(8)) {
                let mut x = [0u8; 8];
                x.copy_from_slice(a);
                let mut y = [0u8; 8];
                y.copy_from_slice(b);
                let r = step_f64(op, f64::from_le_bytes(x), f64::from_le_bytes(y));
                a.copy_from_slice(&r.to_le_bytes());
            }
        }
        DType::F16 => {
            for (a, b) in acc.chunks_exact_mut(2).zip(src.chunks_exact(2)) {
                let x = f16::from_le_bytes([a[0], a[1]]).to_f32();
                let y = f16::from_le_bytes([b[0], b[1]]).to_f32();
                a.copy_from_slice(&f16::from_f32(step_f32(op, x, y)).to_le_bytes());
            }
        }
        DType::BF16 => {
            for (a, b) in acc.chunks_exact_mut(2).zip(src.chunks_exact(2)) {
                let x = bf16::from_le_bytes([a[0], a[1]]).to_f32();
                let y = bf16::from_le_bytes([b[0], b[1]]).to_f32();
                a.copy_from_slice(&bf16::from_f32(step_f32(op, x, y)).to_le_bytes());
            }
        }
        // `reduces_with` refused both above.
        DType::F8E4M3 | DType::F8E5M2 => return Err(ElementwiseError::Unsupported { dtype, op }),
    }
    Ok(())
}

/// Divides every element of a finished `Avg` sum by `ranks` (rounded in the type, as
/// [`combine_into`] rounds). A no-op for every other operator, so callers may call it
/// unconditionally.
///
/// # Errors
/// As [`combine_into`] for the type and length.
pub fn finish_average(
    dtype: DType,
    op: ReduceOp,
    acc: &mut [u8],
    ranks: usize,
) -> Result<(), ElementwiseError> {
    if op != ReduceOp::Avg {
        return Ok(());
    }
    if !dtype.reduces_with(op) {
        return Err(ElementwiseError::Unsupported { dtype, op });
    }
    let size = whole(dtype, acc.len())?;
    // Rank counts are far below 2^24, so the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let n = ranks as f64;
    for a in acc.chunks_exact_mut(size) {
        let v = read_f64(dtype, a) / n;
        write_f64(dtype, v, a);
    }
    Ok(())
}

/// E4M3 (OCP, `ncclFloat8e4m3`): bias 7, no infinities, `S.1111.111` is NaN, largest 448.
fn f8e4m3_to_f64(b: u8) -> f64 {
    let sign = if b & 0x80 == 0 { 1.0 } else { -1.0 };
    let exp = i32::from((b >> 3) & 0x0f);
    let man = f64::from(b & 0x07);
    if exp == 0x0f && b & 0x07 == 0x07 {
        return f64::NAN;
    }
    if exp == 0 {
        sign * man / 8.0 * 2f64.powi(-6)
    } else {
        sign * (1.0 + man / 8.0) * 2f64.powi(exp - 7)
    }
}

/// E5M2 (OCP, `ncclFloat8e5m2`): bias 15, IEEE-style infinities and NaNs.
fn f8e5m2_to_f64(b: u8) -> f64 {
    let sign = if b & 0x80 == 0 { 1.0 } else { -1.0 };
    let exp = i32::from((b >> 2) & 0x1f);
    let man = f64::from(b & 0x03);
    match exp {
        0 => sign * man / 4.0 * 2f64.powi(-14),
        0x1f if man == 0.0 => sign * f64::INFINITY,
        0x1f => f64::NAN,
        _ => sign * (1.0 + man / 4.0) * 2f64.powi(exp - 15),
    }
}

/// The fp8 code nearest to `v` (ties to the even code; NaN to the type's NaN; beyond the
/// largest finite value: E5M2's infinity, E4M3's NaN, which has no infinity).
fn f64_to_f8(dtype: DType, v: f64) -> u8 {
    let decode = if dtype == DType::F8E4M3 {
        f8e4m3_to_f64
    } else {
        f8e5m2_to_f64
    };
    if v.is_nan() {
        return if dtype == DType::F8E4M3 { 0x7f } else { 0x7e };
    }
    let sign = if v.is_sign_negative() { 0x80 } else { 0 };
    let mag = v.abs();
    let mut best: Option<(u8, f64)> = None;
    for code in 0u8..0x80 {
        let c = decode(code);
        if !c.is_finite() {
            continue;
        }
        let d = (c - mag).abs();
        // Distances are finite and non-negative: `total_cmp` is the plain order. A tie
        // goes to the even code (round half to even).
        let worse = best.is_some_and(|(b, bd)| match d.total_cmp(&bd) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => code % 2 == 1 && b % 2 == 0,
            std::cmp::Ordering::Less => false,
        });
        if !worse {
            best = Some((code, d));
        }
    }
    let (code, _) = best.unwrap_or((0, 0.0));
    let largest = decode(if dtype == DType::F8E4M3 { 0x7e } else { 0x7b });
    if mag > largest && (mag - largest) > (largest - decode(code.saturating_sub(1))) / 2.0 {
        return sign | if dtype == DType::F8E4M3 { 0x7f } else { 0x7c };
    }
    sign | code
}

/// The value of one element (`src` holds at least one element of `dtype`; extra bytes are
/// ignored). 64-bit integers beyond 2^53 lose precision; schedules never hold such values.
///
/// # Panics
/// Never for `src` of at least `dtype.size_bytes()` bytes; shorter input reads as 0.
pub fn read_f64(dtype: DType, src: &[u8]) -> f64 {
    let mut b = [0u8; 8];
    let n = (dtype.size_bytes() as usize).min(src.len());
    b[..n].copy_from_slice(&src[..n]);
    #[allow(clippy::cast_precision_loss)]
    match dtype {
        DType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::F64 => f64::from_le_bytes(b),
        DType::F16 => f64::from(f16::from_le_bytes([b[0], b[1]]).to_f32()),
        DType::BF16 => f64::from(bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        DType::I8 => f64::from(i8::from_le_bytes([b[0]])),
        DType::U8 => f64::from(b[0]),
        DType::I32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::U32 => f64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::I64 => i64::from_le_bytes(b) as f64,
        DType::U64 => u64::from_le_bytes(b) as f64,
        DType::F8E4M3 => f8e4m3_to_f64(b[0]),
        DType::F8E5M2 => f8e5m2_to_f64(b[0]),
    }
}

/// Writes `v` as one element of `dtype` into the first `dtype.size_bytes()` bytes of `dst`
/// (rounded to nearest-even for floating types; integers truncate toward zero and
/// saturate, as Rust's `as` does). A shorter `dst` is left unchanged.
pub fn write_f64(dtype: DType, v: f64, dst: &mut [u8]) {
    let size = dtype.size_bytes() as usize;
    let Some(out) = dst.get_mut(..size) else {
        return;
    };
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    match dtype {
        DType::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
        DType::F64 => out.copy_from_slice(&v.to_le_bytes()),
        DType::F16 => out.copy_from_slice(&f16::from_f64(v).to_le_bytes()),
        DType::BF16 => out.copy_from_slice(&bf16::from_f64(v).to_le_bytes()),
        DType::I8 => out.copy_from_slice(&(v as i8).to_le_bytes()),
        DType::U8 => out.copy_from_slice(&(v as u8).to_le_bytes()),
        DType::I32 => out.copy_from_slice(&(v as i32).to_le_bytes()),
        DType::U32 => out.copy_from_slice(&(v as u32).to_le_bytes()),
        DType::I64 => out.copy_from_slice(&(v as i64).to_le_bytes()),
        DType::U64 => out.copy_from_slice(&(v as u64).to_le_bytes()),
        DType::F8E4M3 | DType::F8E5M2 => out[0] = f64_to_f8(dtype, v),
    }
}

#[cfg(test)]
#[allow(
    clippy::float_cmp,
    reason = "exact values: conversions must give the very bits"
)]
mod tests {
    use super::*;

    fn buf(dtype: DType, values: &[f64]) -> Vec<u8> {
        let size = dtype.size_bytes() as usize;
        let mut b = vec![0u8; values.len() * size];
        for (chunk, v) in b.chunks_exact_mut(size).zip(values) {
            write_f64(dtype, *v, chunk);
        }
        b
    }

    fn values(dtype: DType, b: &[u8]) -> Vec<f64> {
        b.chunks_exact(dtype.size_bytes() as usize)
            .map(|c| read_f64(dtype, c))
            .collect()
    }

    #[test]
    fn every_reducible_type_sums_multiplies_and_compares() {
        for dtype in DType::ALL.into_iter().filter(|t| !t.is_fp8()) {
            let (a, b): ([f64; 3], [f64; 3]) = if dtype.is_unsigned_integer() {
                ([3.0, 5.0, 0.0], [4.0, 2.0, 7.0])
            } else {
                ([3.0, -5.0, 0.0], [4.0, 2.0, -7.0])
            };
            for (op, want) in [
                (ReduceOp::Sum, [a[0] + b[0], a[1] + b[1], a[2] + b[2]]),
                (ReduceOp::Prod, [a[0] * b[0], a[1] * b[1], a[2] * b[2]]),
                (
                    ReduceOp::Max,
                    [a[0].max(b[0]), a[1].max(b[1]), a[2].max(b[2])],
                ),
                (
                    ReduceOp::Min,
                    [a[0].min(b[0]), a[1].min(b[1]), a[2].min(b[2])],
                ),
            ] {
                let mut acc = buf(dtype, &a);
                combine_into(dtype, op, &mut acc, &buf(dtype, &b)).unwrap();
                assert_eq!(values(dtype, &acc), want, "{dtype} {op}");
            }
        }
    }

    #[test]
    fn integers_wrap_as_on_a_device() {
        let mut acc = vec![200u8];
        combine_into(DType::U8, ReduceOp::Sum, &mut acc, &[100]).unwrap();
        assert_eq!(acc, [44]);
        let mut acc = i64::MAX.to_le_bytes().to_vec();
        combine_into(DType::I64, ReduceOp::Sum, &mut acc, &1i64.to_le_bytes()).unwrap();
        assert_eq!(acc, i64::MIN.to_le_bytes());
    }

    #[test]
    fn bf16_rounds_at_every_step() {
        // 256 + 1 is not representable in bf16 (8 significant bits): it rounds back to 256.
        let mut acc = buf(DType::BF16, &[256.0]);
        combine_into(
            DType::BF16,
            ReduceOp::Sum,
            &mut acc,
            &buf(DType::BF16, &[1.0]),
        )
        .unwrap();
        assert_eq!(values(DType::BF16, &acc), [256.0]);
        let mut acc = buf(DType::F16, &[2048.0]);
        combine_into(
            DType::F16,
            ReduceOp::Sum,
            &mut acc,
            &buf(DType::F16, &[1.0]),
        )
        .unwrap();
        assert_eq!(values(DType::F16, &acc), [2048.0]);
    }

    #[test]
    fn average_divides_the_finished_sum() {
        let mut acc = buf(DType::BF16, &[3.0, -6.0]);
        combine_into(
            DType::BF16,
            ReduceOp::Avg,
            &mut acc,
            &buf(DType::BF16, &[5.0, 2.0]),
        )
        .unwrap();
        finish_average(DType::BF16, ReduceOp::Avg, &mut acc, 2).unwrap();
        assert_eq!(values(DType::BF16, &acc), [4.0, -2.0]);
        let mut ints = 4i32.to_le_bytes().to_vec();
        let e = finish_average(DType::I32, ReduceOp::Avg, &mut ints, 2).unwrap_err();
        assert!(e.to_string().contains("avg is not defined on i32"), "{e}");
    }

    #[test]
    fn bad_buffers_and_fp8_reductions_are_typed_errors_and_leave_acc_alone() {
        let mut acc = vec![1u8, 2, 3];
        let e = combine_into(DType::F16, ReduceOp::Sum, &mut acc, &[0, 0, 0]).unwrap_err();
        assert_eq!(
            e,
            ElementwiseError::NotWholeElements {
                dtype: DType::F16,
                len: 3
            }
        );
        let e = combine_into(DType::U8, ReduceOp::Sum, &mut acc, &[0, 0]).unwrap_err();
        assert!(matches!(
            e,
            ElementwiseError::LengthMismatch { acc: 3, src: 2 }
        ));
        let e = combine_into(DType::F8E4M3, ReduceOp::Max, &mut acc, &[0, 0, 0]).unwrap_err();
        assert!(e.to_string().contains("f8e4m3"), "{e}");
        assert_eq!(acc, [1, 2, 3]);
    }

    #[test]
    fn fp8_converts_small_integers_exactly_and_saturates_as_the_format_says() {
        for dtype in [DType::F8E4M3, DType::F8E5M2] {
            for v in -7i32..=7 {
                let mut b = [0u8];
                write_f64(dtype, f64::from(v), &mut b);
                assert_eq!(read_f64(dtype, &b), f64::from(v), "{dtype} {v}");
            }
        }
        let mut b = [0u8];
        write_f64(DType::F8E4M3, 448.0, &mut b);
        assert_eq!(b, [0x7e]);
        write_f64(DType::F8E4M3, 1.0e6, &mut b);
        assert!(read_f64(DType::F8E4M3, &b).is_nan());
        write_f64(DType::F8E5M2, 57344.0, &mut b);
        assert_eq!(read_f64(DType::F8E5M2, &b), 57344.0);
        write_f64(DType::F8E5M2, 1.0e6, &mut b);
        assert_eq!(read_f64(DType::F8E5M2, &b), f64::INFINITY);
        // A tie between 1.0 (0x38) and 1.125 (0x39) in E4M3 goes to the even code.
        write_f64(DType::F8E4M3, 1.0625, &mut b);
        assert_eq!(b, [0x38]);
    }
}
