//! The deterministic RNG and the size trace every peer replays.

use super::*;

/// The seeded generator of every trace (shared with the mock's deterministic mode).
pub use memreuse_core::testing::SplitMix64;

/// One trace operation. Slots index a fixed table of live handles that every peer keeps
/// the same way, so "free a random live one" frees the same allocation in every peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Allocate `size` bytes into `slot` (empty before).
    Alloc {
        /// Slot receiving the handle.
        slot: u32,
        /// Requested bytes.
        size: u64,
    },
    /// Free the handle in `slot`.
    Free {
        /// Slot holding the handle.
        slot: u32,
    },
}

/// Parameters of the random trace (issue 2, workload b).
#[derive(Clone, Copy, Debug)]
pub struct TraceSpec {
    /// Generator seed.
    pub seed: u64,
    /// Random operations (the final drain of live allocations comes on top).
    pub ops: usize,
    /// At most this many allocations live at once; at the cap the op is always a free.
    pub max_live: usize,
    /// Probability that an op is an allocation while fewer than `max_live` are live.
    pub p_alloc: f64,
    /// Probability that an allocation is "small".
    pub p_small: f64,
    /// Small sizes: uniform in this inclusive range.
    pub small: (u64, u64),
    /// Large sizes: uniform in this inclusive range.
    pub large: (u64, u64),
}

impl TraceSpec {
    /// The trace of issue 2: 1,000,000 ops, 55% alloc while fewer than 200 are live,
    /// sizes 70% uniform in 512 B..=1 MiB and 30% uniform in 1 MiB..=64 MiB, seed 0x5EED.
    pub const ISSUE_2: TraceSpec = TraceSpec {
        seed: 0x5EED,
        ops: 1_000_000,
        max_live: 200,
        p_alloc: 0.55,
        p_small: 0.70,
        small: (512, MIB),
        large: (MIB, 64 * MIB),
    };
}

/// A generated trace and its own figures.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Operations, random part then the drain (every allocation is freed by the end).
    pub ops: Vec<Op>,
    /// Number of allocations (= malloc+free pairs).
    pub allocs: u64,
    /// Number of slots the peers need.
    pub slots: usize,
    /// Peak of the live requested bytes: the lower bound of any allocator's footprint.
    pub live_peak_bytes: u64,
    /// Sum of all requested bytes.
    pub requested_bytes: u64,
}

impl Trace {
    /// Generates the trace of `spec`.
    pub fn generate(spec: &TraceSpec) -> Trace {
        let mut rng = SplitMix64::new(spec.seed);
        let mut live: Vec<u32> = Vec::with_capacity(spec.max_live);
        let mut free_slots: Vec<u32> = (0..spec.max_live as u32).rev().collect();
        let mut size_of = vec![0u64; spec.max_live];
        let mut ops = Vec::with_capacity(spec.ops + spec.max_live);
        let (mut allocs, mut live_bytes, mut live_peak_bytes, mut requested_bytes) =
            (0u64, 0u64, 0u64, 0u64);
        for _ in 0..spec.ops {
            // Draw the coin every time, so the sequence does not depend on the branch taken.
            let coin = rng.unit();
            let alloc = live.is_empty() || (live.len() < spec.max_live && coin < spec.p_alloc);
            if alloc {
                let (lo, hi) = if rng.unit() < spec.p_small {
                    spec.small
                } else {
                    spec.large
                };
                let size = rng.range_inclusive(lo, hi);
                let slot = free_slots.pop().expect("a slot is free below max_live");
                size_of[slot as usize] = size;
                live.push(slot);
                ops.push(Op::Alloc { slot, size });
                allocs += 1;
                requested_bytes += size;
                live_bytes += size;
                live_peak_bytes = live_peak_bytes.max(live_bytes);
            } else {
                let i = rng.range_inclusive(0, live.len() as u64 - 1) as usize;
                let slot = live.swap_remove(i);
                free_slots.push(slot);
                live_bytes -= size_of[slot as usize];
                ops.push(Op::Free { slot });
            }
        }
        // Drain: free what is left, oldest position first (part of the timed run, so
        // every timed allocation has its free).
        for slot in live.drain(..) {
            ops.push(Op::Free { slot });
        }
        Trace {
            ops,
            allocs,
            slots: spec.max_live,
            live_peak_bytes,
            requested_bytes,
        }
    }
}
