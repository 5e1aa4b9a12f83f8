//! The command line: exit statuses and outputs of `list`, `generate`, `validate` and `run`.

use std::path::PathBuf;
use std::process::{Command, Output};

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(args)
        .output()
        .expect("runs")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memreuse-conformance-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn list_names_every_preset() {
    let o = cli(&["list"]);
    assert_eq!(o.status.code(), Some(0));
    for p in memreuse_conformance::generate::PRESETS {
        assert!(text(&o).contains(p.name), "{}", p.name);
    }
    // Backends: the mock is available; cuda is either not compiled in or, compiled in on
    // a machine without a driver, unavailable with the reason — never a panic.
    let out = text(&o);
    assert!(out.contains("mock     available"), "{out}");
    let cuda = out
        .lines()
        .find(|l| l.trim_start().starts_with("cuda"))
        .expect("a cuda line");
    assert!(
        cuda.contains("not compiled")
            || cuda.contains("unavailable")
            || cuda.contains("available,"),
        "{cuda}"
    );
    // Each suite is described by what it runs, computed from its schedules (the RFC
    // suite's hand-written "200 steps" went stale when it became 30).
    assert!(!out.contains("200 steps"), "{out}");
    for (name, _) in memreuse_conformance::suite::SUITES {
        let entries = memreuse_conformance::suite::suite(name).expect("builds");
        assert!(
            out.contains(&format!(
                "{} schedules, {} runs per backend in modes 0-3:",
                entries.len(),
                entries.len() * 4
            )),
            "{name}: {out}"
        );
        for e in &entries {
            let s = &e.valid.schedule;
            let head = format!(
                "{}: {} ranks, {} iterations of {} ops, tensors up to ",
                s.name,
                s.world_size,
                s.iterations,
                s.body.len()
            );
            assert!(out.contains(&head), "{head}: {out}");
        }
    }
    assert!(
        out.contains("oom-pressure: ") && out.contains("out of memory declared under `expandable_segments:True,expandable_segments_page_size_mb:20`"),
        "{out}"
    );
}

#[test]
fn generate_then_validate() {
    let out = tmp("fsdp.json");
    let o = cli(&[
        "generate",
        "fsdp",
        "--layers",
        "3",
        "--elems",
        "32",
        "--world-size",
        "2",
        "--iterations",
        "1",
        "--seed",
        "9",
        "-o",
        out.to_str().expect("utf8"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = cli(&[
        "validate",
        out.to_str().expect("utf8"),
        "tests/data/e1-ddp-buckets.json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("digest 9d15e2948ee6df12"), "{}", text(&o));
}

#[test]
fn validate_reports_each_error_on_its_own_line_and_exits_2() {
    let bad = tmp("bad.json");
    std::fs::write(&bad, r#"{"format":"memreuse.schedule/1","name":"b","world_size":2,"body":[{"op":"zero","t":"x"},{"op":"wait","work":"w","ranks":[0]}]}"#).expect("write");
    let o = cli(&["validate", bad.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(2));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(
        out.contains("body op 0 rank 1: undefined tensor \"x\""),
        "{out}"
    );
    let notjson = tmp("notjson.json");
    std::fs::write(&notjson, "{").expect("write");
    assert_eq!(
        cli(&["validate", notjson.to_str().expect("utf8")])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        cli(&["validate", "/nonexistent/x.json"]).status.code(),
        Some(2)
    );
}

#[test]
fn run_exit_statuses_follow_the_spec() {
    let dir = std::env::temp_dir().join(format!("memreuse-cli-run-{}", std::process::id()));
    let report = dir.to_string_lossy().into_owned();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/e1-ddp-buckets.json"
    );
    // A passing run: exit 0, the table, and both report files.
    let o = cli(&[
        "run",
        "--backend",
        "mock",
        "--mode",
        "2",
        "--schedule",
        example,
        "--report",
        &report,
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("e1-ddp-buckets"), "{}", text(&o));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["format"], "memreuse.report/1");
    assert_eq!(json["runs"][0]["digest"], "9d15e2948ee6df12");
    // One run whose reserved memory never moves: named in a sentence, not charted.
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains("PASS: 1 runs as expected"), "{page}");
    assert!(
        page.contains("Reserved memory flat throughout, not charted: mock mode 2"),
        "{page}"
    );
    // A backend that is not compiled in is skipped, not failed.
    let o = cli(&[
        "--backend",
        "cuda",
        "--mode",
        "0",
        "--schedule",
        example,
        "--report",
        &report,
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("skipped"), "{}", text(&o));
    // An invalid schedule or an unknown backend: usage error, nothing runs.
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"format":"memreuse.schedule/1","name":"x","world_size":0,"body":[]}"#,
    )
    .unwrap();
    assert_eq!(
        cli(&["--schedule", &bad.to_string_lossy(), "--report", &report])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        cli(&["--backend", "nope", "--report", &report])
            .status
            .code(),
        Some(2)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(cli(&["--mode", "5"]).status.code(), Some(2));
    assert_eq!(cli(&["--bogus"]).status.code(), Some(2));
    assert_eq!(cli(&["validate"]).status.code(), Some(2));
    assert_eq!(
        cli(&["generate", "nope", "-o", "x.json"]).status.code(),
        Some(2)
    );
    assert_eq!(cli(&["generate", "ddp"]).status.code(), Some(2));
    assert_eq!(cli(&["--help"]).status.code(), Some(0));
}

#[test]
fn a_closed_stdout_ends_validate_normally() {
    // `validate ... | head -1`: the reader goes away. Before: a panic, exit 101. 200
    // errors per file, 10 times, is more than a pipe buffers, so writes must fail.
    let ops: Vec<String> = (0..300)
        .map(|i| format!(r#"{{"op":"free","t":"t{i}"}}"#))
        .collect();
    let path = tmp("many-errors.json");
    std::fs::write(
        &path,
        format!(
            r#"{{"format":"memreuse.schedule/1","name":"n","world_size":1,"body":[{}]}}"#,
            ops.join(",")
        ),
    )
    .expect("write");
    let file = path.to_string_lossy().into_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .arg("validate")
        .args(std::iter::repeat_n(&file, 10))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("waits");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_closed_stdout_ends_run_normally() {
    // `run ... | head -1`: the table and the summary go to a pipe nobody reads. The run
    // takes longer than closing the pipe, so its first write fails. Before: exit 101.
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/e1-ddp-buckets.json"
    );
    let report = tmp("closed-stdout-report");
    let mut child = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args([
            "run",
            "--backend",
            "mock",
            "--mode",
            "0",
            "--schedule",
            example,
        ])
        .arg("--report")
        .arg(&report)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("waits");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        report.join("report.json").exists(),
        "the report is still written"
    );
}
