//! `run --alloc-conf` and `MEMREUSE_ALLOC_CONF`, through the binary: a malformed variable
//! is a usage error with the typed message, the flag wins over the variable, each flag
//! value is another set of runs carrying `alloc_conf` in the JSON, and runs under
//! different configurations never share an artifact file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("memreuse-allocconf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A one-rank schedule that allocates two sizes, so the configuration matters.
fn schedule(dir: &Path) -> String {
    let path = dir.join("s.json");
    let text = serde_json::json!({
        "format": "memreuse.schedule/1", "name": "conf-probe", "world_size": 1,
        "body": [{"op": "alloc", "t": "a", "elems": 4096}, {"op": "zero", "t": "a"},
                 {"op": "alloc", "t": "b", "elems": 300_000}, {"op": "zero", "t": "b"},
                 {"op": "check", "t": "a"}, {"op": "free", "t": "a"}, {"op": "free", "t": "b"}]
    });
    std::fs::write(&path, text.to_string()).expect("write");
    path.to_string_lossy().into_owned()
}

/// `run` of the probe schedule on the mock in mode 0, JSON to `dir/report.json`, with
/// `MEMREUSE_ALLOC_CONF` set to `env` (removed when `None`).
fn run(dir: &Path, env: Option<&str>, extra: &[&str]) -> Output {
    let s = schedule(dir);
    let json = dir.join("report.json").to_string_lossy().into_owned();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"));
    cmd.args([
        "run",
        "--backend",
        "mock",
        "--mode",
        "0",
        "--quiet",
        "--schedule",
        &s,
        "--json",
        &json,
    ])
    .args(extra);
    match env {
        Some(v) => cmd.env("MEMREUSE_ALLOC_CONF", v),
        None => cmd.env_remove("MEMREUSE_ALLOC_CONF"),
    };
    cmd.output().expect("runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn runs(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("report.json")).expect("report written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["runs"].as_array().expect("runs").clone()
}

#[test]
fn a_malformed_variable_is_a_usage_error_with_the_typed_message() {
    let d = dir("bogus-env");
    // Before: exit 0, the variable silently ignored.
    let o = run(&d, Some("bogus:1"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("memreuse-conformance: MEMREUSE_ALLOC_CONF=`bogus:1`: unknown key `bogus` (valid keys: max_split_size_mb,"),
        "{err}"
    );
    assert!(!d.join("report.json").exists(), "nothing ran");
    // A valid variable is honoured and recorded.
    let o = run(&d, Some("max_split_size_mb:20"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = runs(&d);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["alloc_conf"], "max_split_size_mb:20");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_malformed_flag_names_the_key_and_what_is_valid() {
    let d = dir("bad-flag");
    let o = run(&d, None, &["--alloc-conf", "roundup_power2_divisions:3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--alloc-conf `roundup_power2_divisions:3`: ")
            && err.contains("`roundup_power2_divisions` must be a power of two up to 64"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_flag_wins_over_the_variable() {
    let d = dir("flag-wins");
    let o = run(
        &d,
        Some("bogus:1"),
        &["--alloc-conf", "max_split_size_mb:20"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = runs(&d);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["alloc_conf"], "max_split_size_mb:20");
    assert_eq!(r[0]["status"], "passed");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn each_flag_is_another_set_of_runs_and_artifacts_never_collide() {
    let d = dir("two-sets");
    let snaps = d.join("snaps");
    let snaps_arg = snaps.to_string_lossy().into_owned();
    let o = run(
        &d,
        None,
        &[
            "--alloc-conf",
            "",
            "--alloc-conf",
            "max_split_size_mb:20",
            "--alloc-conf",
            "roundup_power2_divisions:4",
            "--snapshot-dir",
            &snaps_arg,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = runs(&d);
    let confs: Vec<Option<&str>> = r.iter().map(|r| r["alloc_conf"].as_str()).collect();
    assert_eq!(
        confs,
        [
            None,
            Some("max_split_size_mb:20"),
            Some("roundup_power2_divisions:4")
        ]
    );
    assert!(r[0].get("alloc_conf").is_none(), "absent for the default");
    // Device calls are recorded for every configuration (at least one allocation each).
    for run in &r {
        assert!(
            run["device_alloc_calls"].as_u64().is_some_and(|n| n >= 1),
            "{run}"
        );
        assert!(run["device_free_calls"].as_u64().is_some(), "{run}");
    }
    let digests: Vec<&str> = r.iter().map(|r| r["digest"].as_str().unwrap()).collect();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    // Rounding to powers of two changes what the second tensor reserves.
    assert_ne!(r[0]["peak_allocated_bytes"], r[2]["peak_allocated_bytes"]);
    let mut names: Vec<String> = std::fs::read_dir(&snaps)
        .expect("snapshots written")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 3, "one file per configuration: {names:?}");
    assert!(names.contains(&"conf-probe__mock__mode-0__rank0.pickle".to_owned()));
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("conf-probe__mock__mode-0__conf-max-split-size-")),
        "{names:?}"
    );
    // The HTML page is one file per report; it links each run's own snapshot.
    let report = d.join("report");
    let report_arg = report.to_string_lossy().into_owned();
    let o = run(
        &d,
        None,
        &[
            "--alloc-conf",
            "",
            "--alloc-conf",
            "max_split_size_mb:20",
            "--snapshot-dir",
            &snaps_arg,
            "--report",
            &report_arg,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let page = std::fs::read_to_string(report.join("report.html")).expect("page");
    let linked: Vec<&String> = names
        .iter()
        .filter(|n| !n.contains("conf-roundup"))
        .collect();
    assert_eq!(linked.len(), 2, "{names:?}");
    for n in linked {
        assert_eq!(page.matches(n.as_str()).count(), 1, "{n} linked once");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn expandable_runs_report_their_page_maps() {
    let d = dir("expandable");
    let o = run(
        &d,
        None,
        &[
            "--alloc-conf",
            "",
            "--alloc-conf",
            "expandable_segments:True",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = runs(&d);
    assert_eq!(r.len(), 2);
    assert!(r[0].get("device_map_calls").is_none(), "{}", r[0]);
    assert!(r[0].get("device_unmap_calls").is_none(), "{}", r[0]);
    // Two pools touched: at least one small and one large page mapped.
    assert!(
        r[1]["device_map_calls"].as_u64().is_some_and(|n| n >= 2),
        "{}",
        r[1]
    );
    assert!(r[1]["device_unmap_calls"].as_u64().is_some(), "{}", r[1]);
    assert_eq!(r[0]["digest"], r[1]["digest"]);
    assert_eq!(r[1]["leaked_bytes"], 0);
    let _ = std::fs::remove_dir_all(&d);
}
