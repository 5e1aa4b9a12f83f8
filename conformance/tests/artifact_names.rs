//! Artifact files and report blocks never collide: a name used twice in one run is a
//! usage error naming both files, file names are derived injectively, a file that cannot
//! be written fails the run, and `--snapshot-dir` must be a directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("memreuse-artifacts-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A one-rank schedule named `name`, written to `dir/file`.
fn schedule(dir: &Path, file: &str, name: &str) -> String {
    let path = dir.join(file);
    let text = serde_json::json!({
        "format": "memreuse.schedule/1", "name": name, "world_size": 1,
        "body": [{"op": "alloc", "t": "a", "elems": 16}, {"op": "zero", "t": "a"},
                 {"op": "check", "t": "a"}, {"op": "free", "t": "a"}]
    });
    std::fs::write(&path, text.to_string()).expect("write");
    path.to_string_lossy().into_owned()
}

fn run(schedules: &[&str], extra: &[&str], report: &Path) -> Output {
    let mut args = vec!["run", "--backend", "mock", "--mode", "0", "--quiet"];
    for s in schedules {
        args.extend(["--schedule", s]);
    }
    let report = report.to_string_lossy().into_owned();
    args.extend(["--report", &report]);
    args.extend(extra);
    cli(&args)
}

#[test]
fn one_name_twice_in_a_run_is_a_usage_error_naming_both_files() {
    let d = dir("clash");
    let a = schedule(&d, "first.json", "same");
    let b = schedule(&d, "second.json", "same");
    // Before: exit 0, one merged report block, snapshots overwritten.
    let o = run(&[&a, &b], &[], &d.join("report"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("`same`") && out.contains(&a) && out.contains(&b),
        "{out}"
    );
}

#[test]
fn similar_names_write_distinct_files() {
    let d = dir("distinct");
    let a = schedule(&d, "slash.json", "a/b");
    let b = schedule(&d, "underscore.json", "a_b");
    let snaps = d.join("snaps");
    let snaps_arg = snaps.to_string_lossy().into_owned();
    // Before: both wrote `a_b__mock__mode-0__rank0.pickle`.
    let o = run(
        &[&a, &b],
        &["--snapshot-dir", &snaps_arg],
        &d.join("report"),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let mut names: Vec<String> = std::fs::read_dir(&snaps)
        .expect("snapshots written")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "a_2fb__mock__mode-0__rank0.pickle",
            "a_5fb__mock__mode-0__rank0.pickle"
        ]
    );
}

#[test]
fn an_artifact_that_cannot_be_written_fails_the_run() {
    let d = dir("unwritable");
    let a = schedule(&d, "s.json", "s");
    let snaps = d.join("snaps");
    // The snapshot's path is taken by a directory: it cannot be written.
    std::fs::create_dir_all(snaps.join("s__mock__mode-0__rank0.pickle")).expect("dir");
    let snaps_arg = snaps.to_string_lossy().into_owned();
    let o = run(&[&a], &["--snapshot-dir", &snaps_arg], &d.join("report"));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("not a regular file"), "{}", text(&o));
}

#[test]
fn a_snapshot_dir_that_is_a_file_is_a_usage_error() {
    let d = dir("file");
    let a = schedule(&d, "s.json", "s");
    let file = d.join("plain-file");
    std::fs::write(&file, "x").expect("write");
    let file_arg = file.to_string_lossy().into_owned();
    for flag in ["--snapshot-dir", "--trace-dir"] {
        let o = run(&[&a], &[flag, &file_arg], &d.join("report"));
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", text(&o));
        assert!(text(&o).contains("is not a directory"), "{}", text(&o));
    }
}
