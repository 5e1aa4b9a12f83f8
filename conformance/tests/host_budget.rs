//! The host budget holds: the largest accepted schedule of each kind (ranks, live
//! tensors, checked values, steps) runs, or validates, under `ulimit -v` of the budget
//! plus a margin, and one step over it is rejected before anything runs. Before, valid
//! schedules aborted the process (`world_size` 1024: "failed to allocate an alternative
//! stack").

use std::path::{Path, PathBuf};
use std::process::Command;

use memreuse_conformance::schedule::{MAX_HOST_BYTES, Schedule};
use memreuse_conformance::validate::{ValidationErrorKind as K, cost, validate};
use serde_json::{Value, json};

/// Address space beyond the budget: the binary, its libraries, allocator arenas.
const MARGIN_BYTES: u64 = 1 << 30;

fn write(name: &str, v: &Value) -> (PathBuf, Schedule) {
    let dir = std::env::temp_dir().join(format!("memreuse-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, v.to_string()).expect("write");
    let s = Schedule::from_json_str(name, &v.to_string()).expect("parses");
    (path, s)
}

/// Runs the binary under `ulimit -v` of the budget plus the margin; returns (exit code,
/// output).
fn limited(args: &[&str]) -> (Option<i32>, String) {
    let kib = (MAX_HOST_BYTES + MARGIN_BYTES) / 1024;
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$@\""))
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(args)
        .output()
        .expect("runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), text)
}

fn run_limited(path: &Path) {
    let report = path.with_extension("report");
    let (code, text) = limited(&[
        "run",
        "--backend",
        "mock",
        "--mode",
        "0",
        "--quiet",
        "--schedule",
        &path.to_string_lossy(),
        "--report",
        &report.to_string_lossy(),
    ]);
    assert_eq!(code, Some(0), "{}: {text}", path.display());
    assert!(text.contains("1 passed"), "{text}");
}

fn over_budget(s: &Schedule) {
    let errors = validate("t", s).expect_err("over the budget");
    assert!(
        errors
            .iter()
            .any(|e| matches!(e.kind, K::LimitExceeded { what, .. }
            if what.starts_with("estimated host bytes"))),
        "{errors:?}"
    );
}

fn tensors(world: usize, count: usize, checks: usize) -> Value {
    let mut body = Vec::new();
    for i in 0..count {
        body.push(json!({"op": "alloc", "t": format!("t{i}"), "elems": 1 << 26}));
        body.push(json!({"op": "zero", "t": format!("t{i}")}));
    }
    for _ in 0..checks {
        body.push(json!({"op": "check", "t": "t0"}));
    }
    for i in 0..count {
        body.push(json!({"op": "free", "t": format!("t{i}")}));
    }
    json!({"format": "memreuse.schedule/1", "name": "budget", "world_size": world,
           "device_memory": 4u64 << 30, "body": body})
}

#[test]
fn the_largest_world_runs_under_the_budget() {
    let (path, s) = write(
        "world",
        &json!({"format": "memreuse.schedule/1", "name": "world", "world_size": 1024,
                "body": [{"op": "barrier"}]}),
    );
    assert!(cost(&s).host_bytes() <= MAX_HOST_BYTES);
    run_limited(&path);
}

#[test]
fn the_largest_live_tensors_run_under_the_budget() {
    // Three 256 MiB tensors (x 2 copies) are accepted; a fourth is over the budget.
    let (path, s) = write("tensors", &tensors(1, 3, 0));
    assert!(cost(&s).host_bytes() <= MAX_HOST_BYTES);
    over_budget(&write("tensors4", &tensors(1, 4, 0)).1);
    run_limited(&path);
}

#[test]
fn the_largest_checked_values_run_under_the_budget() {
    // One check of 256 MiB (held about four times) is accepted; a second is over.
    let (path, s) = write("checks", &tensors(1, 1, 1));
    assert!(cost(&s).host_bytes() <= MAX_HOST_BYTES);
    over_budget(&write("checks2", &tensors(1, 1, 2)).1);
    run_limited(&path);
}

#[test]
fn the_largest_program_validates_under_the_budget() {
    // 1,000,000 steps: 100 ranks x 10,000 iterations of one barrier.
    let (path, s) = write(
        "steps",
        &json!({"format": "memreuse.schedule/1", "name": "steps", "world_size": 100,
                "iterations": 10_000, "body": [{"op": "barrier"}]}),
    );
    assert!(cost(&s).host_bytes() <= MAX_HOST_BYTES);
    let (code, text) = limited(&["validate", &path.to_string_lossy()]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("valid"), "{text}");
}
