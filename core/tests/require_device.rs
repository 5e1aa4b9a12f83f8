//! `MEMREUSE_REQUIRE_DEVICE=1` turns a device test's skip into a failure. The child test
//! below is run by the parent in a subprocess with and without the variable (no test sets
//! the environment of its own process).

use std::process::Command;

use memreuse_core::testing::{REQUIRE_DEVICE_VAR, skip_without_device};

/// Does nothing by itself; run by the parent test with `MEMREUSE_CHILD=1`.
#[test]
fn child_that_misses_its_device() {
    if std::env::var_os("MEMREUSE_CHILD").is_none() {
        return;
    }
    skip_without_device("no test device here");
}

fn child(require: Option<&str>) -> std::process::Output {
    let mut c = Command::new(std::env::current_exe().expect("test binary"));
    c.args(["--exact", "child_that_misses_its_device", "--nocapture"])
        .env("MEMREUSE_CHILD", "1")
        .env_remove(REQUIRE_DEVICE_VAR);
    if let Some(v) = require {
        c.env(REQUIRE_DEVICE_VAR, v);
    }
    c.output().expect("runs the child")
}

#[test]
fn a_missing_device_skips_unless_required() {
    let skipped = child(None);
    let out = String::from_utf8_lossy(&skipped.stdout);
    assert!(skipped.status.success(), "{out}");
    assert!(out.contains("skipped: no test device here"), "{out}");

    let failed = child(Some("1"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&failed.stdout),
        String::from_utf8_lossy(&failed.stderr)
    );
    assert!(!failed.status.success(), "{text}");
    assert!(
        text.contains("MEMREUSE_REQUIRE_DEVICE=1 but the device is missing"),
        "{text}"
    );

    assert!(
        child(Some("0")).status.success(),
        "only `1` requires a device"
    );
}
