//! `MULTI_STREAM_MEMORY_REUSE` is read once per process, unset means 2, surrounding
//! whitespace is allowed, every malformed value is a typed error naming the variable, the
//! value and the valid values, and a builder's explicit mode wins over the variable.
//!
//! The variable is process-global and cached, and edition 2024 makes `set_var` unsafe in a
//! threaded test harness, so each case runs in a child process: this test binary itself,
//! re-run with `--exact child_reads_env` and the variable set. The child prints what it
//! observed on marker lines; the parent checks them.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;

use memreuse::allocator::{AllocatorConfig, CachingAllocator};
use memreuse::mock::{MockConfig, open_mock_world};
use memreuse::process_group::{
    MULTI_STREAM_MEMORY_REUSE, PgError, ProcessGroup, ReuseMode, ReuseModeError,
    reuse_mode_from_env,
};

/// Set (to anything) in the child process only.
const CHILD: &str = "MEMREUSE_ENV_CHILD";
/// Prefix of the child's result lines.
const MARK: &str = "MEMREUSE_ENV_RESULT";

fn describe(read: &Result<ReuseMode, ReuseModeError>) -> String {
    match read {
        Ok(mode) => format!("ok:{mode}"),
        Err(e) => format!("err:{e}"),
    }
}

/// Builds a one-rank group, with `mode` or from the environment.
fn build(mode: Option<ReuseMode>) -> String {
    let (device, comm) = open_mock_world(1, MockConfig::with_capacity(1 << 20))
        .expect("mock world")
        .pop()
        .expect("one rank");
    let allocator = CachingAllocator::new(Arc::new(device), AllocatorConfig::default());
    let mut builder = ProcessGroup::builder(allocator, Box::new(comm)).watchdog(None);
    if let Some(mode) = mode {
        builder = builder.mode(mode);
    }
    match builder.build() {
        Ok(pg) => format!("ok:{}", pg.policy_name()),
        Err(PgError::Config(e)) => format!("err:{e}"),
        Err(other) => panic!("unexpected error: {other}"),
    }
}

/// The child's side. Does nothing in an ordinary test run.
#[test]
fn child_reads_env() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    // Before anything reads the variable: an explicit mode needs nothing from it.
    println!(
        "{MARK} builder_with_mode={}",
        build(Some(ReuseMode::EraseRecordStream))
    );
    let first = reuse_mode_from_env();
    println!("{MARK} first={}", describe(&first));
    println!("{MARK} builder_without_mode={}", build(None));
    let changed = if first == Ok(ReuseMode::RecordStream) {
        "1"
    } else {
        "0"
    };
    // SAFETY: this child process runs this one test with --test-threads=1, and the mock
    // worlds built above are dropped (their stream threads never read the environment),
    // so nothing else reads or writes the environment concurrently.
    unsafe { std::env::set_var(MULTI_STREAM_MEMORY_REUSE, changed) };
    println!("{MARK} second={}", describe(&reuse_mode_from_env()));
    println!("{MARK} builder_after_change={}", build(None));
}

/// Runs the child with the variable set to `value` (`None`: unset) and returns its
/// marker lines as `key -> value`.
fn child(value: Option<&str>) -> HashMap<String, String> {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args([
        "--exact",
        "child_reads_env",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1");
    match value {
        Some(v) => cmd.env(MULTI_STREAM_MEMORY_REUSE, v),
        None => cmd.env_remove(MULTI_STREAM_MEMORY_REUSE),
    };
    let out = cmd.output().expect("spawn the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child with {value:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: HashMap<String, String> = stdout
        .lines()
        // libtest may print "test child_reads_env ... " on the same line as the first one.
        .filter_map(|l| l[l.find(MARK)? + MARK.len()..].trim_start().split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    for key in [
        "builder_with_mode",
        "first",
        "builder_without_mode",
        "second",
        "builder_after_change",
    ] {
        assert!(
            lines.contains_key(key),
            "child with {value:?}: no {key} in {stdout}"
        );
    }
    lines
}

/// The child read the variable once: every later read (and every builder without a
/// mode) saw the first result, although the variable changed in between.
fn assert_read_once(lines: &HashMap<String, String>, value: Option<&str>) {
    let first = &lines["first"];
    assert_eq!(
        &lines["second"], first,
        "{value:?}: read again after set_var"
    );
    assert_eq!(&lines["builder_without_mode"], first, "{value:?}");
    assert_eq!(&lines["builder_after_change"], first, "{value:?}");
    assert_eq!(
        lines["builder_with_mode"], "ok:1",
        "{value:?}: explicit mode"
    );
}

#[test]
fn unset_means_mode_2() {
    let lines = child(None);
    assert_eq!(lines["first"], "ok:2");
    assert_read_once(&lines, None);
}

#[test]
fn surrounding_whitespace_is_allowed() {
    let lines = child(Some(" 3 "));
    assert_eq!(lines["first"], "ok:3");
    assert_read_once(&lines, Some(" 3 "));
}

#[test]
fn malformed_values_are_errors_and_an_explicit_mode_wins() {
    for bad in ["abc", "", "1x", "02"] {
        let lines = child(Some(bad));
        let first = &lines["first"];
        assert!(first.starts_with("err:"), "{bad:?} accepted: {first}");
        assert!(first.contains(MULTI_STREAM_MEMORY_REUSE), "{first}");
        assert!(
            first.contains(&format!("{bad:?}")),
            "value missing: {first}"
        );
        assert!(
            first.contains("0, 1, 2 or 3"),
            "valid values missing: {first}"
        );
        // The builder without a mode fails with the typed error (PgError::Config), even
        // after the variable was changed to a valid value; with a mode it builds.
        assert_read_once(&lines, Some(bad));
    }
}
