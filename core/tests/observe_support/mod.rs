//! Helpers shared by the observability tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// `scripts/check_snapshot.py` of the workspace.
pub fn checker() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/check_snapshot.py")
}

/// True when `python3` runs here; prints why the check is skipped otherwise.
pub fn have_python() -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("python3 not found: skipping the viewer-rule checks of the pickle");
    }
    ok
}

/// Runs the checker on `files` with `extra` flags; panics with its output on failure.
/// Returns its stdout (empty when python3 is missing).
pub fn check_pickles(files: &[PathBuf], extra: &[&str]) -> String {
    if !have_python() {
        return String::new();
    }
    let out = Command::new("python3")
        .arg(checker())
        .args(extra)
        .args(files)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "check_snapshot.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A fresh temporary directory for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memreuse-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}
