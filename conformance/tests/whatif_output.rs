//! `whatif --json` and `--report` go through the one output writer (issue 27, "Output
//! paths"): `/dev/null` and a FIFO are written through, a symbolic link is refused and its
//! target untouched, an output equal to the history is refused and the history kept.

#![cfg(unix)]

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TRACE: &str = "memreuse.trace/1\nalloc 1 1048576 0\nfree 1 1048576 0\nend 2\n";

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("whatif-output-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn whatif(history: &Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .arg("whatif")
        .arg(history)
        .args(["--alloc-conf", "", "--quiet"])
        .args(args)
        .output()
        .expect("runs")
}

fn history(d: &Path) -> PathBuf {
    let path = d.join("run.trace");
    std::fs::write(&path, TRACE).expect("write");
    path
}

#[test]
fn json_to_dev_null_and_a_fifo_is_written_through() {
    let d = dir("through");
    let h = history(&d);
    let out = whatif(&h, &["--json".as_ref(), "/dev/null".as_ref()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        std::fs::symlink_metadata("/dev/null")
            .expect("there")
            .file_type()
            .is_char_device()
    );
    let fifo = d.join("out.json");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).expect("read"))
        };
        let out = whatif(&h, &["--json".as_ref(), fifo.as_os_str()]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert!(reader.join().expect("reader").contains("memreuse.whatif/1"));
        assert!(
            std::fs::symlink_metadata(&fifo)
                .expect("there")
                .file_type()
                .is_fifo()
        );
    }
}

#[test]
fn json_and_report_through_a_symlink_are_refused() {
    let d = dir("link");
    let h = history(&d);
    let target = d.join("precious.txt");
    std::fs::write(&target, "original").expect("write");
    let link = d.join("out.json");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let out = whatif(&h, &["--json".as_ref(), link.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link"));
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "original");

    let report = d.join("report");
    std::fs::create_dir_all(&report).expect("dir");
    std::os::unix::fs::symlink(&target, report.join("index.html")).expect("symlink");
    let out = whatif(&h, &["--report".as_ref(), report.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "original");
}

#[test]
fn json_over_the_history_is_refused() {
    let d = dir("input");
    let h = history(&d);
    let out = whatif(&h, &["--json".as_ref(), h.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("it is the input"),
        "{out:?}"
    );
    assert_eq!(std::fs::read_to_string(&h).expect("read"), TRACE);
    // A regular path is written.
    let json = d.join("whatif.json");
    let out = whatif(&h, &["--json".as_ref(), json.as_os_str()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        std::fs::read_to_string(&json)
            .expect("read")
            .contains("memreuse.whatif/1")
    );
}
