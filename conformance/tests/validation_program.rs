//! Validation errors found by following program order: matching, deadlock, initialisation,
//! lifetimes, works, exactness and races. Each asserts kind, phase, op index and rank, and
//! near-miss schedules that must stay valid.

mod common;

use common::{alloc, expect_error, free, invalid, sched, up, valid, with};
use memreuse_conformance::schedule::Phase::{Body, Setup};
use memreuse_conformance::validate::ValidationErrorKind as K;
use serde_json::json;

#[test]
fn collectives_issued_in_different_order_or_shape() {
    // Rank 1 issues the same two all_reduces in the other order: sizes differ at k = 0.
    let s = sched(
        2,
        json!([
            alloc("a", 16), up("a"), alloc("b", 32), up("b"),
            {"op": "all_reduce", "t": "a", "ranks": [0]},
            {"op": "all_reduce", "t": "b"},
            {"op": "all_reduce", "t": "a", "ranks": [1]},
            free("a"), free("b")
        ]),
    );
    expect_error(&s, Some(Body), Some(5), Some(1), |k| {
        matches!(k, K::CollectiveMismatch { index: 0, .. })
    });
    let s = sched(
        2,
        json!([
            alloc("a", 16), up("a"),
            {"op": "all_reduce", "t": "a", "reduce": "max", "ranks": [0]},
            {"op": "all_reduce", "t": "a", "reduce": "min", "ranks": [1]},
            free("a")
        ]),
    );
    expect_error(&s, Some(Body), Some(3), Some(1), |k| {
        matches!(k, K::CollectiveMismatch { .. })
    });
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "broadcast", "t": "a", "root": 0, "ranks": [0]}, {"op": "broadcast", "t": "a", "root": 1, "ranks": [1]}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(3), Some(1), |k| {
        matches!(k, K::CollectiveMismatch { .. })
    });
}

#[test]
fn collective_missing_on_a_member() {
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "all_reduce", "t": "a", "ranks": [0]}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(2), Some(0), |k| {
        matches!(k, K::UnmatchedCollective { index: 0, .. })
    });
}

#[test]
fn unmatched_and_cross_phase_p2p() {
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "send", "t": "a", "peer": 1, "ranks": [0]}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(2), Some(0), |k| {
        *k == K::UnmatchedP2p {
            dir: "send",
            peer: 1,
        }
    });
    // The send is in setup, the recv in the body: never matched.
    let s = with(
        sched(
            2,
            json!([{"op": "recv", "t": "a", "peer": 0, "ranks": [1]}]),
        ),
        "setup",
        json!([alloc("a", 16), up("a"), {"op": "send", "t": "a", "peer": 1, "ranks": [0]}]),
    );
    let s = with(s, "teardown", json!([free("a")]));
    expect_error(&s, Some(Setup), Some(2), Some(0), |k| {
        *k == K::UnmatchedP2p {
            dir: "send",
            peer: 1,
        }
    });
    expect_error(&s, Some(Body), Some(0), Some(1), |k| {
        *k == K::UnmatchedP2p {
            dir: "recv",
            peer: 0,
        }
    });
}

#[test]
fn p2p_size_mismatch() {
    let s = sched(
        2,
        json!([
            {"op": "alloc", "t": "a", "elems": 16, "ranks": [0]}, {"op": "alloc", "t": "a", "elems": 32, "ranks": [1]},
            {"op": "upload", "t": "a", "seed": 0, "ranks": [0]},
            {"op": "send", "t": "a", "peer": 1, "ranks": [0]}, {"op": "recv", "t": "a", "peer": 0, "ranks": [1]}, free("a")
        ]),
    );
    expect_error(&s, Some(Body), Some(4), Some(1), |k| {
        *k == K::P2pSizeMismatch {
            peer: 0,
            elems: 32,
            peer_elems: 16,
        }
    });
}

#[test]
fn deadlock_under_strictest_execution() {
    // Both ranks send first with blocking sends.
    let s = sched(
        2,
        json!([
            alloc("s", 16), up("s"), alloc("r", 16),
            {"op": "send", "t": "s", "peer": 1, "ranks": [0]}, {"op": "send", "t": "s", "peer": 0, "ranks": [1]},
            {"op": "recv", "t": "r", "peer": 1, "ranks": [0]}, {"op": "recv", "t": "r", "peer": 0, "ranks": [1]},
            free("s"), free("r")
        ]),
    );
    expect_error(&s, Some(Body), Some(3), Some(0), |k| {
        matches!(
            k,
            K::Deadlock {
                op: "send",
                iter: 0
            }
        )
    });
    expect_error(&s, Some(Body), Some(4), Some(1), |k| {
        matches!(
            k,
            K::Deadlock {
                op: "send",
                iter: 0
            }
        )
    });
    // The same exchange as one batch per rank is fine.
    let ok = sched(
        2,
        json!([
            alloc("s", 16), up("s"), alloc("r", 16),
            {"op": "batch", "ops": [{"op": "send", "t": "s", "peer": 1}, {"op": "recv", "t": "r", "peer": 1}], "ranks": [0]},
            {"op": "batch", "ops": [{"op": "send", "t": "s", "peer": 0}, {"op": "recv", "t": "r", "peer": 0}], "ranks": [1]},
            {"op": "check", "t": "r"}, free("s"), free("r")
        ]),
    );
    valid(&ok);
}

