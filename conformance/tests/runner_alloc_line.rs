//! Through the binary: without `--alloc-conf`, each backend's runs read core's precedence
//! of configuration variables (PyTorch's names included, per platform), a variable
//! overridden by another with a different value is named in a warning, and the report's
//! `allocator:` line (summary.md, report.html, the JSON's `allocator`) says what the runs
//! used and where it came from.

use std::path::PathBuf;
use std::process::{Command, Output};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/e1-ddp-buckets.json"
);

/// Every configuration variable the runner may read, removed unless given in `env`.
const VARIABLES: [&str; 4] = [
    "MEMREUSE_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_NPU_ALLOC_CONF",
];

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "memreuse-runner-alloc-line-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// One run of the example on `backends` in mode 0, the report into `dir/r`.
fn run(dir: &std::path::Path, backends: &[&str], env: &[(&str, &str)], extra: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"));
    cmd.args(["--mode", "0", "--quiet", "--schedule", EXAMPLE, "--report"])
        .arg(dir.join("r"));
    for b in backends {
        cmd.args(["--backend", b]);
    }
    cmd.args(extra);
    for v in VARIABLES {
        cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn report(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("r/report.json")).expect("report"))
        .expect("json")
}

#[test]
fn the_allocator_line_names_the_settings_and_their_variable_everywhere() {
    let dir = tmp("line");
    let o = run(
        &dir,
        &["mock"],
        &[("MEMREUSE_ALLOC_CONF", "max_split_size_mb:40")],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let want = "max_split_size_mb:40 from MEMREUSE_ALLOC_CONF";
    let summary = std::fs::read_to_string(dir.join("r/summary.md")).unwrap();
    assert!(
        summary.contains(&format!("- allocator: `{want}`")),
        "{summary}"
    );
    let html = std::fs::read_to_string(dir.join("r/report.html")).unwrap();
    assert!(html.contains(want), "the page's allocator line");
    assert_eq!(report(&dir)["allocator"], want);
    // A flag: the line says so, whatever the variables hold.
    let o = run(
        &dir,
        &["mock"],
        &[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")],
        &["--alloc-conf", "max_split_size_mb:20"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        report(&dir)["allocator"],
        "max_split_size_mb:20 from --alloc-conf"
    );
    let summary = std::fs::read_to_string(dir.join("r/summary.md")).unwrap();
    assert!(!summary.contains("PYTORCH_CUDA_ALLOC_CONF"), "{summary}");
}

#[test]
fn pytorch_names_configure_the_backends_they_belong_to() {
    let dir = tmp("per-backend");
    // PyTorch's generic name configures the mock, as MEMREUSE_ALLOC_CONF would.
    let o = run(
        &dir,
        &["mock"],
        &[("PYTORCH_ALLOC_CONF", "max_split_size_mb:40")],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = report(&dir);
    assert_eq!(r["runs"][0]["alloc_conf"], "max_split_size_mb:40");
    assert_eq!(
        r["allocator"],
        "max_split_size_mb:40 from PYTORCH_ALLOC_CONF"
    );
    // The CUDA name configures CUDA's runs only (skipped here when CUDA is not built in,
    // but resolved and reported all the same), never the mock's.
    let o = run(
        &dir,
        &["mock", "cuda"],
        &[("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:40")],
        &[],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let r = report(&dir);
    assert_eq!(
        r["allocator"],
        "mock: defaults; cuda: max_split_size_mb:40 from PYTORCH_CUDA_ALLOC_CONF"
    );
    let mock = r["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["backend"] == "mock")
        .expect("a mock run");
    assert!(
        mock.get("alloc_conf").is_none(),
        "the mock ran at defaults: {mock}"
    );
}

#[test]
fn two_variables_that_differ_are_named_in_a_warning() {
    let dir = tmp("warning");
    let o = run(
        &dir,
        &["mock"],
        &[
            ("MEMREUSE_ALLOC_CONF", "max_split_size_mb:40"),
            ("PYTORCH_ALLOC_CONF", "max_split_size_mb:20"),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: allocator configuration read from MEMREUSE_ALLOC_CONF")
            && err.contains("PYTORCH_ALLOC_CONF set to a different value and ignored"),
        "{err}"
    );
    assert_eq!(
        report(&dir)["runs"][0]["alloc_conf"],
        "max_split_size_mb:40"
    );
    // An invalid value in the variable used is a usage error naming that variable.
    let o = run(&dir, &["mock"], &[("PYTORCH_ALLOC_CONF", "bogus:1")], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("PYTORCH_ALLOC_CONF=`bogus:1`"),
        "{}",
        text(&o)
    );
}
