//! `moe-mixed`: one `MoE` transformer step on 16 ranks with DP=2 x FSDP=2 x TP=2 x EP=2.
//!
//! Rank mapping: `rank = dp*8 + fsdp*4 + tp*2 + ep`. Each dimension is a group name whose
//! lists pair the ranks that differ only in that dimension's bit: `dp` = bit 3 (e.g.
//! [0, 8]), `fsdp` = bit 2 ([0, 4]), `tp` = bit 1 ([0, 2]), `ep` = bit 0 ([0, 1]); 8 lists
//! of 2 ranks per name, so every rank belongs to exactly one communicator per dimension.
//!
//! Per layer: FSDP all-gather of the parameter shard (async, waited before use), TP
//! all-reduce of the attention output, EP all-to-all dispatch, identity expert, all-to-all
//! combine; backward: FSDP reduce-scatter of the gradient (full gradient freed before the
//! wait), then DP all-reduce of the shard, which becomes the new parameter shard.
//! Only world size 16 is supported (no folding of dimensions).

use super::ops::{
    all_gather, all_reduce, all_to_all, alloc, check, copy, free, reduce_scatter, upload, wait,
};
use super::{GenError, GenOptions, round_up, skeleton, world};
use crate::schedule::{ReduceOp, Schedule};

pub(super) const DESCRIPTION: &str = "MoE step on 16 ranks: DP=2 x FSDP=2 x TP=2 x EP=2 (all_gather, all_reduce, all_to_all, reduce_scatter)";

const DIMS: [(&str, usize); 4] = [("dp", 3), ("fsdp", 2), ("tp", 1), ("ep", 0)];

pub(super) fn generate(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(
        opts,
        "moe-mixed",
        16,
        |ranks| ranks == 16,
        "exactly 16 ranks (DP=2 x FSDP=2 x TP=2 x EP=2)",
    )?;
    let shard = round_up(opts.elems, 16);
    let full = shard * 2;
    let mut sched = skeleton("moe-mixed", DESCRIPTION, ranks, opts);
    for (name, bit) in DIMS {
        let lists = (0..ranks)
            .filter(|r| r & (1 << bit) == 0)
            .map(|r| vec![r, r | (1 << bit)])
            .collect();
        sched.groups.insert(name.to_owned(), lists);
    }
    for l in 0..opts.layers {
        let p = format!("p{l}");
        sched.setup.extend([
            alloc(&p, shard),
            upload(&p, opts.seed.wrapping_add(l as u32)),
        ]);
        sched.teardown.push(free(&p));
    }
    let seed = |k: usize| opts.seed.wrapping_add(k as u32);
    let body = &mut sched.body;
    body.push(alloc("act", full));
    for l in 0..opts.layers {
        let name = |x: &str| format!("{x}{l}");
        body.extend([
            alloc(&name("full"), full),
            all_gather(&name("p"), &name("full"), "fsdp", Some(&name("wg"))),
            wait(&name("wg")),
            copy(&name("full"), "act"),
            free(&name("full")),
            alloc(&name("y"), full),
            upload(&name("y"), seed(100 + l)),
            all_reduce(&name("y"), "tp", ReduceOp::Sum, None),
            check(&name("y")),
            free(&name("y")),
            alloc(&name("tok"), full),
            upload(&name("tok"), seed(200 + l)),
            alloc(&name("disp"), full),
            all_to_all(&name("tok"), &name("disp"), "ep", Some(&name("wd"))),
            wait(&name("wd")),
            alloc(&name("eo"), full),
            copy(&name("disp"), &name("eo")),
            free(&name("disp")),
            alloc(&name("comb"), full),
            all_to_all(&name("eo"), &name("comb"), "ep", None),
            free(&name("eo")),
            check(&name("comb")),
            free(&name("comb")),
            free(&name("tok")),
        ]);
    }
    body.push(check("act"));
    for l in (0..opts.layers).rev() {
        let name = |x: &str| format!("{x}{l}");
        body.extend([
            alloc(&name("g"), full),
            upload(&name("g"), seed(300 + l)),
            alloc(&name("gs"), shard),
            reduce_scatter(&name("g"), &name("gs"), "fsdp", Some(&name("wr"))),
            free(&name("g")),
            wait(&name("wr")),
            all_reduce(&name("gs"), "dp", ReduceOp::Sum, Some(&name("wa"))),
            wait(&name("wa")),
            copy(&name("gs"), &name("p")),
            free(&name("gs")),
            check(&name("p")),
        ]);
    }
    body.push(free("act"));
    Ok(sched)
}
