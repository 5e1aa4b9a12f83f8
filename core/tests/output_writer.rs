//! The one output writer (issue 27, "Output paths"): `/dev/null` and FIFOs are written
//! through and stay what they are, symbolic links are refused and their targets untouched,
//! an output equal to an input (under any name) is refused, and a confined output never
//! lands outside its directory.

#![cfg(unix)]

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use memreuse_core::output::{OutputError, OutputRules, Written, write_file, write_output};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("memreuse-output-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn entries(d: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(d)
        .expect("read dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn dev_null_is_written_through_and_stays_a_device() {
    // Before (the runner's writer, as root): /dev/null became a regular file.
    assert_eq!(
        write_file(Path::new("/dev/null"), b"report").expect("writes"),
        Written::Through
    );
    let t = std::fs::symlink_metadata("/dev/null")
        .expect("still there")
        .file_type();
    assert!(t.is_char_device());
}

#[test]
fn dev_stdout_is_written_through() {
    // /dev/stdout is a symbolic link, but the process's own descriptor: written through.
    assert_eq!(
        write_file(Path::new("/dev/stdout"), b"").expect("writes"),
        Written::Through
    );
    assert!(
        std::fs::symlink_metadata("/dev/stdout")
            .expect("still there")
            .file_type()
            .is_symlink()
    );
}

#[test]
fn a_fifo_is_written_through_to_its_reader() {
    let d = dir("fifo");
    let fifo = d.join("out.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        return;
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).expect("read"))
    };
    assert_eq!(
        write_file(&fifo, b"{\"ok\":true}").expect("writes"),
        Written::Through
    );
    assert_eq!(reader.join().expect("reader"), b"{\"ok\":true}");
    assert!(
        std::fs::symlink_metadata(&fifo)
            .expect("still there")
            .file_type()
            .is_fifo()
    );
    assert_eq!(entries(&d), vec!["out.json"]);
}

#[test]
fn a_symlink_is_refused_and_its_target_untouched() {
    let d = dir("link");
    let outside = dir("link-outside");
    let target = outside.join("precious");
    std::fs::write(&target, "original").expect("write");
    let link = d.join("metrics.prom");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let err = write_file(&link, b"overwritten").expect_err("refused");
    assert!(
        matches!(
            &err,
            OutputError::NotARegularFile {
                kind: "symbolic link",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "original");
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("still there")
            .file_type()
            .is_symlink()
    );
    // A dangling link is refused as well (it would otherwise create a file elsewhere).
    let dangling = d.join("dangling");
    std::os::unix::fs::symlink(outside.join("new"), &dangling).expect("symlink");
    assert!(write_file(&dangling, b"x").is_err());
    assert!(!outside.join("new").exists());
    assert_eq!(entries(&d), vec!["dangling", "metrics.prom"]);
}

#[test]
fn an_output_equal_to_an_input_is_refused_under_any_name() {
    let d = dir("input");
    let input = d.join("schedule.json");
    std::fs::write(&input, "the input").expect("write");
    let hard = d.join("alias.json");
    std::fs::hard_link(&input, &hard).expect("hard link");
    let rules = OutputRules::new().input(&input);
    for path in [input.clone(), hard, d.join(".").join("schedule.json")] {
        let err = write_output(&path, b"report", &rules).expect_err("refused");
        assert!(matches!(&err, OutputError::SameAsInput { .. }), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&input).expect("read"), "the input");
    // Another path is written.
    write_output(&d.join("report.json"), b"report", &rules).expect("writes");
}

#[test]
fn a_confined_output_never_lands_outside_its_directory() {
    let d = dir("within");
    let outside = dir("within-outside");
    std::os::unix::fs::symlink(&outside, d.join("escape")).expect("symlink");
    let rules = OutputRules::new().within(&d);
    for path in [
        d.join("escape").join("index.html"),
        d.join("..").join("index.html"),
    ] {
        let err = write_output(&path, b"page", &rules).expect_err("refused");
        assert!(
            matches!(&err, OutputError::OutsideDirectory { .. }),
            "{err}"
        );
    }
    assert!(entries(&outside).is_empty());
    write_output(&d.join("index.html"), b"page", &rules).expect("writes inside");
    // A regular file is replaced atomically: no temporary file is left.
    write_output(&d.join("index.html"), b"page 2", &rules).expect("replaces");
    assert_eq!(entries(&d), vec!["escape", "index.html"]);
    assert_eq!(
        std::fs::read_to_string(d.join("index.html")).expect("read"),
        "page 2"
    );
}
