//! `--backend cuda` with the `cuda` feature: without a CUDA driver every run is reported as
//! skipped with the backend's "unavailable" reason, and the runner exits 0. Built only with
//! `--features cuda` (CI runs it; `scripts/gpu-check.sh` runs the suite on a GPU).
#![cfg(feature = "cuda")]

use std::process::Command;

#[test]
fn cuda_without_a_driver_is_skipped_with_the_reason_and_exit_0() {
    if memreuse::find_backend("cuda").is_some_and(|r| (r.device_count)().is_ok()) {
        println!("skipped: a CUDA driver is present (scripts/gpu-check.sh runs the suite there)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("memreuse-cuda-skip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(["--quiet", "--backend", "cuda", "--mode", "all", "--json"])
        .arg(&json)
        .output()
        .expect("runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("report")).expect("json");
    let runs = report["runs"].as_array().expect("runs");
    assert!(!runs.is_empty(), "{text}");
    for run in runs {
        assert_eq!(run["backend"], "cuda");
        assert_eq!(run["status"], "skipped", "{run}");
        let reason = run["skip_reason"].as_str().expect("skip_reason");
        assert!(
            reason.contains("unavailable") && reason.contains("libcuda"),
            "{reason}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Where a CUDA driver is found (a GPU, or CI's stand-in on `LD_LIBRARY_PATH`): the
/// built-in suite in mode 0 passes on `--backend cuda --require-backend cuda` with the
/// reference digests. Without one it skips, and fails instead with
/// `MEMREUSE_REQUIRE_DEVICE=1` (what backends/cuda/ci/standin.sh sets).
#[test]
fn cuda_runs_the_suite_where_a_driver_is_found() {
    match memreuse::find_backend("cuda").map(|r| (r.device_count)()) {
        Some(Ok(n)) if n > 0 => {}
        other => {
            memreuse_core::testing::skip_without_device(&format!("no CUDA driver: {other:?}"));
            return;
        }
    }
    let dir = std::env::temp_dir().join(format!("memreuse-cuda-suite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args([
            "--quiet",
            "--backend",
            "cuda",
            "--require-backend",
            "cuda",
            "--mode",
            "0",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("report")).expect("json");
    let runs = report["runs"].as_array().expect("runs");
    assert!(!runs.is_empty(), "{text}");
    for run in runs {
        assert_eq!(run["status"], "passed", "{run}");
        assert_eq!(run["digest"], run["reference_digest"], "{run}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
