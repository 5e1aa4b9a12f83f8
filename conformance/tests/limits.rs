//! The limits stage (docs/schedule-format.md "Limits"): work is bounded before it is
//! done, every rejection names the limit, and the cost estimate it relies on equals a
//! brute-force expansion of the program.

mod common;

use common::{alloc, expect_error, free, sched, up, valid, with};
use memreuse_conformance::schedule::Phase::Body;
use memreuse_conformance::schedule::{
    MAX_DELAY_TOTAL_US, MAX_DELAY_US, MAX_ELEMENT_OPS, MAX_STEPS, MAX_THREADS, OpKind, Schedule,
};
use memreuse_conformance::validate::{ValidationErrorKind as K, cost};
use serde_json::{Value, json};

fn parse(v: &Value) -> Schedule {
    Schedule::from_json_str("t.json", &v.to_string()).expect("parses")
}

#[test]
fn huge_iteration_counts_are_rejected_without_walking_them() {
    // Before: the live-peak walk ran all 2^32 - 1 iterations before the limit was checked
    // (22 s for an empty body, hours for this one).
    let ops: Vec<Value> = (0..1000).map(|_| json!({"op": "sync"})).collect();
    let s = with(sched(1024, json!(ops)), "iterations", json!(u32::MAX));
    expect_error(&s, None, None, None, |k| {
        matches!(
            k,
            K::LimitExceeded {
                what: "iterations",
                ..
            }
        )
    });
    expect_error(
        &s,
        None,
        None,
        None,
        |k| matches!(k, K::LimitExceeded { value, limit, .. } if *limit == MAX_STEPS && *value > MAX_STEPS),
    );
    let empty = with(sched(1, json!([])), "iterations", json!(u32::MAX));
    expect_error(&empty, None, None, None, |k| {
        matches!(
            k,
            K::LimitExceeded {
                what: "iterations",
                ..
            }
        )
    });
}

#[test]
fn element_operations_are_bounded() {
    // 50 zeros of 2^26 elements x 10,000 iterations: within every other limit, ~10^5 s of
    // reference interpreter before (the case had 100 zeros).
    let mut body: Vec<Value> = (0..50).map(|_| json!({"op": "zero", "t": "a"})).collect();
    body.push(json!({"op": "check", "t": "a"}));
    let s = with(
        with(
            with(sched(1, json!(body)), "iterations", json!(10_000)),
            "setup",
            json!([alloc("a", 1 << 26)]),
        ),
        "teardown",
        json!([free("a")]),
    );
    expect_error(&s, None, None, None, |k| {
        matches!(k, K::LimitExceeded { what, value, limit }
            if what.starts_with("element operations") && *limit == MAX_ELEMENT_OPS
                && *value == (51 * 10_000 + 1) * (1 << 26))
    });
}

#[test]
fn delays_are_bounded_per_op_and_per_rank() {
    // Before: u64::MAX validated, blocked 120 s per mode and reported "passed".
    let s = sched(1, json!([{"op": "delay", "us": u64::MAX}]));
    expect_error(
        &s,
        Some(Body),
        Some(0),
        None,
        |k| matches!(k, K::LimitExceeded { what: "delay us", limit, .. } if *limit == MAX_DELAY_US),
    );
    let s = with(
        sched(2, json!([{"op": "delay", "us": MAX_DELAY_US}])),
        "iterations",
        json!(11),
    );
    expect_error(&s, None, None, None, |k| {
        matches!(k, K::LimitExceeded { what: "delay microseconds of one rank", value, limit }
            if *value == 11 * MAX_DELAY_US && *limit == MAX_DELAY_TOTAL_US)
    });
    valid(&with(
        sched(2, json!([{"op": "delay", "us": MAX_DELAY_US}])),
        "iterations",
        json!(10),
    ));
}

#[test]
fn threads_are_bounded() {
    // 1024 ranks x 4 single-rank groups: 1024 x (2 + 2 x 5) = 12,288 threads.
    let lists: Vec<Vec<usize>> = (0..1024).map(|r| vec![r]).collect();
    let groups: serde_json::Map<String, Value> =
        (0..4).map(|g| (format!("g{g}"), json!(lists))).collect();
    let s = with(sched(1024, json!([])), "groups", Value::Object(groups));
    expect_error(&s, None, None, None, |k| {
        matches!(k, K::LimitExceeded { what: "threads of a replay", value: 12_288, limit }
            if *limit == MAX_THREADS)
    });
}

/// Brute force: every rank's expanded program, op by op.
fn expanded(s: &Schedule) -> (u64, u64, u64) {
    let (mut ops, mut peak, mut checked) = (0u64, 0u64, 0u64);
    for rank in 0..s.world_size {
        let mut sizes = std::collections::HashMap::new();
        let mut now = 0u64;
        for step in s.rank_steps(rank) {
            let size = |t: &str| sizes.get(t).copied().unwrap_or(0u64);
            match &step.op.kind {
                OpKind::Alloc { t, elems, .. } => {
                    now -= sizes.insert(t.clone(), *elems).unwrap_or(0) * 4;
                    now += elems * 4;
                    peak = peak.max(now);
                    ops += elems;
                }
                OpKind::Free { t } => now -= sizes.remove(t).unwrap_or(0) * 4,
                OpKind::Upload { t, .. } | OpKind::Zero { t } | OpKind::AllReduce { t, .. } => {
                    ops += size(t);
                }
                OpKind::Check { t } => {
                    ops += size(t);
                    checked += size(t) * 4;
                }
                _ => {}
            }
        }
    }
    (ops, peak, checked)
}

#[test]
fn cost_equals_the_expanded_program() {
    // Body re-allocations of different sizes, a tensor that lives across iterations and
    // one allocated in the body and freed in the teardown.
    for iterations in [0u32, 1, 2, 3, 7] {
        let s = with(
            with(
                with(
                    sched(
                        3,
                        json!([
                            alloc("b", 32),
                            up("b"),
                            {"op": "all_reduce", "t": "b"},
                            {"op": "check", "t": "b"},
                            free("b"),
                            alloc("b", 48),
                            {"op": "zero", "t": "b"},
                            {"op": "check", "t": "a"},
                            free("b"),
                            alloc("c", 16),
                            free("c"),
                            alloc("c", 64),
                        ]),
                    ),
                    "iterations",
                    json!(iterations),
                ),
                "setup",
                json!([alloc("a", 16), up("a"), alloc("c", 8)]),
            ),
            "teardown",
            json!([free("a"), free("c")]),
        );
        let parsed = parse(&s);
        let c = cost(&parsed);
        let (ops, peak, checked) = expanded(&parsed);
        assert_eq!(
            (c.element_ops, c.live_peak_bytes, c.checked_bytes),
            (ops, peak, checked),
            "iterations {iterations}"
        );
    }
}

/// Every built-in suite (the README's RFC experiment included) is inside the limits: a
/// limit that refuses the project's own schedules is a broken limit.
#[test]
fn every_built_in_suite_validates() {
    for (name, _) in memreuse_conformance::suite::SUITES {
        if let Err(e) = memreuse_conformance::suite::suite(name) {
            panic!("suite {name}: {e}");
        }
    }
}
