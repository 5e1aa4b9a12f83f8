//! Limits that bound the work of validating and running a schedule *before* that work is
//! done (docs/schedule-format.md "Limits").
//!
//! The header limits (`world_size`, `iterations`, expanded steps) are arithmetic on the
//! header and the op counts. The rest come from [`cost`], one walk of each rank's program
//! that visits every op at most three times whatever `iterations` is: iterations 1, 2, ...
//! of the body see the same tensor sizes (a body's effect on the name -> size map is
//! idempotent: every name it allocates or frees ends in the same state each time), so the
//! walk measures iteration 0 and iteration 1 and multiplies the latter.

use std::collections::HashMap;

use super::kind::ValidationErrorKind as K;
use super::sink::Sink;
use crate::schedule::{
    BatchMember, MAX_DELAY_TOTAL_US, MAX_DELAY_US, MAX_ELEMENT_OPS, MAX_ELEMS, MAX_HOST_BYTES,
    MAX_ITERATIONS, MAX_STEPS, MAX_THREADS, MAX_WORLD_SIZE, OpKind, Phase, Schedule,
};

/// Host bytes one expanded step costs the validator and the replay (program, plan events
/// and per-step series), measured on a 9.9 M-step schedule and rounded up.
pub const HOST_BYTES_PER_STEP: u64 = 400;
/// How many copies of every live tensor a run holds: the reference interpreter's, and the
/// device's (the mock backs device memory with host memory).
pub const TENSOR_COPIES: u64 = 2;
/// How many copies of every checked value a run holds at once (the reference, the
/// validated schedule handed to the runner, each rank's read-back and the digest input).
pub const CHECK_COPIES: u64 = 4;
/// Host bytes a rank thread reserves: its stack ([`crate::replay::RANK_STACK_BYTES`],
/// 512 KiB) plus 128 KiB for its guard page, signal stack, thread-locals and bookkeeping.
pub const HOST_BYTES_PER_RANK_THREAD: u64 = 640 << 10;
/// Host bytes a stream's worker thread reserves (the mock's threaded mode: a 256 KiB
/// stack plus the same margin).
pub const HOST_BYTES_PER_STREAM_THREAD: u64 = 384 << 10;
/// Host bytes a process group's watchdog thread reserves (a 128 KiB stack plus the same
/// margin).
pub const HOST_BYTES_PER_WATCHDOG_THREAD: u64 = 256 << 10;
/// Host bytes per (rank, peer) pair: what every rank keeps per member of its groups
/// (sequence numbers, rendezvous slots), measured at 117-245 bytes on world sizes of
/// 128-1,024 and rounded up; a world of 1,024 ranks costs 256 MiB.
pub const HOST_BYTES_PER_RANK_PAIR: u64 = 256;

/// The device bytes a rank's allocator reserves beyond its live tensors that the estimate
/// counts, which the mock backs with host memory: the small-pool segment (2 MiB, partly
/// used) of a rank that allocates a tensor of at most 1 MiB. Before this was counted,
/// 1,024 ranks of 4 KiB each were estimated at their 4 MiB of tensors and took 2 GiB of
/// segments (the validator accepted schedules that aborted under a 4 GiB address-space
/// limit). The large pool's slack (a 20 MiB segment for a tensor of 1-10 MiB, 2 MiB
/// rounding above) is left to the 1 GiB margin: counted, it would refuse the `rfc`
/// suite's `fsdp-large-rfc` (4 ranks, 92 MiB of tensors each), which measures 2.0 GiB
/// resident, at the budget itself.
fn segment_slack_bytes(small: bool) -> u64 {
    u64::from(small) * memreuse_core::allocator::SMALL_BUFFER
}

/// What running a schedule costs, as estimated before anything runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Op executions over all ranks, iterations expanded (the body counted at least once).
    pub steps: u64,
    /// Element operations of the reference interpreter: per executing rank, the elements
    /// of the tensors an op reads or writes.
    pub element_ops: u64,
    /// Max over ranks of the peak bytes of live tensors (the report's `live_peak_bytes`).
    pub live_peak_bytes: u64,
    /// Sum over ranks of their live peaks: the reference interpreter's tensor memory.
    pub reference_bytes: u64,
    /// Bytes of every checked value over all ranks and iterations.
    pub checked_bytes: u64,
    /// Max over ranks of the microseconds of `delay` a rank executes.
    pub delay_us: u64,
    /// Threads of a replay: per rank, its own, one per stream (compute, declared ones,
    /// one communication stream per group list it is in, world included) and one
    /// watchdog per group list it is in.
    pub threads: u64,
    /// What those threads reserve (see `HOST_BYTES_PER_*_THREAD`).
    pub thread_bytes: u64,
    /// Sum over ranks of the small-pool segments reserved beyond the live tensors (see
    /// `segment_slack_bytes`): host memory on the mock.
    pub segment_slack_bytes: u64,
    /// What the ranks keep per peer: `world_size`² x `HOST_BYTES_PER_RANK_PAIR`.
    pub rank_pair_bytes: u64,
}

