//! The reference interpreter: the exact expected results of a valid schedule, computed on
//! the host in program order (docs/schedules.md "Rules"), with the report's `digest` and
//! `live_peak_bytes` (§2).

mod collective;
mod engine;
mod typed;

use memreuse_core::DType;

use crate::schedule::{Phase, Schedule};
use crate::validate::kind::ValidationErrorKind;
use crate::validate::plan::CommPlan;
use crate::validate::sink::Sink;

/// Largest magnitude every f32 value and every sum's absolute total may reach (2^24):
/// within it, f32 integer arithmetic is exact in any order. Other floating types have
/// 2^(significand bits + 1) ([`exact_bound`]).
pub const EXACT_BOUND: f64 = 16_777_216.0;

/// The exactness bound of a floating type, 2^(significand bits + 1) (2^11 f16, 2^8 bf16,
/// 2^24 f32, 2^53 f64, 2^4 f8e4m3, 2^3 f8e5m2; inclusive), and that exponent; `None` for
/// integer types, which are bounded by their range ([`int_range`]).
pub fn exact_bound(dtype: DType) -> Option<(f64, u32)> {
    dtype.is_floating().then(|| typed::float_bound(dtype))
}

/// The range of an integer type, `min..=max`; `None` for floating types.
pub fn int_range(dtype: DType) -> Option<(i128, i128)> {
    (!dtype.is_floating()).then(|| typed::int_range(dtype))
}

/// The validation error of a reduction that left its type's bound or range.
pub(crate) fn excess_kind(
    tensor: String,
    dtype: DType,
    reached: i128,
    iter: u32,
) -> ValidationErrorKind {
    if let Some((_, exp)) = exact_bound(dtype) {
        ValidationErrorKind::ExactnessExceeded {
            tensor,
            dtype,
            magnitude: u64::try_from(reached).unwrap_or(u64::MAX),
            bound_exp: exp,
            iter,
        }
    } else {
        let (min, max) = typed::int_range(dtype);
        ValidationErrorKind::RangeExceeded {
            tensor,
            dtype,
            reached,
            min,
            max,
            iter,
        }
    }
}
/// FNV-1a 64 offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64 prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// One `check` as executed by one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckResult {
    /// The phase of the `check` op.
    pub phase: Phase,
    /// The phase index `iter`.
    pub iter: u32,
    /// Index of the op inside its phase.
    pub op_index: usize,
    /// The checked tensor's name.
    pub tensor: String,
    /// Its element type.
    pub dtype: DType,
    /// Its expected contents: the little-endian bytes of each value in its own type.
    pub bytes: Vec<u8>,
}

impl CheckResult {
    /// The checked values as f32 (for f32 tensors; what tests compare with).
    pub fn f32_values(&self) -> Vec<f32> {
        self.bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// The checked values, each read in its own type; exact for floats and for integers
    /// up to 2^53, which is what tests compare.
    #[allow(clippy::cast_precision_loss)]
    pub fn values(&self) -> Vec<f64> {
        let sz = typed::size(self.dtype);
        self.bytes
            .chunks_exact(sz)
            .map(|c| {
                if self.dtype.is_floating() {
                    typed::get_float(self.dtype, c)
                } else {
                    typed::get_int(self.dtype, c) as f64
                }
            })
            .collect()
    }
}

/// The expected results of a valid schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    /// Per global rank, every `check` it executes, in its program order.
    pub checks: Vec<Vec<CheckResult>>,
    /// The digest of all checks (16 lowercase hex digits).
    pub digest: String,
    /// Max over ranks of the peak bytes of tensors allocated and not yet freed.
    pub live_peak_bytes: u64,
}

/// The contents `upload` writes: `x[i] = ((seed*1000003 + rank*7919 + iter*104729 + i*31)
/// mod 251) - 125`, in unsigned 64-bit arithmetic, as f32.
pub fn upload_values(seed: u32, rank: usize, iter: u32, elems: u64) -> Vec<f32> {
    let base = pattern_base(seed, rank, iter);
    (0..elems)
        .map(|i| {
            let u = base.wrapping_add(i.wrapping_mul(31)) % 251;
            (u as i64 - 125) as f32
        })
        .collect()
}

/// The bytes `upload` writes into a tensor of `len` bytes of `dtype`: the pattern value
/// `u` of each element ([`upload_values`]), stored as the type says
/// (docs/schedule-format.md "Typed tensors"), little-endian.
pub fn upload_bytes(dtype: DType, seed: u32, rank: usize, iter: u32, len: usize) -> Vec<u8> {
    let sz = typed::size(dtype);
    let base = pattern_base(seed, rank, iter);
    let mut out = vec![0u8; len - len % sz];
    for (i, chunk) in (0u64..).zip(out.chunks_exact_mut(sz)) {
        let u = base.wrapping_add(i.wrapping_mul(31)) % 251;
        typed::put(dtype, typed::upload_value(dtype, u), chunk);
    }
    out
}

/// `seed*1000003 + rank*7919 + iter*104729` in unsigned 64-bit arithmetic.
fn pattern_base(seed: u32, rank: usize, iter: u32) -> u64 {
    u64::from(seed)
        .wrapping_mul(1_000_003)
        .wrapping_add((rank as u64).wrapping_mul(7919))
        .wrapping_add(u64::from(iter).wrapping_mul(104_729))
}

/// FNV-1a 64 over, for rank 0, 1, ... in turn, the little-endian bytes of every checked
/// value in its own type, in program order; 16 lowercase hex digits.
pub fn digest<'a>(checks_per_rank: impl IntoIterator<Item = &'a [CheckResult]>) -> String {
    digest_bytes(
        checks_per_rank
            .into_iter()
            .flat_map(|rank| rank.iter().map(|c| c.bytes.as_slice())),
    )
}

/// The same digest over f32 values already flattened in order (rank 0's checks, then
/// rank 1's, ...).
pub fn digest_values(values: impl IntoIterator<Item = f32>) -> String {
    let bytes: Vec<[u8; 4]> = values.into_iter().map(f32::to_le_bytes).collect();
    digest_bytes(bytes.iter().map(<[u8; 4]>::as_slice))
}

/// The same digest over the read-back bytes of every check in order (rank 0's checks,
/// then rank 1's, ...): what a replay computes from what it read back.
pub fn digest_bytes<'a>(checks: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut hash = FNV_OFFSET;
    for check in checks {
        for &byte in check {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(FNV_PRIME);
        }
    }
    format!("{hash:016x}")
}

/// Max over ranks of the peak, in program order, of the bytes (elems x the type's size) of tensors
/// allocated and not yet freed. Defined for any parsed schedule (invalid re-allocations
/// count as replacing the tensor).
pub fn live_peak_bytes(schedule: &Schedule) -> u64 {
    crate::validate::limits::cost(schedule).live_peak_bytes
}

/// Runs the interpreter on a schedule that passed the static stages, along `plan` (the
/// communication plan the matching stage built and checked); deadlocks and exactness
/// violations go to `sink`.
pub(crate) fn interpret(
    schedule: &Schedule,
    plan: &CommPlan,
    sink: &mut Sink,
) -> Option<Reference> {
    let checks = engine::Engine::new(schedule, plan).run(sink)?;
    let digest = digest(checks.iter().map(Vec::as_slice));
    Some(Reference {
        checks,
        digest,
        live_peak_bytes: live_peak_bytes(schedule),
    })
}
