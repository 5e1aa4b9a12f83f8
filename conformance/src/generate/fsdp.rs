//! `fsdp`: fully sharded data parallel over `world`. Each rank holds one shard per layer.
//! Forward all-gathers layer l+1 (prefetch) before using layer l; backward gathers again,
//! produces the full gradient, reduce-scatters it asynchronously and frees the full
//! gradient before the wait; the reduced shards then overwrite the parameter shards, which
//! are checked.

use super::ops::{all_gather, alloc, check, copy, free, reduce_scatter, upload, wait};
use super::{GenError, GenOptions, round_up, skeleton, world};
use crate::schedule::Schedule;

pub(super) const DESCRIPTION: &str =
    "FSDP: per-layer all_gather of parameters before use (prefetched), reduce_scatter of gradients";

pub(super) fn generate(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(opts, "fsdp", 4, |_| true, "any number of ranks")?;
    let shard = round_up(opts.elems, 16);
    let full = shard * ranks as u64;
    let layers = opts.layers;
    let mut sched = skeleton("fsdp", DESCRIPTION, ranks, opts);
    for l in 0..layers {
        let p = format!("p{l}");
        sched.setup.extend([
            alloc(&p, shard),
            upload(&p, opts.seed.wrapping_add(l as u32)),
        ]);
        sched.teardown.push(free(&p));
    }
    let body = &mut sched.body;
    body.push(alloc("act", full));
    let gather = |body: &mut Vec<_>, l: usize| {
        body.extend([
            alloc(&format!("full{l}"), full),
            all_gather(
                &format!("p{l}"),
                &format!("full{l}"),
                "world",
                Some(&format!("wg{l}")),
            ),
        ]);
    };
    gather(body, 0);
    for l in 0..layers {
        if l + 1 < layers {
            gather(body, l + 1);
        }
        body.extend([
            wait(&format!("wg{l}")),
            copy(&format!("full{l}"), "act"),
            free(&format!("full{l}")),
        ]);
    }
    body.push(check("act"));
    for l in (0..layers).rev() {
        let (fl, gl, gs) = (format!("full{l}"), format!("grad{l}"), format!("gs{l}"));
        body.extend([
            alloc(&fl, full),
            all_gather(&format!("p{l}"), &fl, "world", None),
            alloc(&gl, full),
            upload(&gl, opts.seed.wrapping_add(100 + l as u32)),
            free(&fl),
            alloc(&gs, shard),
            reduce_scatter(&gl, &gs, "world", Some(&format!("wr{l}"))),
            free(&gl),
        ]);
    }
    for l in 0..layers {
        let gs = format!("gs{l}");
        body.extend([
            wait(&format!("wr{l}")),
            copy(&gs, &format!("p{l}")),
            free(&gs),
            check(&format!("p{l}")),
        ]);
    }
    body.push(free("act"));
    Ok(sched)
}