impl Cost {
    /// Estimated peak host bytes of validating and running the schedule.
    pub fn host_bytes(&self) -> u64 {
        self.steps
            .saturating_mul(HOST_BYTES_PER_STEP)
            .saturating_add(self.reference_bytes.saturating_mul(TENSOR_COPIES))
            .saturating_add(self.checked_bytes.saturating_mul(CHECK_COPIES))
            .saturating_add(self.thread_bytes)
            .saturating_add(self.segment_slack_bytes)
            .saturating_add(self.rank_pair_bytes)
    }
}

/// Op executions over all ranks, iterations expanded, the body counted at least once.
/// Pure arithmetic on the header: nothing is walked.
pub fn expanded_steps(s: &Schedule) -> u64 {
    let body = u64::from(s.iterations.max(1)).saturating_mul(s.body.len() as u64);
    (s.setup.len() as u64 + s.teardown.len() as u64)
        .saturating_add(body)
        .saturating_mul(s.world_size as u64)
}

/// The cost of `s`: one walk per rank over each op at most three times.
pub fn cost(s: &Schedule) -> Cost {
    let ranks = s.world_size.min(MAX_WORLD_SIZE);
    let mut total = Cost {
        steps: expanded_steps(s),
        rank_pair_bytes: (ranks as u64)
            .saturating_mul(ranks as u64)
            .saturating_mul(HOST_BYTES_PER_RANK_PAIR),
        ..Cost::default()
    };
    let later_iterations = u64::from(s.iterations.saturating_sub(1));
    for rank in 0..ranks {
        let mut walk = RankWalk {
            rank,
            sizes: HashMap::new(),
            elem_bytes: HashMap::new(),
            now: 0,
            peak: 0,
            element_ops: 0,
            checked_bytes: 0,
            delay_us: 0,
            small_pool: false,
        };
        walk.segment(s, Phase::Setup, 1);
        if s.iterations >= 1 {
            walk.segment(s, Phase::Body, 1);
        }
        if s.iterations >= 2 {
            walk.segment(s, Phase::Body, later_iterations);
        }
        walk.segment(s, Phase::Teardown, 1);
        total.element_ops = total.element_ops.saturating_add(walk.element_ops);
        total.live_peak_bytes = total.live_peak_bytes.max(walk.peak);
        total.reference_bytes = total.reference_bytes.saturating_add(walk.peak);
        total.checked_bytes = total.checked_bytes.saturating_add(walk.checked_bytes);
        total.delay_us = total.delay_us.max(walk.delay_us);
        total.segment_slack_bytes = total
            .segment_slack_bytes
            .saturating_add(segment_slack_bytes(walk.small_pool));
        let lists = s
            .groups
            .values()
            .filter(|lists| lists.iter().any(|l| l.contains(&rank)))
            .count() as u64
            + 1;
        let streams = 1 + s.streams.len() as u64 + lists;
        total.threads = total.threads.saturating_add(1 + streams + lists);
        total.thread_bytes = total.thread_bytes.saturating_add(
            HOST_BYTES_PER_RANK_THREAD
                + streams * HOST_BYTES_PER_STREAM_THREAD
                + lists * HOST_BYTES_PER_WATCHDOG_THREAD,
        );
    }
    total
}

/// One rank's walk: tensor sizes and the running totals.
struct RankWalk<'a> {
    rank: usize,
    sizes: HashMap<&'a str, u64>,
    /// Bytes per element of each live name (elems x size is every byte figure).
    elem_bytes: HashMap<&'a str, u64>,
    now: u64,
    peak: u64,
    element_ops: u64,
    checked_bytes: u64,
    delay_us: u64,
    /// Whether the rank allocates a tensor of at most 1 MiB: its allocator then reserves a
    /// small-pool segment (see `segment_slack_bytes`).
    small_pool: bool,
}

