//! Through the binary: every file `run` writes goes through core's one output writer
//! (issue 27): `/dev/null`, `/dev/stdout` and a FIFO are written through (once, at the
//! end) and never replaced, a symbolic link planted in `--trace-dir` is refused instead of
//! followed, an output that is the schedule is refused before anything runs, and two
//! runners on one report directory are kept apart by its lock. Also the label of a
//! negative-control run that errored.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/e1-ddp-buckets.json"
);

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "memreuse-runner-outputs-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(args)
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

/// One short run of the example schedule on the mock, plus `extra`.
fn one_run<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--backend", "mock", "--mode", "2", "--schedule", EXAMPLE];
    args.extend_from_slice(extra);
    args
}

#[test]
fn json_to_dev_null_passes_and_leaves_it_a_device() {
    use std::os::unix::fs::FileTypeExt;
    let o = cli(&one_run(&["--quiet", "--json", "/dev/null"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let meta = std::fs::symlink_metadata("/dev/null").expect("/dev/null");
    assert!(meta.file_type().is_char_device(), "/dev/null replaced");
}

#[test]
fn json_to_dev_stdout_and_dash_give_one_whole_document_on_stdout() {
    for target in ["/dev/stdout", "-"] {
        let o = cli(&one_run(&["--json", target]));
        assert_eq!(o.status.code(), Some(0), "{target}: {}", text(&o));
        // One document, written once at the end; the table went to standard error.
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "{target}: stdout is not one JSON document: {e}\n{}",
                text(&o)
            )
        });
        assert_eq!(report["runs"][0]["status"], "passed", "{target}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("PASS: "),
            "{target}: the verdict on stderr: {}",
            text(&o)
        );
    }
    assert!(
        !Path::new("-").exists(),
        "`-` is standard output, not a file"
    );
}

#[test]
fn json_to_a_fifo_is_written_through_once_and_the_fifo_stays() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tmp("fifo");
    let fifo = dir.join("report.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).expect("read the FIFO"))
    };
    // Several runs: a report rewritten after each would reach the FIFO more than once.
    let o = cli(&[
        "--backend",
        "mock",
        "--mode",
        "all",
        "--schedule",
        EXAMPLE,
        "--quiet",
        "--json",
        fifo.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let meta = std::fs::symlink_metadata(&fifo).expect("still there");
    assert!(meta.file_type().is_fifo(), "the FIFO was replaced");
    let bytes = reader.join().expect("reader");
    let report: serde_json::Value =
        serde_json::from_slice(&bytes).expect("one whole JSON document through the FIFO");
    assert_eq!(report["runs"].as_array().map(Vec::len), Some(4));
}

#[test]
fn a_symlink_planted_in_the_trace_dir_is_refused_not_followed() {
    let dir = tmp("trace-symlink");
    let traces = dir.join("traces");
    let trace_s = traces.to_str().unwrap();
    let o = cli(&one_run(&[
        "--quiet",
        "--json",
        "/dev/null",
        "--trace-dir",
        trace_s,
    ]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    let mut planted = 0;
    for e in std::fs::read_dir(&traces).unwrap() {
        let path = e.unwrap().path();
        if path.to_string_lossy().ends_with(".metrics.txt") {
            std::fs::remove_file(&path).unwrap();
            std::os::unix::fs::symlink(&victim, &path).unwrap();
            planted += 1;
        }
    }
    assert!(planted > 0, "metrics files were written");
    let o = cli(&one_run(&[
        "--quiet",
        "--json",
        "/dev/null",
        "--trace-dir",
        trace_s,
    ]));
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "keep me",
        "the link's target outside --trace-dir was overwritten: {}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("symbolic link"),
        "the refusal is reported: {}",
        text(&o)
    );
}

#[test]
fn a_symlinked_report_file_is_refused_before_anything_runs_and_kept() {
    let dir = tmp("report-symlink");
    let report = dir.join("r");
    std::fs::create_dir_all(&report).unwrap();
    let victim = dir.join("victim.json");
    std::fs::write(&victim, "keep me").unwrap();
    let link = report.join("report.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let o = cli(&one_run(&["--quiet", "--report", report.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("it is a symbolic link"),
        "{}",
        text(&o)
    );
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_symlink(), "the link was replaced");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
}

#[test]
fn an_output_that_is_the_schedule_is_refused_before_anything_runs() {
    let dir = tmp("same-as-input");
    let schedule = dir.join("s.json");
    std::fs::copy(EXAMPLE, &schedule).unwrap();
    let before = std::fs::read(&schedule).unwrap();
    let s = schedule.to_str().unwrap();
    let o = cli(&[
        "--backend",
        "mock",
        "--mode",
        "0",
        "--schedule",
        s,
        "--json",
        s,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("it is the input"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read(&schedule).unwrap(), before, "schedule kept");
    // Under another name (a hard link into the report directory) too.
    let report = dir.join("r");
    std::fs::create_dir_all(&report).unwrap();
    std::fs::hard_link(&schedule, report.join("summary.md")).unwrap();
    let o = cli(&[
        "--backend",
        "mock",
        "--mode",
        "0",
        "--schedule",
        s,
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(std::fs::read(&schedule).unwrap(), before, "schedule kept");
}

#[test]
fn a_second_runner_on_a_locked_report_directory_is_told_with_exit_2() {
    use std::io::BufRead;
    let dir = tmp("lock");
    let report = dir.join("r");
    let report_s = report.to_str().unwrap().to_owned();
    // The first runner: the whole built-in suite, long enough to be caught writing.
    let mut first = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(["--backend", "mock", "--mode", "all", "--report", &report_s])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns");
    let stderr = first.stderr.take().expect("stderr");
    let mut lines = std::io::BufReader::new(stderr)
        .lines()
        .map_while(Result::ok);
    // Run 2's line comes after run 1's report was written.
    let started = lines.any(|l| l.starts_with("[2/"));
    let second = cli(&one_run(&["--quiet", "--report", &report_s]));
    first.kill().expect("kill");
    let _ = first.wait();
    assert!(started, "the first runner printed its progress");
    assert_eq!(second.status.code(), Some(2), "{}", text(&second));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("being written by another runner"),
        "{}",
        text(&second)
    );
    // The first runner's files are its own: the second wrote nothing there.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("report.json")).unwrap())
            .unwrap();
    assert!(
        json["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["schedule"] != "e1-ddp-buckets"),
        "the second runner's run is not in the first one's report"
    );
    // The lock dies with its process.
    let again = cli(&one_run(&["--quiet", "--report", &report_s]));
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
}

#[test]
fn an_errored_negative_control_run_is_labelled_error_not_clean() {
    let dir = tmp("nc-error");
    let json = dir.join("r.json");
    // 1 MiB devices: every built-in schedule runs out of memory at its first allocation.
    let o = cli(&[
        "--backend",
        "mock",
        "--mode",
        "unsafe",
        "--device-memory",
        "1MiB",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = report["runs"].as_array().unwrap();
    let errored: Vec<_> = runs.iter().filter(|r| r["status"] == "error").collect();
    assert!(
        errored
            .iter()
            .any(|r| r["negative_control_expects_reuse_race"] == false),
        "a schedule that declares no race errored (the case once labelled clean)"
    );
    for r in &errored {
        assert_eq!(r["negative_control_verdict"], "error", "{r}");
    }
}
