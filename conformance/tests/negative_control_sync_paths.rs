//! Through the binary, as `.ci/conformance` runs it (issue 26): on the new default
//! `--sync-collectives current-stream` (PyTorch 2.8+) and on the old `comm-stream` path,
//! the built-in suite in modes 0-3 and the negative control (`--mode unsafe`) on the mock:
//! every negative-control verdict matches its schedule's declaration (a declared reuse race
//! is caught), and every real mode passes with no race. The synchronous path must not hide
//! the races the negative control exists to show.

use std::process::Command;

use serde_json::Value;

/// Runs the built-in suite with `extra` flags; returns (exit code, stdout, runs).
fn suite_run(tag: &str, extra: &[&str]) -> (Option<i32>, String, Vec<Value>) {
    let json = std::env::temp_dir().join(format!(
        "memreuse-negative-control-{tag}-{}.json",
        std::process::id()
    ));
    let o = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(["run", "--quiet", "--backend", "mock", "--mode", "all"])
        .args(["--mode", "unsafe", "--json"])
        .arg(&json)
        .args(extra)
        .env_remove("MEMREUSE_ALLOC_CONF")
        .env_remove("PYTORCH_ALLOC_CONF")
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_else(|e| {
        panic!(
            "{tag}: report: {e}\n{stdout}{}",
            String::from_utf8_lossy(&o.stderr)
        )
    }))
    .expect("json");
    let _ = std::fs::remove_file(&json);
    (
        o.status.code(),
        stdout,
        report["runs"].as_array().expect("runs").clone(),
    )
}

/// Asserts the verdicts of one suite run; returns how many declared races were caught.
fn check(tag: &str, extra: &[&str]) -> usize {
    let (code, stdout, runs) = suite_run(tag, extra);
    assert_eq!(
        code,
        Some(0),
        "{tag}: every verdict matches and every mode passes\n{stdout}"
    );
    let mut caught = 0;
    let mut judged = 0;
    for r in &runs {
        let what = format!("{tag}: {} mode {}", r["schedule"], r["mode"]);
        if r["mode"] == "unsafe" {
            judged += 1;
            let expects = r["negative_control_expects_reuse_race"]
                .as_bool()
                .unwrap_or_else(|| panic!("{what}: declared: {r}"));
            let want = if expects { "caught" } else { "clean" };
            assert_eq!(r["negative_control_verdict"], want, "{what}: {r}");
            caught += usize::from(expects);
        } else {
            assert_eq!(r["status"], "passed", "{what}: {r}");
            assert_eq!(r["races"]["reuse"], 0, "{what}: {r}");
            assert_eq!(r["races"]["schedule"], 0, "{what}: {r}");
        }
    }
    assert!(judged > 0, "{tag}: the negative control ran");
    assert!(
        stdout.contains(&format!(
            "negative control: {judged} of {judged} verdicts match"
        )),
        "{tag}: {stdout}"
    );
    caught
}

#[test]
fn the_negative_control_is_caught_on_both_synchronous_paths() {
    // The default (no flag) is the current-stream path; naming it changes nothing.
    let default = check("default", &[]);
    let current = check("current-stream", &["--sync-collectives", "current-stream"]);
    let comm = check("comm-stream", &["--sync-collectives", "comm-stream"]);
    assert!(default > 0, "some schedule declares a reuse race");
    assert_eq!(default, current);
    assert_eq!(
        current, comm,
        "the negative control catches the same races on both paths"
    );
}

#[test]
fn the_negative_control_is_caught_by_the_adaptor_and_deterministically_on_the_new_path() {
    let adaptor = check("adaptor", &["--race-check", "adaptor"]);
    let deterministic = check("deterministic", &["--deterministic", "--seed", "7"]);
    assert!(adaptor > 0 && adaptor == deterministic);
}
