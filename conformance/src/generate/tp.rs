//! `tp`: tensor parallel over `world`. Every row-parallel layer produces a partial sum
//! that is all-reduced asynchronously while the next column-parallel layer computes; the
//! reduced activations are copied into one output that is checked each iteration.

use super::ops::{all_reduce, alloc, check, copy_range, free, upload, wait};
use super::{GenError, GenOptions, round_up, skeleton, world};
use crate::schedule::{ReduceOp, Schedule};

pub(super) const DESCRIPTION: &str =
    "TP: all_reduce of row-parallel layer outputs, overlapped with the next layer";

pub(super) fn generate(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(opts, "tp", 2, |_| true, "any number of ranks")?;
    let len = round_up(opts.elems, 16);
    let mut sched = skeleton("tp", DESCRIPTION, ranks, opts);
    let body = &mut sched.body;
    body.push(alloc("out", len * opts.layers as u64));
    for l in 0..opts.layers {
        let (y, h, w) = (format!("y{l}"), format!("h{l}"), format!("w{l}"));
        let seed = opts.seed.wrapping_add(2 * l as u32);
        body.extend([
            alloc(&y, len),
            upload(&y, seed),
            all_reduce(&y, "world", ReduceOp::Sum, Some(&w)),
            alloc(&h, len),
            upload(&h, seed.wrapping_add(1)),
            wait(&w),
            copy_range(&y, 0, "out", len * l as u64, len),
            free(&y),
            check(&h),
            free(&h),
        ]);
    }
    body.extend([check("out"), free("out")]);
    Ok(sched)
}
