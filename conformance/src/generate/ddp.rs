//! `ddp`: data parallel with gradient buckets all-reduced over `world` while backward
//! produces the next bucket. Odd buckets are freed right after issuing their all-reduce
//! (before the wait, as DDP's temporary buckets are), so a policy that hands their memory
//! to the next bucket too early corrupts checked data; even buckets are waited and copied
//! into the flat parameter, which is checked every iteration.

use super::ops::{all_reduce, alloc, check, copy_range, free, upload, wait, zero};
use super::{GenError, GenOptions, round_up, skeleton, world};
use crate::schedule::{ReduceOp, Schedule};

pub(super) const DESCRIPTION: &str =
    "DDP: bucketed gradient all_reduce overlapping backward; odd buckets freed before their wait";

pub(super) fn generate(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(opts, "ddp", 2, |_| true, "any number of ranks")?;
    let len = round_up(opts.elems, 16);
    let layers = opts.layers;
    let mut sched = skeleton("ddp", DESCRIPTION, ranks, opts);
    sched.setup = vec![alloc("param", len * layers as u64), zero("param")];
    let body = &mut sched.body;
    body.extend([alloc("act", len), upload("act", opts.seed)]);
    // Backward runs from the last layer; each bucket's all-reduce overlaps the next
    // bucket's production.
    for l in (0..layers).rev() {
        let (g, w) = (format!("g{l}"), format!("w{l}"));
        body.extend([
            alloc(&g, len),
            upload(&g, opts.seed.wrapping_add(1 + l as u32)),
            all_reduce(&g, "world", ReduceOp::Sum, Some(&w)),
        ]);
        if l % 2 == 1 {
            body.push(free(&g));
        }
    }
    body.extend([check("act"), free("act")]);
    for l in (0..layers).rev() {
        let (g, w) = (format!("g{l}"), format!("w{l}"));
        body.push(wait(&w));
        if l % 2 == 0 {
            body.extend([copy_range(&g, 0, "param", len * l as u64, len), free(&g)]);
        }
    }
    body.push(check("param"));
    sched.teardown = vec![free("param")];
    Ok(sched)
}
