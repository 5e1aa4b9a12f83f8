//! The reference interpreter's semantics on small hand-computed schedules: upload pattern,
//! collectives, p2p timing, digest and live peak.
// Exact f32 equality is the point: reference results are bit-exact by construction.
#![allow(clippy::float_cmp)]

mod common;

use common::{sched, valid, with};
use memreuse_conformance::reference::{digest, live_peak_bytes, upload_values};
use serde_json::json;

fn up(rank: u64, iter: u64, seed: u64, i: u64) -> f32 {
    ((seed * 1_000_003 + rank * 7919 + iter * 104_729 + i * 31) % 251) as f32 - 125.0
}

#[test]
fn upload_pattern_matches_the_formula() {
    let v = upload_values(4_000_000_000, 3, 7, 40);
    for (i, x) in v.iter().enumerate() {
        assert_eq!(*x, up(3, 7, 4_000_000_000, i as u64), "element {i}");
    }
    assert!(v.iter().all(|x| (-125.0..=125.0).contains(x)));
}

#[test]
fn live_peak_by_hand() {
    // 100 + 50 live (600 B), then a freed, c allocated: 50 + 200 = 250 elements = 1000 B.
    let s = valid(&sched(
        1,
        json!([
            {"op": "alloc", "t": "a", "elems": 100}, {"op": "alloc", "t": "b", "elems": 50}, {"op": "free", "t": "a"},
            {"op": "alloc", "t": "c", "elems": 200}, {"op": "free", "t": "b"}, {"op": "free", "t": "c"}
        ]),
    ));
    assert_eq!(s.reference.live_peak_bytes, 1000);
    // Max over ranks: rank 1 alone holds an extra 1000 elements next to the shared 10.
    let s = valid(&sched(
        2,
        json!([
            {"op": "alloc", "t": "a", "elems": 10}, {"op": "alloc", "t": "x", "elems": 1000, "ranks": [1]},
            {"op": "free", "t": "x", "ranks": [1]}, {"op": "free", "t": "a"}
        ]),
    ));
    assert_eq!(s.reference.live_peak_bytes, 4040);
    // Setup tensor + one body tensor at a time, across 3 iterations: (64 + 32) * 4.
    let s = with(
        with(
            sched(
                1,
                json!([{"op": "alloc", "t": "b", "elems": 32}, {"op": "free", "t": "b"}]),
            ),
            "setup",
            json!([{"op": "alloc", "t": "p", "elems": 64}]),
        ),
        "teardown",
        json!([{"op": "free", "t": "p"}]),
    );
    let v = valid(&with(s, "iterations", json!(3)));
    assert_eq!(v.reference.live_peak_bytes, 384);
    assert_eq!(live_peak_bytes(&v.schedule), 384);
}

#[test]
fn collectives_compute_exact_results() {
    let s = valid(&with(
        sched(
            4,
            json!([
                {"op": "alloc", "t": "a", "elems": 16}, {"op": "upload", "t": "a", "seed": 2},
                {"op": "alloc", "t": "g", "elems": 32}, {"op": "all_gather", "in": "a", "out": "g", "group": "p"},
                {"op": "alloc", "t": "r", "elems": 16}, {"op": "reduce_scatter", "in": "g", "out": "r", "group": "p", "reduce": "max"},
                {"op": "alloc", "t": "x", "elems": 32}, {"op": "all_to_all", "in": "g", "out": "x", "group": "p"},
                {"op": "broadcast", "t": "a", "root": 1, "group": "p"},
                {"op": "check", "t": "g"}, {"op": "check", "t": "r"}, {"op": "check", "t": "x"}, {"op": "check", "t": "a"},
                {"op": "free", "t": "a"}, {"op": "free", "t": "g"}, {"op": "free", "t": "r"}, {"op": "free", "t": "x"}
            ]),
        ),
        "groups",
        json!({"p": [[2, 0], [1, 3]]}),
    ));
    let c = &s.reference.checks;
    // Rank 0 is group rank 1 of [2, 0]: gathered = a(rank 2) ++ a(rank 0).
    let a = |rank: u64, i: u64| up(rank, 0, 2, i);
    let g0: Vec<f32> = (0..16)
        .map(|i| a(2, i))
        .chain((0..16).map(|i| a(0, i)))
        .collect();
    assert_eq!(c[0][0].f32_values(), g0);
    // reduce_scatter(max) of two identical gathers: chunk 1 for group rank 1.
    assert_eq!(c[0][1].f32_values(), g0[16..].to_vec());
    // all_to_all of identical inputs: chunk (group rank) of each member.
    let x0: Vec<f32> = g0[16..].iter().chain(&g0[16..]).copied().collect();
    assert_eq!(c[0][2].f32_values(), x0);
    // broadcast from group rank 1 of [2, 0] = rank 0's own a; rank 2 receives it.
    assert_eq!(
        c[2][3].f32_values(),
        (0..16).map(|i| a(0, i)).collect::<Vec<_>>()
    );
    assert_eq!(
        c[3][3].f32_values(),
        (0..16).map(|i| a(3, i)).collect::<Vec<_>>()
    );
}

#[test]
fn recv_sees_the_tensor_as_it_was_at_the_send() {
    // Rank 0 sends then overwrites; rank 1 receives late: it must get the uploaded values.
    let s = valid(&sched(
        2,
        json!([
            {"op": "alloc", "t": "a", "elems": 16}, {"op": "upload", "t": "a", "seed": 1, "ranks": [0]},
            {"op": "send", "t": "a", "peer": 1, "ranks": [0]}, {"op": "zero", "t": "a", "ranks": [0]},
            {"op": "alloc", "t": "pad", "elems": 16, "ranks": [1]}, {"op": "recv", "t": "a", "peer": 0, "ranks": [1]},
            {"op": "check", "t": "a"}, {"op": "free", "t": "a"}, {"op": "free", "t": "pad", "ranks": [1]}
        ]),
    ));
    assert_eq!(s.reference.checks[0][0].f32_values(), vec![0.0; 16]);
    assert_eq!(
        s.reference.checks[1][0].f32_values(),
        (0..16).map(|i| up(0, 0, 1, i)).collect::<Vec<_>>()
    );
}

#[test]
fn digest_is_fnv1a_over_checks_in_rank_order() {
    // No checks: the FNV-1a offset basis.
    let s = valid(&sched(1, json!([{"op": "sync"}])));
    assert_eq!(s.reference.digest, "cbf29ce484222325");
    // One check of 16 zeros: FNV-1a of 64 zero bytes.
    let s = valid(&sched(
        1,
        json!([{"op": "alloc", "t": "a", "elems": 16}, {"op": "zero", "t": "a"}, {"op": "check", "t": "a"}, {"op": "free", "t": "a"}]),
    ));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for _ in 0..64 {
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    assert_eq!(s.reference.digest, format!("{h:016x}"));
    assert_eq!(
        digest(s.reference.checks.iter().map(Vec::as_slice)),
        s.reference.digest
    );
}