impl<'a> RankWalk<'a> {
    /// Walks `phase` once; what it costs counts `times` times (the peak once).
    fn segment(&mut self, s: &'a Schedule, phase: Phase, times: u64) {
        let (mut ops, mut checked, mut delay) = (0u64, 0u64, 0u64);
        for op in s.phase_ops(phase).iter().filter(|op| op.runs_on(self.rank)) {
            let size = |t: &str| self.sizes.get(t).copied().unwrap_or(0);
            let touched = match &op.kind {
                OpKind::Alloc {
                    t, elems, dtype, ..
                } => {
                    let elem_bytes = crate::schedule::elem_type(*dtype).size_bytes();
                    let bytes = elems.saturating_mul(elem_bytes);
                    self.small_pool |= bytes <= memreuse_core::allocator::SMALL_SIZE;
                    let old_size = self.elem_bytes.insert(t.as_str(), elem_bytes).unwrap_or(4);
                    if let Some(old) = self.sizes.insert(t.as_str(), *elems) {
                        self.now = self.now.saturating_sub(old.saturating_mul(old_size));
                    }
                    self.now = self.now.saturating_add(bytes);
                    self.peak = self.peak.max(self.now);
                    *elems
                }
                OpKind::Free { t } => {
                    let old = self.sizes.remove(t.as_str()).unwrap_or(0);
                    let old_size = self.elem_bytes.remove(t.as_str()).unwrap_or(4);
                    self.now = self.now.saturating_sub(old.saturating_mul(old_size));
                    0
                }
                OpKind::Upload { t, .. }
                | OpKind::Zero { t }
                | OpKind::Broadcast { t, .. }
                | OpKind::AllReduce { t, .. }
                | OpKind::Send { t, .. }
                | OpKind::Recv { t, .. } => size(t),
                OpKind::Check { t } => {
                    let elem_bytes = self.elem_bytes.get(t.as_str()).copied().unwrap_or(4);
                    checked = checked.saturating_add(size(t).saturating_mul(elem_bytes));
                    size(t)
                }
                OpKind::Copy { src, elems, .. } => elems.unwrap_or_else(|| size(src)),
                // The interpreter runs a collective once for all members, touching each
                // member's tensors a bounded number of times: per rank, its own elements.
                OpKind::AllGather { input, out, .. }
                | OpKind::ReduceScatter { input, out, .. }
                | OpKind::AllToAll { input, out, .. } => size(input).saturating_add(size(out)),
                OpKind::Batch { ops: members, .. } => members
                    .iter()
                    .map(|m| match m {
                        BatchMember::Send { t, .. } | BatchMember::Recv { t, .. } => size(t),
                    })
                    .fold(0, u64::saturating_add),
                OpKind::Delay { us, .. } => {
                    delay = delay.saturating_add(*us);
                    0
                }
                _ => 0,
            };
            ops = ops.saturating_add(touched);
        }
        self.element_ops = self.element_ops.saturating_add(ops.saturating_mul(times));
        self.checked_bytes = self
            .checked_bytes
            .saturating_add(checked.saturating_mul(times));
        self.delay_us = self.delay_us.saturating_add(delay.saturating_mul(times));
    }
}

/// Checks every limit; `false` when one is exceeded (the caller stops: nothing else may
/// run on a schedule whose size is out of bounds).
pub(super) fn check(s: &Schedule, sink: &mut Sink) -> bool {
    let header = [
        ("world_size", s.world_size as u64, MAX_WORLD_SIZE as u64),
        (
            "iterations",
            u64::from(s.iterations),
            u64::from(MAX_ITERATIONS),
        ),
        (
            "ops executed over all ranks and iterations",
            expanded_steps(s),
            MAX_STEPS,
        ),
    ];
    if !report(&header, sink) || !op_values(s, sink) {
        return false;
    }
    let c = cost(s);
    report(
        &[
            (
                "element operations over all ranks and iterations",
                c.element_ops,
                MAX_ELEMENT_OPS,
            ),
            (
                "delay microseconds of one rank",
                c.delay_us,
                MAX_DELAY_TOTAL_US,
            ),
            ("threads of a replay", c.threads, MAX_THREADS),
            (
                "estimated host bytes (tensors, checked values x 4, steps, thread stacks)",
                c.host_bytes(),
                MAX_HOST_BYTES,
            ),
        ],
        sink,
    )
}

/// The per-op limits (`alloc` elems, `delay` us), reported at the op.
fn op_values(s: &Schedule, sink: &mut Sink) -> bool {
    let mut within = true;
    for phase in Phase::ALL {
        for (i, op) in s.phase_ops(phase).iter().enumerate() {
            let (what, value, limit) = match op.kind {
                OpKind::Alloc { elems, .. } => ("elems", elems, MAX_ELEMS),
                OpKind::Delay { us, .. } => ("delay us", us, MAX_DELAY_US),
                _ => continue,
            };
            if value > limit {
                within = false;
                sink.push(
                    Some(phase),
                    Some(i),
                    None,
                    K::LimitExceeded { what, value, limit },
                );
            }
        }
    }
    within
}

/// Reports every `(what, value, limit)` with `value > limit`; `true` when none is.
fn report(limits: &[(&'static str, u64, u64)], sink: &mut Sink) -> bool {
    let mut within = true;
    for &(what, value, limit) in limits {
        if value > limit {
            within = false;
            sink.push(None, None, None, K::LimitExceeded { what, value, limit });
        }
    }
    within
}
