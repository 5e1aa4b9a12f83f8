//! `eight-then-four`: the fragmentation pattern of issue 15's measurements on one rank.
//!
//! Each iteration allocates eight `small` tensors (default 16 MiB), frees them, then
//! allocates four tensors of twice that size (32 MiB) and frees them, under a device of
//! 12.5 x `small` bytes (default 200 MiB). Ordinary segments cache the eight small blocks
//! and cannot hand them to the larger requests (each is its own segment), so the device
//! fills up and the allocator must release its cache to go on: peak reserved is far above
//! the 128 MiB live peak. Expandable segments map the freed pages again instead. A small
//! probe written in setup travels through the last tensor of each group and is checked, so
//! the digest sees every iteration. Tensors are multiples of 2 MiB, so PyTorch-style
//! rounding adds nothing; `--layers` is not used (the pattern is eight, then four).

use super::ops::{alloc, check, copy_range, free, upload, zero};
use super::{GenError, GenOptions, round_up, skeleton, world};
use crate::schedule::Schedule;

pub(super) const DESCRIPTION: &str = "Eight 16 MiB tensors freed, then four 32 MiB, on a 200 MiB device: cached segments the larger tensors cannot reuse (uses device_memory)";

/// Elements of the probe that carries data through the pattern.
const PROBE: u64 = 4096;
/// 2 MiB in f32 elements.
const SEGMENT_ELEMS: u64 = 1 << 19;
/// 16 MiB in f32 elements: the smallest (and default) small tensor.
const DEFAULT_SMALL: u64 = 8 * SEGMENT_ELEMS;

pub(super) fn generate(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(opts, "eight-then-four", 1, |_| true, "any number of ranks")?;
    let small = round_up(opts.elems.max(DEFAULT_SMALL), SEGMENT_ELEMS);
    if small > crate::schedule::MAX_ELEMS / 2 {
        return Err(GenError::Unsupported {
            preset: "eight-then-four",
            reason: format!("elems {small} too large"),
        });
    }
    let big = 2 * small;
    let mut sched = skeleton("eight-then-four", DESCRIPTION, ranks, opts);
    // 200 MiB for 16 MiB tensors: eight small and two big fit, eight small and three big
    // do not.
    sched.device_memory = Some(opts.device_memory.unwrap_or(small * 4 * 25 / 2));
    sched.setup = vec![alloc("keep", PROBE), upload("keep", opts.seed)];
    let body = &mut sched.body;
    for i in 0..8 {
        body.push(alloc(&format!("s{i}"), small));
    }
    // keep -> the last small tensor -> carry (small tensors are freed before the big
    // ones come) -> the last big tensor -> probe, checked.
    body.extend([
        zero("s7"),
        copy_range("keep", 0, "s7", small - PROBE, PROBE),
        alloc("carry", PROBE),
        copy_range("s7", small - PROBE, "carry", 0, PROBE),
    ]);
    body.extend((0..8).map(|i| free(&format!("s{i}"))));
    body.extend((0..4).map(|j| alloc(&format!("b{j}"), big)));
    body.extend([
        zero("b3"),
        copy_range("carry", 0, "b3", big - PROBE, PROBE),
        free("carry"),
        alloc("probe", PROBE),
        copy_range("b3", big - PROBE, "probe", 0, PROBE),
        check("probe"),
        free("probe"),
    ]);
    body.extend((0..4).map(|j| free(&format!("b{j}"))));
    sched.teardown = vec![free("keep")];
    Ok(sched)
}
