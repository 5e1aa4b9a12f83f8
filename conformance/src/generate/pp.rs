//! `pp`: pipeline parallel, one stage per rank, `layers` micro-batches. Forward sends
//! activations down the pipeline (asynchronously from stage 0.., waited after the
//! forward), backward sends gradients up with blocking send/recv. Every stage receives
//! before it sends, so the strictest execution drains the pipeline without deadlock.

use super::ops::{alloc, check, free, on, recv, send, upload, wait};
use super::{GenError, GenOptions, round_up, skeleton, world};
use crate::schedule::Schedule;

pub(super) const DESCRIPTION: &str =
    "PP: send/recv of activations and gradients between stages, micro-batched";

pub(super) fn generate(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(
        opts,
        "pp",
        4,
        |ranks| ranks >= 2,
        "at least 2 ranks (one per pipeline stage)",
    )?;
    let len = round_up(opts.elems, 16);
    let mb = opts.layers;
    let mut sched = skeleton("pp", DESCRIPTION, ranks, opts);
    let body = &mut sched.body;
    let last = ranks - 1;
    for m in 0..mb {
        let (a, w) = (format!("a{m}"), format!("wf{m}"));
        body.push(alloc(&a, len));
        body.push(on(upload(&a, opts.seed.wrapping_add(m as u32)), vec![0]));
        for st in 1..ranks {
            body.push(recv(&a, st - 1, None, st));
        }
        for st in 0..last {
            body.push(send(&a, st + 1, Some(&w), st));
        }
        body.push(on(check(&a), vec![last]));
    }
    for m in 0..mb {
        body.push(on(wait(&format!("wf{m}")), (0..last).collect()));
    }
    for m in (0..mb).rev() {
        let g = format!("g{m}");
        body.push(alloc(&g, len));
        body.push(on(
            upload(&g, opts.seed.wrapping_add(1000 + m as u32)),
            vec![last],
        ));
        // Stage st receives from st+1 then forwards to st-1: listed from the last stage
        // down so each op's ranks are explicit.
        for st in (0..last).rev() {
            body.push(recv(&g, st + 1, None, st));
        }
        for st in (1..ranks).rev() {
            body.push(send(&g, st - 1, None, st));
        }
        body.push(on(check(&g), vec![0]));
    }
    for m in 0..mb {
        body.extend([free(&format!("a{m}")), free(&format!("g{m}"))]);
    }
    Ok(sched)
}
