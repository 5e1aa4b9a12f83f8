//! Adversarial presets for reuse policies: each stresses one way user code lets go of
//! communication memory early. Checked tensors are allocated right after the early
//! release, so a policy that recycles the memory while the collective still runs corrupts
//! them (or the race detector flags it).

use super::ops::{
    all_gather, all_reduce, alloc, batch, check, delay, drop_work, free, on, recv, send, sync,
    upload, wait,
};
use super::{GenError, GenOptions, round_up, skeleton, world};
use crate::schedule::{BatchMember, ReduceOp, Schedule};

/// Description of `free-before-wait`.
pub(super) const FREE_BEFORE_WAIT: &str =
    "Adversarial: all_reduce tensors and all_gather inputs freed before their wait";
/// Description of `never-wait`.
pub(super) const NEVER_WAIT: &str =
    "Adversarial: works dropped without wait; results read only after a host sync";
/// Description of `late-wait`.
pub(super) const LATE_WAIT: &str = "Adversarial: a work waited only after many later collectives";
/// Description of `p2p-mode2`.
pub(super) const P2P_MODE2: &str = "Adversarial: async batch and send/recv, send buffers freed before wait (mode 2 falls back to record_stream)";

pub(super) fn free_before_wait(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(opts, "free-before-wait", 2, |_| true, "any number of ranks")?;
    let len = round_up(opts.elems, 16);
    let mut sched = skeleton("free-before-wait", FREE_BEFORE_WAIT, ranks, opts);
    let body = &mut sched.body;
    for l in 0..opts.layers {
        let name = |x: &str| format!("{x}{l}");
        let seed = opts.seed.wrapping_add(3 * l as u32);
        body.extend([
            alloc(&name("g"), len),
            upload(&name("g"), seed),
            all_reduce(&name("g"), "world", ReduceOp::Sum, Some(&name("w"))),
            free(&name("g")),
            alloc(&name("i"), len),
            upload(&name("i"), seed.wrapping_add(1)),
            alloc(&name("o"), len * ranks as u64),
            all_gather(&name("i"), &name("o"), "world", Some(&name("wg"))),
            free(&name("i")),
            alloc(&name("h"), len),
            upload(&name("h"), seed.wrapping_add(2)),
            check(&name("h")),
        ]);
    }
    for l in 0..opts.layers {
        let name = |x: &str| format!("{x}{l}");
        body.extend([
            wait(&name("w")),
            wait(&name("wg")),
            check(&name("o")),
            free(&name("o")),
            free(&name("h")),
        ]);
    }
    Ok(sched)
}

/// How long `never-wait` holds each collective back (20 ms).
const NEVER_WAIT_HOLD_US: u64 = 20_000;

pub(super) fn never_wait(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(opts, "never-wait", 2, |_| true, "any number of ranks")?;
    let len = round_up(opts.elems, 16);
    let mut sched = skeleton("never-wait", NEVER_WAIT, ranks, opts);
    let body = &mut sched.body;
    body.extend([
        alloc("k", len),
        upload("k", opts.seed),
        all_reduce("k", "world", ReduceOp::Max, Some("wk")),
        drop_work("wk"),
    ]);
    for l in 0..opts.layers {
        let name = |x: &str| format!("{x}{l}");
        let seed = opts.seed.wrapping_add(1 + 2 * l as u32);
        body.extend([
            alloc(&name("g"), len),
            upload(&name("g"), seed),
            // Holds the collective back (it waits for the compute stream) while the host
            // frees `g` and reuses its block: the unprotected reuse then races with it
            // whatever the speed of host and device. Without it the collective could
            // finish, and be observed, before the reuse, hiding the race from the
            // negative control on a fast device.
            delay(NEVER_WAIT_HOLD_US),
            all_reduce(&name("g"), "world", ReduceOp::Sum, Some(&name("w"))),
            drop_work(&name("w")),
            free(&name("g")),
            alloc(&name("h"), len),
            upload(&name("h"), seed.wrapping_add(1)),
            check(&name("h")),
            free(&name("h")),
        ]);
    }
    // Nothing waited the max-reduction of k: only the host sync makes it readable.
    body.extend([sync(), check("k"), free("k")]);
    Ok(sched)
}

pub(super) fn late_wait(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(opts, "late-wait", 2, |_| true, "any number of ranks")?;
    let len = round_up(opts.elems, 16);
    let mut sched = skeleton("late-wait", LATE_WAIT, ranks, opts);
    let body = &mut sched.body;
    body.extend([
        alloc("a", len),
        upload("a", opts.seed),
        all_reduce("a", "world", ReduceOp::Sum, Some("w0")),
    ]);
    for l in 0..opts.layers.saturating_mul(2) {
        let t = format!("b{l}");
        body.extend([
            alloc(&t, len),
            upload(&t, opts.seed.wrapping_add(1 + l as u32)),
            all_reduce(&t, "world", ReduceOp::Sum, None),
            check(&t),
            free(&t),
        ]);
    }
    body.extend([wait("w0"), check("a"), free("a")]);
    Ok(sched)
}

pub(super) fn p2p_mode2(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(
        opts,
        "p2p-mode2",
        2,
        |ranks| ranks % 2 == 0,
        "an even number of ranks (pairs)",
    )?;
    let len = round_up(opts.elems, 16);
    let mut sched = skeleton("p2p-mode2", P2P_MODE2, ranks, opts);
    let body = &mut sched.body;
    let evens: Vec<usize> = (0..ranks).step_by(2).collect();
    let odds: Vec<usize> = (1..ranks).step_by(2).collect();
    body.extend([alloc("s", len), upload("s", opts.seed), alloc("r", len)]);
    for &ev in &evens {
        let od = ev + 1;
        body.push(batch(
            vec![
                BatchMember::Send {
                    t: "s".into(),
                    peer: od,
                },
                BatchMember::Recv {
                    t: "r".into(),
                    peer: od,
                },
            ],
            Some("x"),
            ev,
        ));
        body.push(batch(
            vec![
                BatchMember::Recv {
                    t: "r".into(),
                    peer: ev,
                },
                BatchMember::Send {
                    t: "s".into(),
                    peer: ev,
                },
            ],
            Some("x"),
            od,
        ));
    }
    // The send buffer is freed while the batch may still read it; s2 may take its memory.
    body.extend([
        free("s"),
        alloc("s2", len),
        upload("s2", opts.seed.wrapping_add(1)),
        wait("x"),
        check("r"),
        check("s2"),
    ]);
    body.push(on(alloc("r2", len), odds.clone()));
    for &ev in &evens {
        body.push(send("s2", ev + 1, Some("ws"), ev));
        body.push(recv("r2", ev, Some("wr"), ev + 1));
    }
    body.push(on(free("s2"), evens.clone()));
    body.push(on(wait("ws"), evens));
    body.extend([
        on(wait("wr"), odds.clone()),
        on(check("r2"), odds.clone()),
        on(free("r2"), odds.clone()),
        on(free("s2"), odds),
    ]);
    body.push(free("r"));
    Ok(sched)
}
