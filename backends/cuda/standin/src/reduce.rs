//! Reductions for every `ncclDataType_t` and `ncclRedOp_t` of cudarc's `nccl::sys`, as
//! joint-op bodies over the regions the collective declared. f32 sum, product, max and min
//! use the mock communicator's own bodies ([`memreuse_mock::collective`]), so those results
//! are bit-identical to the mock backend's; the other types and `ncclAvg` combine in rank
//! order here (integers wrap, as on the device; f16 and bf16 are combined in f32 and
//! rounded to nearest-even at each step; the average divides the sum by the rank count).
//! FP8 reductions need compute capability 9.0, which the stand-in's devices (8.0) lack:
//! they are `ncclInvalidArgument`, as NCCL answers on such a device.

use memreuse_core::BackendError;
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

/// Checks that `(t, o)` can be reduced.
pub fn check(t: u32, o: u32) -> Result<(), u32> {
    elem_size(t)?;
    if o >= op::COUNT || t == dtype::FLOAT8E4M3 || t == dtype::FLOAT8E5M2 {
        return Err(codes::NCCL_INVALID_ARGUMENT);
    }
    Ok(())
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: normalise.
            let shift = m.leading_zeros() - 21;
            sign | ((113 - shift) << 23) | (((m << shift) & 0x3ff) << 13)
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rounded = (m + half - 1 + ((m >> shift) & 1)) >> shift;
        return sign | rounded as u16;
    }
    let rounded = man + 0xfff + ((man >> 13) & 1);
    if rounded & 0x80_0000 != 0 {
        return f32_to_f16(f32::from_bits((x & 0xff80_0000) + 0x80_0000));
    }
    sign | ((e as u16) << 10) | ((rounded >> 13) as u16)
}

fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

fn f32_to_bf16(f: f32) -> u16 {
    let x = f.to_bits();
    if f.is_nan() {
        return ((x >> 16) | 0x40) as u16;
    }
    ((x + 0x7fff + ((x >> 16) & 1)) >> 16) as u16
}

macro_rules! fold_int {
    ($ty:ty, $acc:expr, $x:expr, $o:expr) => {{
        let n = std::mem::size_of::<$ty>();
        for (a, b) in $acc.chunks_exact_mut(n).zip($x.chunks_exact(n)) {
            let l = <$ty>::from_le_bytes(a.try_into().unwrap_or_default());
            let r = <$ty>::from_le_bytes(b.try_into().unwrap_or_default());
            let v = match $o {
                op::PROD => l.wrapping_mul(r),
                op::MAX => l.max(r),
                op::MIN => l.min(r),
                _ => l.wrapping_add(r),
            };
            a.copy_from_slice(&v.to_le_bytes());
        }
    }};
}

fn fold_float(o: u32, l: f64, r: f64) -> f64 {
    match o {
        op::PROD => l * r,
        op::MAX => l.max(r),
        op::MIN => l.min(r),
        _ => l + r,
    }
}

/// f16 or bf16 conversions to and from f32.
type HalfCodec = (fn(u16) -> f32, fn(f32) -> u16);

/// `acc = acc (o) x`, element-wise.
#[allow(
    clippy::many_single_char_names,
    reason = "type, op, operands: the usual names"
)]
fn fold(t: u32, o: u32, acc: &mut [u8], x: &[u8]) {
    match t {
        dtype::INT8 => fold_int!(i8, acc, x, o),
        dtype::UINT8 => fold_int!(u8, acc, x, o),
        dtype::INT32 => fold_int!(i32, acc, x, o),
        dtype::UINT32 => fold_int!(u32, acc, x, o),
        dtype::INT64 => fold_int!(i64, acc, x, o),
        dtype::UINT64 => fold_int!(u64, acc, x, o),
        dtype::FLOAT32 => {
            for (a, b) in acc.chunks_exact_mut(4).zip(x.chunks_exact(4)) {
                let l = f32::from_le_bytes(a.try_into().unwrap_or_default());
                let r = f32::from_le_bytes(b.try_into().unwrap_or_default());
                let v = fold_float(o, f64::from(l), f64::from(r)) as f32;
                let v = if o == op::SUM || o == op::AVG {
                    l + r
                } else {
                    v
                };
                a.copy_from_slice(&v.to_le_bytes());
            }
        }
        dtype::FLOAT64 => {
            for (a, b) in acc.chunks_exact_mut(8).zip(x.chunks_exact(8)) {
                let l = f64::from_le_bytes(a.try_into().unwrap_or_default());
                let r = f64::from_le_bytes(b.try_into().unwrap_or_default());
                a.copy_from_slice(&fold_float(o, l, r).to_le_bytes());
            }
        }
        dtype::FLOAT16 | dtype::BFLOAT16 => {
            let (to, from): HalfCodec = if t == dtype::FLOAT16 {
                (f16_to_f32, f32_to_f16)
            } else {
                (bf16_to_f32, f32_to_bf16)
            };
            for (a, b) in acc.chunks_exact_mut(2).zip(x.chunks_exact(2)) {
                let l = to(u16::from_le_bytes([a[0], a[1]]));
                let r = to(u16::from_le_bytes([b[0], b[1]]));
                let v = fold_float(o, f64::from(l), f64::from(r)) as f32;
                a.copy_from_slice(&from(v).to_le_bytes());
            }
        }
        _ => {}
    }
}