#[test]
fn deadlock_across_communicators() {
    // Each communicator is consistent, but ranks 0 and 1 enter them in opposite orders.
    let s = with(
        sched(
            2,
            json!([
                alloc("a", 16), up("a"),
                {"op": "all_reduce", "t": "a", "group": "g", "ranks": [0]},
                {"op": "all_reduce", "t": "a"},
                {"op": "all_reduce", "t": "a", "group": "g", "ranks": [1]},
                free("a")
            ]),
        ),
        "groups",
        json!({"g": [[0, 1]]}),
    );
    expect_error(&s, Some(Body), Some(2), Some(0), |k| {
        matches!(
            k,
            K::Deadlock {
                op: "all_reduce",
                ..
            }
        )
    });
}

#[test]
fn reads_of_elements_never_written() {
    let s = sched(
        1,
        json!([alloc("a", 16), {"op": "check", "t": "a"}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(1), Some(0), |k| {
        *k == K::UninitializedRead {
            tensor: "a".into(),
            elem: 0,
        }
    });
    let s = sched(
        1,
        json!([
            alloc("a", 64), alloc("b", 64), {"op": "zero", "t": "b"}, alloc("c", 32), up("c"),
            {"op": "copy", "src": "c", "dst": "a", "elems": 32},
            {"op": "copy", "src": "a", "dst": "b", "src_offset": 16, "elems": 32},
            free("a"), free("b"), free("c")
        ]),
    );
    expect_error(&s, Some(Body), Some(6), Some(0), |k| {
        *k == K::UninitializedRead {
            tensor: "a".into(),
            elem: 32,
        }
    });
    let s = sched(
        2,
        json!([alloc("a", 16), {"op": "all_reduce", "t": "a"}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(1), Some(1), |k| {
        matches!(k, K::UninitializedRead { .. })
    });
    // A broadcast defines the non-root tensors; only the root must have written.
    let s = sched(
        2,
        json!([alloc("a", 16), {"op": "upload", "t": "a", "seed": 1, "ranks": [1]}, {"op": "broadcast", "t": "a", "root": 1}, {"op": "check", "t": "a"}, free("a")]),
    );
    valid(&s);
    let s = sched(
        2,
        json!([alloc("a", 16), {"op": "upload", "t": "a", "seed": 1, "ranks": [1]}, {"op": "broadcast", "t": "a"}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(2), Some(0), |k| {
        matches!(k, K::UninitializedRead { .. })
    });
}

#[test]
fn tensor_lifetime_errors() {
    let s = sched(1, json!([alloc("a", 16)]));
    expect_error(&s, None, None, Some(0), |k| *k == K::LiveAtEnd("a".into()));
    let s = sched(1, json!([alloc("a", 16), alloc("a", 16), free("a")]));
    expect_error(&s, Some(Body), Some(1), Some(0), |k| {
        *k == K::ReallocatedWhileLive("a".into())
    });
    let s = sched(1, json!([alloc("a", 16), free("a"), up("a")]));
    expect_error(&s, Some(Body), Some(2), Some(0), |k| {
        *k == K::UseAfterFree("a".into())
    });
    // Allocated in the body but freed only in teardown: the second iteration reallocates.
    let s = with(
        with(sched(1, json!([alloc("a", 16)])), "iterations", json!(2)),
        "teardown",
        json!([free("a")]),
    );
    expect_error(&s, Some(Body), Some(0), Some(0), |k| {
        *k == K::ReallocatedWhileLive("a".into())
    });
}

#[test]
fn work_lifetime_errors() {
    let ar = |w: &str| json!({"op": "all_reduce", "t": "a", "async": true, "work": w});
    let s = sched(2, json!([alloc("a", 16), up("a"), ar("w"), free("a")]));
    expect_error(&s, None, None, Some(0), |k| {
        *k == K::WorkNeverWaited("w".into())
    });
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), alloc("b", 16), up("b"), ar("w"), {"op": "all_reduce", "t": "b", "async": true, "work": "w"}, {"op": "wait", "work": "w"}, free("a"), free("b")]),
    );
    expect_error(&s, Some(Body), Some(5), Some(1), |k| {
        *k == K::WorkReused("w".into())
    });
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), ar("w"), {"op": "wait", "work": "w"}, {"op": "wait", "work": "w"}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(4), Some(0), |k| {
        *k == K::WorkNotPending("w".into())
    });
    // Dropping the handle is an accepted way to end it.
    valid(&sched(
        2,
        json!([alloc("a", 16), up("a"), ar("w"), {"op": "drop_work", "work": "w"}, free("a")]),
    ));
}

