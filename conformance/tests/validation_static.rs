//! Validation errors that need no program order: header, names, ranks, sizes,
//! alignment, `async`/`work`, limits. Each asserts kind, phase, op index and rank.

mod common;

use common::{alloc, expect_error, free, invalid, sched, up, valid, with};
use memreuse_conformance::schedule::Phase::Body;
use memreuse_conformance::validate::ValidationErrorKind as K;
use serde_json::json;

#[test]
fn empty_world() {
    expect_error(&sched(0, json!([])), None, None, None, |k| {
        *k == K::EmptyWorld
    });
}

#[test]
fn user_group_named_world() {
    let s = with(sched(2, json!([])), "groups", json!({"world": [[0, 1]]}));
    expect_error(&s, None, None, None, |k| *k == K::ReservedGroupName);
}

#[test]
fn overlapping_lists_under_one_name() {
    let s = with(
        sched(3, json!([])),
        "groups",
        json!({"g": [[0, 1], [1, 2]]}),
    );
    expect_error(&s, None, None, None, |k| {
        *k == K::OverlappingGroupLists {
            group: "g".into(),
            rank: 1,
        }
    });
    // Overlap across different names is fine.
    valid(&with(
        sched(3, json!([])),
        "groups",
        json!({"a": [[0, 1]], "b": [[1, 2]]}),
    ));
}

#[test]
fn group_rank_outside_world() {
    let s = with(sched(2, json!([])), "groups", json!({"g": [[0, 2]]}));
    expect_error(&s, None, None, None, |k| {
        *k == K::GroupRankOutsideWorld {
            group: "g".into(),
            rank: 2,
        }
    });
}

#[test]
fn op_ranks_outside_world() {
    let s = sched(2, json!([{"op": "sync", "ranks": [0, 5]}]));
    expect_error(&s, Some(Body), Some(0), None, |k| {
        *k == K::RankOutsideWorld(5)
    });
}

#[test]
fn invalid_stream_names() {
    let s = with(sched(1, json!([])), "streams", json!(["side", "compute"]));
    expect_error(&s, None, None, None, |k| {
        *k == K::InvalidStreamName("compute".into())
    });
}

#[test]
fn undefined_group_stream_tensor_work() {
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "all_reduce", "t": "a", "group": "nope"}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(2), None, |k| {
        *k == K::UndefinedGroup("nope".into())
    });
    let s = sched(1, json!([{"op": "set_stream", "stream": "side"}]));
    expect_error(&s, Some(Body), Some(0), None, |k| {
        *k == K::UndefinedStream("side".into())
    });
    let s = sched(2, json!([{"op": "zero", "t": "ghost"}]));
    expect_error(&s, Some(Body), Some(0), Some(1), |k| {
        *k == K::UndefinedTensor("ghost".into())
    });
    let s = sched(2, json!([{"op": "wait", "work": "w"}]));
    expect_error(&s, Some(Body), Some(0), Some(0), |k| {
        *k == K::UndefinedWork("w".into())
    });
}

#[test]
fn rank_not_in_group() {
    let s = with(
        sched(
            3,
            json!([alloc("a", 16), up("a"), {"op": "all_reduce", "t": "a", "group": "g"}, free("a")]),
        ),
        "groups",
        json!({"g": [[0, 1]]}),
    );
    expect_error(&s, Some(Body), Some(2), Some(2), |k| {
        *k == K::NotInGroup("g".into())
    });
    // Restricting the op to the group's ranks makes it valid.
    let s = with(
        sched(
            3,
            json!([alloc("a", 16), up("a"), {"op": "all_reduce", "t": "a", "group": "g", "ranks": [0, 1]}, free("a")]),
        ),
        "groups",
        json!({"g": [[0, 1]]}),
    );
    valid(&s);
}

#[test]
fn collective_size_mismatches() {
    let gather = sched(
        2,
        json!([alloc("i", 16), up("i"), alloc("o", 16), {"op": "all_gather", "in": "i", "out": "o"}, free("i"), free("o")]),
    );
    expect_error(&gather, Some(Body), Some(3), Some(0), |k| {
        matches!(
            k,
            K::SizeMismatch {
                op: "all_gather",
                ..
            }
        )
    });
    let rs = sched(
        2,
        json!([alloc("i", 32), up("i"), alloc("o", 32), {"op": "reduce_scatter", "in": "i", "out": "o"}, free("i"), free("o")]),
    );
    expect_error(&rs, Some(Body), Some(3), Some(1), |k| {
        matches!(
            k,
            K::SizeMismatch {
                op: "reduce_scatter",
                ..
            }
        )
    });
    let a2a = sched(
        2,
        json!([alloc("i", 33), up("i"), alloc("o", 33), {"op": "all_to_all", "in": "i", "out": "o"}, free("i"), free("o")]),
    );
    expect_error(&a2a, Some(Body), Some(3), Some(0), |k| {
        matches!(
            k,
            K::SizeMismatch {
                op: "all_to_all",
                ..
            }
        )
    });
    let copy = sched(
        1,
        json!([alloc("a", 32), up("a"), alloc("b", 16), {"op": "copy", "src": "a", "dst": "b"}, free("a"), free("b")]),
    );
    expect_error(&copy, Some(Body), Some(3), Some(0), |k| {
        matches!(k, K::SizeMismatch { op: "copy", .. })
    });
    let oob = sched(
        1,
        json!([alloc("a", 32), up("a"), alloc("b", 32), {"op": "copy", "src": "a", "dst": "b", "src_offset": 16, "elems": 32}, free("a"), free("b")]),
    );
    expect_error(&oob, Some(Body), Some(3), Some(0), |k| {
        matches!(k, K::SizeMismatch { op: "copy", .. })
    });
}

