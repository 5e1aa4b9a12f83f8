//! Values of every element type in the reference model (docs/schedule-format.md "Typed
//! tensors"): a tensor is kept as the little-endian bytes of its own type, which is what a
//! `check` reads back and what the digest hashes.
//!
//! Every value a valid schedule produces is an integer (uploads are integers; sums,
//! products, maxima and minima of integers are integers) inside its type's exact range, so
//! the model encodes and decodes exact integers only, with its own bit layouts: it shares
//! no arithmetic or conversion with the backends it judges.

use memreuse_core::DType;

/// Sign, exponent and significand widths and the exponent bias of a small float format.
struct Layout {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
}

/// The layouts the model encodes by hand (f32 and f64 use Rust's own types, which are
/// exact for integers within their bounds).
fn layout(dtype: DType) -> Option<Layout> {
    let (exp_bits, man_bits, bias) = match dtype {
        DType::F16 => (5, 10, 15),
        DType::BF16 => (8, 7, 127),
        DType::F8E4M3 => (4, 3, 7),
        DType::F8E5M2 => (5, 2, 15),
        _ => return None,
    };
    Some(Layout {
        exp_bits,
        man_bits,
        bias,
    })
}

/// Element size in bytes, as a `usize` for slicing (1..=8).
pub(crate) fn size(dtype: DType) -> usize {
    usize::from(u8::try_from(dtype.size_bytes()).unwrap_or(8))
}

/// The bits of the integer `v` (within 2^(significand bits + 1)) in `l`; the sign of a
/// zero is kept.
fn encode_small(l: &Layout, v: f64) -> u64 {
    let sign = u64::from(v.is_sign_negative()) << (l.exp_bits + l.man_bits);
    // Integers within the bound only (at most 2^53): the cast is exact.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let a = v.abs() as u64;
    if a == 0 {
        return sign;
    }
    let e = a.ilog2();
    let rest = a - (1 << e);
    let man = if e <= l.man_bits {
        rest << (l.man_bits - e)
    } else {
        rest >> (e - l.man_bits)
    };
    #[allow(clippy::cast_sign_loss)]
    let biased = (i64::from(e) + i64::from(l.bias)) as u64;
    sign | (biased << l.man_bits) | man
}

/// The value of bits `b` in `l` (normal, subnormal or zero; the model never makes an
/// infinity or a NaN).
fn decode_small(l: &Layout, b: u64) -> f64 {
    let man = b & ((1 << l.man_bits) - 1);
    let exp = (b >> l.man_bits) & ((1 << l.exp_bits) - 1);
    let negative = (b >> (l.exp_bits + l.man_bits)) & 1 == 1;
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_possible_wrap
    )]
    let magnitude = if exp == 0 {
        man as f64 * 2f64.powi(1 - l.bias - l.man_bits as i32)
    } else {
        ((1u64 << l.man_bits) + man) as f64 * 2f64.powi(exp as i32 - l.bias - l.man_bits as i32)
    };
    if negative { -magnitude } else { magnitude }
}

/// Writes the float `v` as one element of the floating type `dtype` into `out` (its size).
pub(crate) fn put_float(dtype: DType, v: f64, out: &mut [u8]) {
    match dtype {
        DType::F64 => out.copy_from_slice(&v.to_le_bytes()),
        // Exact: integers within 2^24.
        #[allow(clippy::cast_possible_truncation)]
        DType::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
        _ => {
            if let Some(l) = layout(dtype) {
                let bits = encode_small(&l, v).to_le_bytes();
                out.copy_from_slice(&bits[..out.len()]);
            }
        }
    }
}

/// The float in `b` (one element of the floating type `dtype`).
pub(crate) fn get_float(dtype: DType, b: &[u8]) -> f64 {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    match dtype {
        DType::F64 => f64::from_le_bytes(w),
        DType::F32 => f64::from(f32::from_le_bytes([w[0], w[1], w[2], w[3]])),
        _ => layout(dtype).map_or(0.0, |l| decode_small(&l, u64::from_le_bytes(w))),
    }
}

