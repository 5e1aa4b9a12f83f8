//! Through the binary (issue 26): `run --smallest-device` finds, per run, the smallest
//! device capacity in 2 MiB steps on which the run passes (the found capacity passes and
//! 2 MiB less fails, checked by running the binary again with `--device-memory`); a run
//! that fails at its own capacity and a skipped run are reported, not searched;
//! `--device-memory` is the run's capacity and the top of the search; `--mode unsafe` is
//! refused; without the flag the report has no smallest-device field.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const MIB: u64 = 1 << 20;

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(args)
        .env_remove("MEMREUSE_ALLOC_CONF")
        .env_remove("PYTORCH_ALLOC_CONF")
        .output()
        .expect("runs")
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "memreuse-smallest-device-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A small FSDP schedule (1 MiB tensors), optionally on a device of `device` bytes.
fn schedule(d: &Path, device: Option<&str>) -> PathBuf {
    let path = d.join("fsdp.json");
    let mut args = vec![
        "generate",
        "fsdp",
        "--layers",
        "2",
        "--elems",
        "262144",
        "--iterations",
        "1",
        "-o",
        path.to_str().expect("utf-8 path"),
    ];
    if let Some(device) = device {
        args.extend(["--device-memory", device]);
    }
    let o = cli(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    path
}

/// Runs `args` with a JSON report and returns (exit code, the report's runs).
fn run_json(d: &Path, args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let json = d.join("report.json");
    let _ = std::fs::remove_file(&json);
    let mut all = vec![
        "run",
        "--quiet",
        "--json",
        json.to_str().expect("utf-8 path"),
    ];
    all.extend_from_slice(args);
    let o = cli(&all);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_else(|e| {
        panic!(
            "report: {e}\n{stdout}{}",
            String::from_utf8_lossy(&o.stderr)
        )
    }))
    .expect("json");
    let runs = report["runs"].as_array().expect("runs").clone();
    (o.status.code(), runs, stdout)
}

#[test]
fn the_found_capacity_passes_and_two_mib_less_fails() {
    let d = dir("found");
    let s = schedule(&d, None);
    let s = s.to_str().expect("utf-8 path");
    let (code, runs, stdout) = run_json(
        &d,
        &[
            "--schedule",
            s,
            "--backend",
            "mock",
            "--mode",
            "2",
            "--smallest-device",
        ],
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(runs.len(), 1, "probe runs are not listed: {runs:?}");
    let run = &runs[0];
    assert_eq!(run["status"], "passed", "{run}");
    let found = run["smallest_device_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("a capacity was found: {run}"));
    assert_eq!(found % (2 * MIB), 0, "2 MiB steps: {found}");
    assert!(
        found >= run["live_peak_bytes"].as_u64().expect("live peak"),
        "{run}"
    );
    assert!(
        stdout.contains("smallest device") && stdout.contains("fits at"),
        "{stdout}"
    );
    for (bytes, passes, exit) in [(found, true, 0), (found - 2 * MIB, false, 1)] {
        let cap = bytes.to_string();
        let (code, runs, stdout) = run_json(
            &d,
            &[
                "--schedule",
                s,
                "--backend",
                "mock",
                "--mode",
                "2",
                "--deterministic",
                "--device-memory",
                &cap,
            ],
        );
        assert_eq!(code, Some(exit), "{bytes}: {stdout}");
        assert_eq!(
            runs[0]["status"] == "passed",
            passes,
            "{bytes}: {}",
            runs[0]
        );
        assert!(
            runs[0].get("smallest_device_bytes").is_none(),
            "no field without the flag: {}",
            runs[0]
        );
    }
}

#[test]
fn device_memory_is_the_runs_capacity_and_the_top_of_the_search() {
    let d = dir("cap");
    let s = schedule(&d, None);
    let (code, runs, stdout) = run_json(
        &d,
        &[
            "--schedule",
            s.to_str().expect("utf-8 path"),
            "--backend",
            "mock",
            "--mode",
            "0",
            "--device-memory",
            "64MiB",
            "--smallest-device",
        ],
    );
    assert_eq!(code, Some(0), "{stdout}");
    let run = &runs[0];
    let found = run["smallest_device_bytes"].as_u64().expect("found");
    assert!(found <= 64 * MIB, "{run}");
    let note = run["smallest_device_note"].as_str().expect("note");
    assert!(
        note.contains("below 64.0 MiB, the run's capacity"),
        "{note}"
    );
}

#[test]
fn a_run_that_fails_at_its_own_capacity_is_reported_not_searched() {
    let d = dir("fails");
    // Below the schedule's live peak: nothing fits.
    let s = schedule(&d, Some("2MiB"));
    let (code, runs, stdout) = run_json(
        &d,
        &[
            "--schedule",
            s.to_str().expect("utf-8 path"),
            "--backend",
            "mock",
            "--mode",
            "1",
            "--smallest-device",
        ],
    );
    assert_eq!(code, Some(1), "{stdout}");
    let run = &runs[0];
    assert_ne!(run["status"], "passed", "{run}");
    assert!(
        run["smallest_device_bytes"].is_null(),
        "present, null: {run}"
    );
    let note = run["smallest_device_note"].as_str().expect("note");
    assert!(
        note.starts_with("not searched: the run does not pass at its own capacity"),
        "{note}"
    );
    assert!(stdout.contains("not searched"), "{stdout}");
}

#[test]
fn a_skipped_run_is_reported_not_searched() {
    let d = dir("skipped");
    let s = schedule(&d, None);
    // `list` says whether CUDA is linked and usable here; a skipped run is what is tested.
    let (code, runs, stdout) = run_json(
        &d,
        &[
            "--schedule",
            s.to_str().expect("utf-8 path"),
            "--backend",
            "cuda",
            "--mode",
            "0",
            "--smallest-device",
        ],
    );
    let run = &runs[0];
    if run["status"] != "skipped" {
        // CUDA is linked and usable: nothing to test here.
        return;
    }
    assert_eq!(code, Some(0), "{stdout}");
    assert!(run["smallest_device_bytes"].is_null(), "{run}");
    assert_eq!(
        run["smallest_device_note"],
        "not searched: the run was skipped"
    );
}

#[test]
fn the_negative_control_is_refused() {
    for modes in [&["unsafe"][..], &["0", "unsafe"][..]] {
        let mut args = vec!["run", "--quiet", "--backend", "mock", "--smallest-device"];
        for m in modes {
            args.extend(["--mode", m]);
        }
        let o = cli(&args);
        assert_eq!(o.status.code(), Some(2), "{modes:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("--smallest-device cannot search --mode unsafe")
                && err.contains("valid with it"),
            "{err}"
        );
    }
}