#[test]
fn values_beyond_the_exactness_bound() {
    // Each iteration doubles the values: the largest |a0 + a1| is 112, and 112 * 2^18 > 2^24.
    let s = with(
        with(
            sched(2, json!([{"op": "all_reduce", "t": "a"}])),
            "setup",
            json!([alloc("a", 16), up("a")]),
        ),
        "teardown",
        json!([free("a")]),
    );
    let s = with(s, "iterations", json!(20));
    let errors = invalid(&s);
    assert_eq!(
        errors.len(),
        1,
        "reported once, not per iteration: {errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.phase == Some(Body)
            && e.op_index == Some(0)
            && e.rank == Some(0)
            && matches!(
                e.kind,
                K::ExactnessExceeded {
                    iter: 18,
                    magnitude: 29_360_128,
                    ..
                }
            )),
        "{errors:?}"
    );
    // With max, values stay bounded however many iterations run.
    let s = with(
        with(
            sched(2, json!([{"op": "all_reduce", "t": "a", "reduce": "max"}])),
            "setup",
            json!([alloc("a", 16), up("a")]),
        ),
        "teardown",
        json!([free("a")]),
    );
    valid(&with(s, "iterations", json!(20)));
}

#[test]
fn access_before_wait_is_a_race() {
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "all_reduce", "t": "a", "async": true, "work": "w"}, {"op": "check", "t": "a"}, {"op": "wait", "work": "w"}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(3), Some(0), |k| {
        matches!(
            k,
            K::AccessBeforeWait {
                access: "reads",
                ..
            }
        )
    });
    // Writing the input of a pending all_gather.
    let s = sched(
        2,
        json!([alloc("i", 16), up("i"), alloc("o", 32), {"op": "all_gather", "in": "i", "out": "o", "async": true, "work": "w"}, {"op": "zero", "t": "i"}, {"op": "wait", "work": "w"}, free("i"), free("o")]),
    );
    expect_error(&s, Some(Body), Some(4), Some(1), |k| {
        matches!(
            k,
            K::AccessBeforeWait {
                access: "writes",
                ..
            }
        )
    });
    // Reading the input of a pending op is fine; so is a later op on the same communicator.
    valid(&sched(
        2,
        json!([
            alloc("i", 16), up("i"), alloc("o", 32), alloc("c", 16),
            {"op": "all_gather", "in": "i", "out": "o", "async": true, "work": "w"},
            {"op": "copy", "src": "i", "dst": "c"},
            {"op": "all_reduce", "t": "o"},
            {"op": "wait", "work": "w"}, {"op": "check", "t": "o"}, free("i"), free("o"), free("c")
        ]),
    ));
    // A dropped work never ends the race: reading needs a sync.
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "all_reduce", "t": "a", "async": true, "work": "w"}, {"op": "drop_work", "work": "w"}, {"op": "check", "t": "a"}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(4), Some(0), |k| {
        matches!(k, K::AccessBeforeWait { .. })
    });
}

#[test]
fn free_after_foreign_stream_use_needs_record_stream() {
    let body = |extra: serde_json::Value| {
        let mut ops = vec![
            alloc("a", 16),
            json!({"op": "set_stream", "stream": "side"}),
            up("a"),
            json!({"op": "set_stream", "stream": "compute"}),
        ];
        if !extra.is_null() {
            ops.push(extra);
        }
        ops.push(free("a"));
        with(sched(1, json!(ops)), "streams", json!(["side"]))
    };
    let last = 4;
    expect_error(&body(json!(null)), Some(Body), Some(last), Some(0), |k| {
        *k == K::MissingRecordStream {
            tensor: "a".into(),
            stream: "side".into(),
        }
    });
    valid(&body(
        json!({"op": "record_stream", "t": "a", "stream": "side"}),
    ));
    valid(&body(json!({"op": "sync"})));
    // A check on compute does not wait for the use on `side`.
    expect_error(
        &body(json!({"op": "check", "t": "a"})),
        Some(Body),
        Some(5),
        Some(0),
        |k| matches!(k, K::MissingRecordStream { .. }),
    );
}

#[test]
fn batch_errors_and_broadcast_root() {
    let s = sched(2, json!([{"op": "batch", "ops": []}]));
    expect_error(&s, Some(Body), Some(0), None, |k| *k == K::EmptyBatch);
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "batch", "ops": [{"op": "send", "t": "a", "peer": 1}, {"op": "recv", "t": "a", "peer": 1}], "ranks": [0]}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(2), None, |k| {
        *k == K::BatchTensorConflict("a".into())
    });
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "broadcast", "t": "a", "root": 2}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(2), Some(0), |k| {
        *k == K::RootOutsideGroup { root: 2, size: 2 }
    });
}