/// Divides every element of `acc` by `n` (`ncclAvg`).
fn divide(t: u32, acc: &mut [u8], n: usize) {
    macro_rules! div_int {
        ($ty:ty) => {{
            let k = std::mem::size_of::<$ty>();
            for a in acc.chunks_exact_mut(k) {
                let v = <$ty>::from_le_bytes(a.try_into().unwrap_or_default()) / (n as $ty);
                a.copy_from_slice(&v.to_le_bytes());
            }
        }};
    }
    match t {
        dtype::INT8 => div_int!(i8),
        dtype::UINT8 => div_int!(u8),
        dtype::INT32 => div_int!(i32),
        dtype::UINT32 => div_int!(u32),
        dtype::INT64 => div_int!(i64),
        dtype::UINT64 => div_int!(u64),
        dtype::FLOAT32 => {
            for a in acc.chunks_exact_mut(4) {
                let v = f32::from_le_bytes(a.try_into().unwrap_or_default()) / n as f32;
                a.copy_from_slice(&v.to_le_bytes());
            }
        }
        dtype::FLOAT64 => {
            for a in acc.chunks_exact_mut(8) {
                let v = f64::from_le_bytes(a.try_into().unwrap_or_default()) / n as f64;
                a.copy_from_slice(&v.to_le_bytes());
            }
        }
        dtype::FLOAT16 | dtype::BFLOAT16 => {
            let (to, from): HalfCodec = if t == dtype::FLOAT16 {
                (f16_to_f32, f32_to_f16)
            } else {
                (bf16_to_f32, f32_to_bf16)
            };
            for a in acc.chunks_exact_mut(2) {
                let v = to(u16::from_le_bytes([a[0], a[1]])) / n as f32;
                a.copy_from_slice(&from(v).to_le_bytes());
            }
        }
        _ => {}
    }
}

fn mismatch(what: &'static str) -> BackendError {
    BackendError::invalid_argument("cuda-standin", what, "ranks pass different lengths")
}

/// The element-wise reduction, in rank order, of `bytes_of(r)` over every rank `r`.
fn reduce_all(
    mem: &JointMemory<'_>,
    t: u32,
    o: u32,
    bytes_of: impl Fn(&JointMemory<'_>, usize) -> Result<Vec<u8>, BackendError>,
) -> Result<Vec<u8>, BackendError> {
    let mut acc = bytes_of(mem, 0)?;
    for r in 1..mem.ranks() {
        let x = bytes_of(mem, r)?;
        if x.len() != acc.len() {
            return Err(mismatch("ncclReduce"));
        }
        fold(t, o, &mut acc, &x);
    }
    if o == op::AVG {
        divide(t, &mut acc, mem.ranks());
    }
    Ok(acc)
}

/// The f32 function of the mock's bodies, for the ops they cover.
fn mock_f32(t: u32, o: u32) -> Option<fn(f32, f32) -> f32> {
    if t != dtype::FLOAT32 {
        return None;
    }
    Some(match o {
        op::SUM => |a, b| a + b,
        op::PROD => |a, b| a * b,
        op::MAX => f32::max,
        op::MIN => f32::min,
        _ => return None,
    })
}

/// All-reduce body: region 0 is the input, each rank's last region the output.
pub fn all_reduce(mem: &mut JointMemory<'_>, t: u32, o: u32) -> Result<(), BackendError> {
    if let Some(f) = mock_f32(t, o) {
        return collective::all_reduce(mem, f);
    }
    let acc = reduce_all(mem, t, o, |m, r| Ok(m.bytes(r, 0)?.to_vec()))?;
    for r in 0..mem.ranks() {
        let last = mem.regions(r) - 1;
        mem.bytes_mut(r, last)?.copy_from_slice(&acc);
    }
    Ok(())
}

/// Reduce-scatter body: region 0 the input (`size` chunks), region 1 the output chunk.
pub fn reduce_scatter(mem: &mut JointMemory<'_>, t: u32, o: u32) -> Result<(), BackendError> {
    if let Some(f) = mock_f32(t, o) {
        return collective::reduce_scatter(mem, f);
    }
    let acc = reduce_all(mem, t, o, |m, r| Ok(m.bytes(r, 0)?.to_vec()))?;
    let n = mem.ranks();
    let chunk = acc.len() / n.max(1);
    for r in 0..n {
        let out = mem.bytes_mut(r, 1)?;
        if out.len() != chunk {
            return Err(mismatch("ncclReduceScatter"));
        }
        out.copy_from_slice(&acc[r * chunk..(r + 1) * chunk]);
    }
    Ok(())
}
