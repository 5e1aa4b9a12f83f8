//! Through the binary (issue 26): `--sync-collectives` chooses where synchronous
//! collectives run. On `current-stream` (the default, PyTorch 2.8+) they take no
//! `record_stream`, so an FSDP schedule (whose backward all_gather is synchronous) makes
//! fewer `record_stream` calls than on `comm-stream` (PyTorch <= 2.7, torch_npu), with the
//! same digest; a value that names neither path is a usage error.

use std::path::PathBuf;
use std::process::{Command, Output};

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(args)
        .env_remove("MEMREUSE_ALLOC_CONF")
        .env_remove("PYTORCH_ALLOC_CONF")
        .output()
        .expect("runs")
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("memreuse-sync-path-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// (record_stream calls, reuse events, digest) of the one run in `json`.
fn figures(json: &PathBuf) -> (u64, u64, String) {
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).expect("report")).expect("json");
    let run = &report["runs"][0];
    assert_eq!(run["status"], "passed", "{run}");
    (
        run["record_stream_calls"]
            .as_u64()
            .expect("record_stream_calls"),
        run["reuse_events_created"]
            .as_u64()
            .expect("reuse_events_created"),
        run["digest"].as_str().expect("digest").to_owned(),
    )
}

#[test]
fn synchronous_collectives_on_the_current_stream_take_no_record_stream() {
    let d = dir();
    let schedule = d.join("fsdp.json");
    let s = schedule.to_str().expect("utf-8");
    let out = cli(&[
        "generate",
        "fsdp",
        "--layers",
        "2",
        "--elems",
        "256",
        "--iterations",
        "1",
        "-o",
        s,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut seen = Vec::new();
    for path in ["current-stream", "comm-stream"] {
        let json = d.join(format!("{path}.json"));
        let out = cli(&[
            "run",
            "--quiet",
            "--deterministic",
            "--backend",
            "mock",
            "--mode",
            "1",
            "--schedule",
            s,
            "--sync-collectives",
            path,
            "--json",
            json.to_str().expect("utf-8"),
        ]);
        assert!(
            out.status.success(),
            "{path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        seen.push(figures(&json));
    }
    let (current, comm) = (&seen[0], &seen[1]);
    assert_eq!(current.2, comm.2, "the same results on both paths");
    assert!(
        current.0 < comm.0,
        "record_stream calls: current {} vs comm {}",
        current.0,
        comm.0
    );
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_path_that_names_neither_is_a_usage_error() {
    let out = cli(&[
        "run",
        "--backend",
        "mock",
        "--sync-collectives",
        "side-stream",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("current-stream") && err.contains("comm-stream"),
        "{err}"
    );
}