#[test]
fn misaligned_copy_and_copy_to_self() {
    let s = sched(
        1,
        json!([alloc("a", 64), up("a"), alloc("b", 64), {"op": "copy", "src": "a", "dst": "b", "dst_offset": 8, "elems": 16}, free("a"), free("b")]),
    );
    expect_error(&s, Some(Body), Some(3), None, |k| {
        *k == K::MisalignedCopy {
            field: "dst_offset",
            value: 8,
        }
    });
    let s = sched(
        1,
        json!([alloc("a", 64), up("a"), {"op": "copy", "src": "a", "dst": "a"}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(2), None, |k| {
        *k == K::CopyToSelf("a".into())
    });
}

#[test]
fn send_to_self_and_peer_outside_world() {
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "send", "t": "a", "peer": 1, "ranks": [1]}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(2), Some(1), |k| *k == K::SendToSelf);
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "send", "t": "a", "peer": 7, "ranks": [0]}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(2), None, |k| {
        *k == K::PeerOutsideWorld(7)
    });
}

#[test]
fn async_and_work_must_agree() {
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "all_reduce", "t": "a", "work": "w"}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(2), None, |k| *k == K::WorkOnSyncOp);
    let s = sched(
        2,
        json!([alloc("a", 16), up("a"), {"op": "all_reduce", "t": "a", "async": true}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(2), None, |k| *k == K::AsyncWithoutWork);
}

#[test]
fn limits_and_multiple_errors_are_all_reported() {
    let s = sched(
        1,
        json!([{"op": "alloc", "t": "a", "elems": 1u64 << 40}, free("a")]),
    );
    expect_error(&s, Some(Body), Some(0), None, |k| {
        matches!(k, K::LimitExceeded { what: "elems", .. })
    });
    let s = sched(
        2,
        json!([{"op": "set_stream", "stream": "x"}, {"op": "sync", "ranks": [9]}, {"op": "barrier", "group": "g"}]),
    );
    assert_eq!(invalid(&s).len(), 3);
    let text = invalid(&s)
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        text.contains("t.json: body op 1: ranks names rank 9"),
        "{text}"
    );
}

#[test]
fn expanded_program_size_is_limited() {
    let ops: Vec<serde_json::Value> = (0..1000).map(|_| json!({"op": "sync"})).collect();
    let s = with(sched(1024, json!(ops)), "iterations", json!(10));
    expect_error(&s, None, None, None, |k| {
        matches!(
            k,
            K::LimitExceeded {
                value: 10_240_000,
                ..
            }
        )
    });
}

#[test]
fn host_memory_limits() {
    const HOST: &str = "estimated host bytes (tensors, checked values x 4, steps, thread stacks)";
    // 16 ranks x 2^26 elements x 2 tensors x 4 bytes = 8 GiB of reference tensors.
    let s = sched(
        16,
        json!([
            alloc("a", 1 << 26),
            alloc("b", 1 << 26),
            free("a"),
            free("b")
        ]),
    );
    expect_error(&s, None, None, None, |k| {
        matches!(k, K::LimitExceeded { what: HOST, .. })
    });
    // 8 checks of 2^26 elements: 2 GiB of checked values, held about four times by a run.
    let s = with(
        with(
            sched(1, json!([{"op": "check", "t": "a"}])),
            "setup",
            json!([alloc("a", 1 << 26), {"op": "zero", "t": "a"}]),
        ),
        "teardown",
        json!([free("a")]),
    );
    expect_error(
        &with(s, "iterations", json!(8)),
        None,
        None,
        None,
        |k| matches!(k, K::LimitExceeded { what: HOST, value, .. } if *value > 8 << 30),
    );
}

#[test]
fn empty_group_lists() {
    let s = with(sched(2, json!([])), "groups", json!({"g": [[0], []]}));
    expect_error(&s, None, None, None, |k| {
        *k == K::EmptyGroupList { group: "g".into() }
    });
    let s = with(sched(2, json!([])), "groups", json!({"h": []}));
    expect_error(&s, None, None, None, |k| {
        *k == K::EmptyGroupList { group: "h".into() }
    });
}

#[test]
fn error_count_is_capped() {
    let ops: Vec<serde_json::Value> = (0..300)
        .map(|i| json!({"op": "zero", "t": format!("t{i}")}))
        .collect();
    let errors = invalid(&sched(1, json!(ops)));
    assert_eq!(errors.len(), memreuse_conformance::validate::MAX_ERRORS + 1);
    assert_eq!(
        errors.last().map(|e| &e.kind),
        Some(&K::TooManyErrors(
            memreuse_conformance::validate::MAX_ERRORS
        ))
    );
}