/// Writes the integer `v` as one element of the integer type `dtype` (two's complement,
/// its size's low bytes).
pub(crate) fn put_int(v: i128, out: &mut [u8]) {
    let n = out.len();
    out.copy_from_slice(&v.to_le_bytes()[..n]);
}

/// The integer in `b` (one element of the integer type `dtype`).
pub(crate) fn get_int(dtype: DType, b: &[u8]) -> i128 {
    let negative = dtype.is_signed_integer() && b.last().is_some_and(|&x| x & 0x80 != 0);
    let mut w = [if negative { 0xff } else { 0 }; 16];
    w[..b.len()].copy_from_slice(b);
    i128::from_le_bytes(w)
}

/// The value `upload` stores for pattern value `u` (0..251): `u - 125` for f32, f64 and
/// the signed integers, `u` for the unsigned ones, `(u mod 15) - 7` for f16, bf16 and fp8.
pub(crate) fn upload_value(dtype: DType, u: u64) -> i128 {
    let u = i128::from(u);
    match dtype {
        DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2 => u % 15 - 7,
        _ if dtype.is_unsigned_integer() => u,
        _ => u - 125,
    }
}

/// Writes `v` (an exact integer of the type's range) as one element of any type.
#[allow(clippy::cast_precision_loss)] // |v| <= 125
pub(crate) fn put(dtype: DType, v: i128, out: &mut [u8]) {
    if dtype.is_floating() {
        put_float(dtype, v as f64, out);
    } else {
        put_int(v, out);
    }
}

/// The exactness bound of a floating type: 2^(significand bits + 1), and that exponent.
pub(crate) fn float_bound(dtype: DType) -> (f64, u32) {
    let e = dtype.significand_bits().unwrap_or(23) + 1;
    (2f64.powi(i32::try_from(e).unwrap_or(24)), e)
}

/// The range of an integer type.
pub(crate) fn int_range(dtype: DType) -> (i128, i128) {
    let bits = 8 * u32::try_from(dtype.size_bytes()).unwrap_or(8);
    if dtype.is_signed_integer() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact integers: equality is the point
mod tests {
    use super::*;

    /// The hand-written layouts agree with the `half` crate's encodings the backends use,
    /// for every integer within each type's bound, both signs, and zero's sign.
    #[test]
    fn small_float_layouts_match_known_encodings() {
        for v in -256i32..=256 {
            let f = f64::from(v);
            let mut b = [0u8; 2];
            put_float(DType::BF16, f, &mut b);
            // bf16 is the upper half of f32.
            #[allow(clippy::cast_possible_truncation)]
            let want = ((f as f32).to_bits() >> 16) as u16;
            assert_eq!(u16::from_le_bytes(b), want, "bf16 {v}");
            assert_eq!(get_float(DType::BF16, &b), f);
        }
        let mut b = [0u8; 2];
        put_float(DType::F16, 2048.0, &mut b);
        assert_eq!(u16::from_le_bytes(b), 0x6800);
        put_float(DType::F16, -7.0, &mut b);
        assert_eq!(u16::from_le_bytes(b), 0xc700);
        put_float(DType::F16, -0.0, &mut b);
        assert_eq!(u16::from_le_bytes(b), 0x8000);
        let mut one = [0u8; 1];
        put_float(DType::F8E4M3, 7.0, &mut one);
        assert_eq!(one[0], 0x4e); // 1.75 x 2^2: exponent 9, mantissa 110
        assert_eq!(get_float(DType::F8E4M3, &one), 7.0);
        put_float(DType::F8E5M2, -6.0, &mut one);
        assert_eq!(one[0], 0xc6); // sign, exponent 17, mantissa 10
        assert_eq!(get_float(DType::F8E5M2, &one), -6.0);
    }

    #[test]
    fn integers_round_trip_and_ranges() {
        let mut b = [0u8; 1];
        put_int(-125, &mut b);
        assert_eq!(get_int(DType::I8, &b), -125);
        put_int(250, &mut b);
        assert_eq!(get_int(DType::U8, &b), 250);
        assert_eq!(int_range(DType::I8), (-128, 127));
        assert_eq!(int_range(DType::U64), (0, i128::from(u64::MAX)));
        assert_eq!(float_bound(DType::BF16), (256.0, 8));
    }
}
