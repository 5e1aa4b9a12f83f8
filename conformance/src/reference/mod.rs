//! The reference interpreter: the exact expected results of a valid schedule, computed on
//! the host in program order (docs/schedules.md "Rules"), with the report's `digest` and
//! `live_peak_bytes` (§2).

mod collective;
mod engine;

use crate::schedule::{Phase, Schedule};
use crate::validate::plan::CommPlan;
use crate::validate::sink::Sink;

/// Largest magnitude every value and every sum's absolute total may reach (2^24): within
/// it, f32 integer arithmetic is exact in any order.
pub const EXACT_BOUND: f64 = 16_777_216.0;

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
    /// Its expected contents.
    pub values: Vec<f32>,
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
    let base = u64::from(seed)
        .wrapping_mul(1_000_003)
        .wrapping_add((rank as u64).wrapping_mul(7919))
        .wrapping_add(u64::from(iter).wrapping_mul(104_729));
    (0..elems)
        .map(|i| {
            let u = base.wrapping_add(i.wrapping_mul(31)) % 251;
            (u as i64 - 125) as f32
        })
        .collect()
}

/// FNV-1a 64 over, for rank 0, 1, ... in turn, the little-endian bytes of every checked
/// value in program order; 16 lowercase hex digits.
pub fn digest<'a>(checks_per_rank: impl IntoIterator<Item = &'a [CheckResult]>) -> String {
    digest_values(
        checks_per_rank
            .into_iter()
            .flat_map(|rank| rank.iter().flat_map(|c| c.values.iter().copied())),
    )
}

/// The same digest over values already flattened in order (rank 0's checks, then rank
/// 1's, ...): what a replay computes from what it read back.
pub fn digest_values(values: impl IntoIterator<Item = f32>) -> String {
    let mut hash = FNV_OFFSET;
    for value in values {
        for byte in value.to_le_bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(FNV_PRIME);
        }
    }
    format!("{hash:016x}")
}

/// Max over ranks of the peak, in program order, of the bytes (elems x 4) of tensors
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
