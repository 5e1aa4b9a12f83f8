//! Helpers shared by the integration tests: build schedules as JSON, validate them, and
//! find an expected error.
#![allow(dead_code)]

use memreuse_conformance::schedule::{Phase, Schedule};
use memreuse_conformance::validate::{
    ValidSchedule, ValidationError, ValidationErrorKind, validate,
};
use serde_json::{Value, json};

/// A schedule of `world` ranks with `body` run once.
pub fn sched(world: usize, body: Value) -> Value {
    let mut v = json!({"format": "memreuse.schedule/1", "name": "t", "world_size": world});
    v["body"] = body;
    v
}

/// `v` with top-level field `key` set.
pub fn with(mut v: Value, key: &str, val: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.insert(key.to_owned(), val);
    }
    v
}

fn parse(v: &Value) -> Schedule {
    Schedule::from_json_str("t.json", &v.to_string()).unwrap_or_else(|e| panic!("must parse: {e}"))
}

/// Validates a schedule that must be valid.
pub fn valid(v: &Value) -> ValidSchedule {
    match validate("t.json", &parse(v)) {
        Ok(s) => s,
        Err(errors) => panic!(
            "must be valid, got:\n{}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// Validates a schedule that must be invalid; returns its errors.
pub fn invalid(v: &Value) -> Vec<ValidationError> {
    match validate("t.json", &parse(v)) {
        Ok(_) => panic!("must be invalid: {v}"),
        Err(errors) => errors,
    }
}

/// Asserts that `v` is invalid with an error at (phase, op, rank) whose kind matches.
pub fn expect_error(
    v: &Value,
    phase: Option<Phase>,
    op: Option<usize>,
    rank: Option<usize>,
    pred: impl Fn(&ValidationErrorKind) -> bool,
) {
    let errors = invalid(v);
    let found = errors.iter().any(|e| {
        e.phase == phase
            && e.op_index == op
            && e.rank == rank
            && pred(&e.kind)
            && e.file == "t.json"
    });
    assert!(
        found,
        "expected error at {phase:?} op {op:?} rank {rank:?}; got:\n{}",
        errors
            .iter()
            .map(|e| format!("{e} [{:?}]", e.kind))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `alloc` op JSON.
pub fn alloc(t: &str, elems: u64) -> serde_json::Value {
    json!({"op": "alloc", "t": t, "elems": elems})
}
/// `upload` op JSON (seed 1).
pub fn up(t: &str) -> serde_json::Value {
    json!({"op": "upload", "t": t, "seed": 1})
}
/// `free` op JSON.
pub fn free(t: &str) -> serde_json::Value {
    json!({"op": "free", "t": t})
}
