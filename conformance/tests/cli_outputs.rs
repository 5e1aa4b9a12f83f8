//! Where `run` and `generate` put their files, what `run` prints while it works, and the
//! smaller command-line points of issue 18 (list, help, errors that name the path).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/e1-ddp-buckets.json"
);

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "memreuse-cli-outputs-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Runs the binary with `CARGO_TARGET_DIR` set to `target`, stdout and stderr piped.
fn cli_in(target: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(args)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .expect("runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn one_run<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--backend", "mock", "--mode", "2", "--schedule", EXAMPLE];
    args.extend_from_slice(extra);
    args
}

#[test]
fn json_alone_writes_only_that_file() {
    let target = tmp("json-alone");
    let json = target.join("nested/dir/r.json");
    let o = cli_in(
        &target,
        &one_run(&["--quiet", "--json", json.to_str().unwrap()]),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["runs"][0]["status"], "passed");
    assert!(
        !target.join("conformance").exists(),
        "no default report directory with --json alone"
    );
    let leftovers: Vec<_> = std::fs::read_dir(json.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");
}

#[test]
fn default_directory_is_under_cargo_target_dir_with_page_and_summary() {
    let target = tmp("default-dir");
    let o = cli_in(&target, &one_run(&[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let dir = target.join("conformance");
    assert!(dir.join("report.json").exists());
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains("PASS: 1 runs as expected"), "verdict block");
    assert!(
        page.contains("href=\"#s-e1-ddp-buckets\""),
        "table of contents"
    );
    assert!(page.contains("<dt>command</dt>"), "metadata");
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(
        summary.contains("**PASS: 1 runs as expected**"),
        "{summary}"
    );
    assert!(
        summary.contains("| mock | 2 | 1 | 0 | 0 | 0 |"),
        "{summary}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&dir.join("summary.md").display().to_string()),
        "the report line names the files: {stdout}"
    );
}

#[test]
fn piped_output_gets_one_progress_line_per_finished_run() {
    let target = tmp("progress");
    let report = target.join("r");
    let o = cli_in(
        &target,
        &[
            "--backend",
            "mock",
            "--mode",
            "0",
            "--mode",
            "2",
            "--schedule",
            EXAMPLE,
            "--report",
            report.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with("[1/2] e1-ddp-buckets mock mode 0: passed ("),
        "{stderr}"
    );
    assert!(lines[1].starts_with("[2/2] e1-ddp-buckets mock mode 2: passed ("));
    let quiet = cli_in(
        &target,
        &one_run(&["--quiet", "--report", report.to_str().unwrap()]),
    );
    assert!(
        !String::from_utf8_lossy(&quiet.stderr).contains("[1/1]"),
        "--quiet prints no progress"
    );
}

#[test]
fn a_report_path_that_cannot_be_written_is_named_and_exits_1() {
    let target = tmp("unwritable");
    let file = target.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let o = cli_in(&target, &one_run(&["--report", file.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("could not write the report: {}", file.display())),
        "{stderr}"
    );
}

#[test]
fn generate_creates_parents_and_takes_a_name() {
    let target = tmp("generate");
    let out = target.join("a/b/ddp.json");
    let out_s = out.to_str().unwrap();
    let o = cli_in(
        &target,
        &["generate", "ddp", "--name", "my-ddp", "-o", out_s],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let schedule: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(schedule["name"], "my-ddp");
    let o = cli_in(&target, &["validate", out_s]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = cli_in(&target, &["generate", "ddp", "--name", " ", "-o", out_s]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--name must not be empty"),
        "{}",
        text(&o)
    );
}

#[test]
fn list_names_suites_and_their_schedules_and_help_explains_seed() {
    let target = tmp("list");
    let o = cli_in(&target, &["list"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    for suite in ["builtin", "single-device", "rfc"] {
        assert!(out.contains(&format!("  {suite} ")), "{suite}: {out}");
    }
    // Each suite's schedules, one line each, described from the schedule itself.
    let single = out
        .split("  single-device ")
        .nth(1)
        .and_then(|rest| rest.split("  rfc ").next())
        .expect("a single-device block");
    assert!(
        single.contains("4 schedules, 16 runs per backend in modes 0-3:")
            && single.contains("ddp-ws1: 1 ranks, ")
            && single.contains("fsdp-ws1: 1 ranks, "),
        "single-device schedules: {out}"
    );
    assert!(out.contains("e1-ddp-buckets"), "{out}");
    let help = text(&cli_in(&target, &["run", "--help"]));
    assert!(help.contains("interleaving"), "--seed help: {help}");
    assert!(help.contains("summary.md"), "--report help: {help}");
    assert!(!help.contains("HTML/Markdown"), "{help}");
}

#[test]
fn a_run_killed_part_way_keeps_the_runs_that_finished() {
    use std::io::BufRead;
    let target = tmp("killed");
    let report = target.join("r");
    let mut child = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(["--backend", "mock", "--mode", "0", "--report"])
        .arg(&report)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    let stderr = child.stderr.take().expect("stderr");
    // The line of run 2 is printed after the report of run 1 was renamed into place.
    let seen = std::io::BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("[2/"));
    child.kill().expect("kill");
    let _ = child.wait();
    assert!(seen, "progress lines on a pipe");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("report.json")).unwrap())
            .expect("a whole JSON document");
    assert!(!json["runs"].as_array().unwrap().is_empty());
    assert!(report.join("report.html").exists());
}
