//! Through the binary: the runner judges the negative control itself (verdicts and exit
//! status), `--race-check` says who judged, and `--require-backend` turns "skipped because
//! unavailable" into a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(args)
        .output()
        .expect("runs")
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("memreuse-verdicts-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn runs(report_dir: &Path) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(report_dir.join("report.json")).expect("report"),
    )
    .expect("json");
    v["runs"].as_array().expect("runs").clone()
}

#[test]
fn the_adaptor_alone_judges_the_negative_control_and_the_runner_exits_0() {
    let d = dir("adaptor");
    let o = cli(&[
        "--quiet",
        "--suite",
        "single-device",
        "--mode",
        "unsafe",
        "--backend",
        "mock",
        "--race-check",
        "adaptor",
        "--report",
        &d.to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("verdicts match the declarations"),
        "{}",
        text(&o)
    );
    let runs = runs(&d);
    let mut caught = 0;
    for r in &runs {
        assert_eq!(r["race_checker"], "adaptor", "{r}");
        let verdict = r["negative_control_verdict"].as_str().expect("a verdict");
        let expected = r["negative_control_expects_reuse_race"].as_bool().unwrap();
        assert_eq!(verdict, if expected { "caught" } else { "clean" }, "{r}");
        caught += usize::from(expected);
    }
    assert!(caught > 0, "some schedule declares a reuse race");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn an_unjudged_negative_control_fails_and_auto_uses_the_native_detector() {
    let d = dir("off");
    let base = [
        "--quiet",
        "--suite",
        "single-device",
        "--mode",
        "unsafe",
        "--backend",
        "mock",
    ];
    // Nobody checks races: declared reuse races cannot be confirmed, exit 1.
    let mut args = base.to_vec();
    args.extend(["--race-check", "off", "--report"]);
    let report = d.to_string_lossy().into_owned();
    args.push(&report);
    let o = cli(&args);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    for r in runs(&d) {
        assert!(r["races"].is_null(), "{r}");
        assert_eq!(r["race_checker"], "none");
        assert!(r.get("negative_control_verdict").is_none(), "{r}");
    }
    let mut args = base.to_vec();
    args.extend(["--report", &report]);
    let o = cli(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for r in runs(&d) {
        assert_eq!(r["race_checker"], "native", "{r}");
    }
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_schedule_without_a_declaration_keeps_failing_on_a_race() {
    let d = dir("undeclared");
    // A built-in schedule that races in the negative control, run from a file: files
    // declare nothing, so the race fails the run (exit 1) and no verdict is given.
    let entries = memreuse_conformance::suite::suite("single-device").unwrap();
    let entry = entries
        .iter()
        .find(|e| e.negative_control_finds_reuse_race)
        .expect("a racing schedule");
    let file = d.join("racy.json");
    std::fs::write(&file, entry.valid.schedule.to_json_string()).unwrap();
    let o = cli(&[
        "--quiet",
        "--schedule",
        &file.to_string_lossy(),
        "--mode",
        "unsafe",
        "--backend",
        "mock",
        "--race-check",
        "adaptor",
        "--report",
        &d.to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let runs = runs(&d);
    assert!(
        runs[0]["races"]["reuse"].as_u64().unwrap() > 0,
        "{}",
        runs[0]
    );
    assert!(runs[0].get("negative_control_verdict").is_none());
    assert!(runs[0].get("negative_control_expects_reuse_race").is_none());
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn require_backend_fails_when_the_backend_cannot_run() {
    let d = dir("require");
    let report = d.to_string_lossy().into_owned();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/e1-ddp-buckets.json"
    );
    let run = |flag: &str, name: &str| {
        cli(&[
            "--quiet",
            "--schedule",
            example,
            "--mode",
            "0",
            flag,
            name,
            "--report",
            &report,
        ])
    };
    // Without a driver (or without the feature), cuda is skipped: exit 0 when merely
    // selected, exit 1 with the reason when required.
    if memreuse::find_backend("cuda").is_none_or(|r| (r.device_count)().is_err()) {
        assert_eq!(run("--backend", "cuda").status.code(), Some(0));
        let o = run("--require-backend", "cuda");
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains("required backend `cuda`"), "{}", text(&o));
        for r in runs(&d) {
            assert_eq!(r["backend"], "cuda", "--require-backend implies --backend");
        }
    }
    let o = run("--require-backend", "mock");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let _ = std::fs::remove_dir_all(d);
}
