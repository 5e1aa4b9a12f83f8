//! `run --snapshot-dir --trace-dir`: one snapshot, timeline and metrics file per (schedule,
//! backend, mode, rank); the snapshots follow PyTorch's viewer rules (checked by
//! `scripts/check_snapshot.py` when python3 exists) and show pending-free blocks in mode 0;
//! timelines have matched spans and monotonic counters; the report links the files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

fn have_python() -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("python3 not found: skipping the viewer-rule checks of the pickles");
    }
    ok
}

/// Runs the checker; returns its stdout (one `OK path {summary}` line per file).
fn check(pickles: &[PathBuf], extra: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/check_snapshot.py");
    let out = Command::new("python3")
        .arg(script)
        .args(extra)
        .args(pickles)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "check_snapshot.py {extra:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Matched async begin/end pairs, events sorted, counter timestamps monotonic.
fn validate_timeline(path: &Path) -> HashMap<String, usize> {
    let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).expect("valid JSON");
    let mut open: HashMap<(String, String), f64> = HashMap::new();
    let mut spans: HashMap<String, usize> = HashMap::new();
    let mut counters: HashMap<String, f64> = HashMap::new();
    let mut last = f64::MIN;
    for e in v["traceEvents"].as_array().expect("traceEvents") {
        let ph = e["ph"].as_str().expect("ph");
        if ph == "M" {
            continue;
        }
        let ts = e["ts"].as_f64().expect("ts");
        assert!(ts >= last, "{}: sorted", path.display());
        last = ts;
        let key = || {
            (
                e["cat"].as_str().unwrap_or("").to_owned(),
                e["id"].as_str().unwrap_or("").to_owned(),
            )
        };
        match ph {
            "b" => assert!(open.insert(key(), ts).is_none(), "one begin per id"),
            "e" => {
                let k = key();
                assert!(open.remove(&k).expect("end after begin") <= ts);
                *spans.entry(k.0).or_default() += 1;
            }
            "C" => {
                let name = e["name"].as_str().unwrap().to_owned();
                assert!(ts >= counters.insert(name, ts).unwrap_or(f64::MIN));
            }
            "i" => {}
            other => panic!("unexpected phase {other}"),
        }
    }
    assert!(open.is_empty(), "{}: unmatched {open:?}", path.display());
    spans
}

#[test]
fn run_writes_viewer_snapshots_timelines_and_metrics_and_links_them() {
    let root =
        std::env::temp_dir().join(format!("memreuse-observe-capture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (snaps, traces, report) = (root.join("snap"), root.join("trace"), root.join("report"));
    let out = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(["run", "--backend", "mock", "--mode", "all", "--quiet"])
        // The communication-stream path for synchronous collectives too: there every
        // collective of mode 0 records its stream, so every mode-0 snapshot has a pending
        // free to show (on the current stream, a rank whose ops are all synchronous, such
        // as e2-p2p-batch's ranks 2 and 3, has none).
        .args(["--sync-collectives", "comm-stream"])
        .arg("--snapshot-dir")
        .arg(&snaps)
        .arg("--trace-dir")
        .arg(&traces)
        .arg("--report")
        .arg(&report)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("could not write"));

    let pickles = files(&snaps, ".pickle");
    let timelines = files(&traces, ".trace.json");
    let metrics = files(&traces, ".metrics.txt");
    assert!(!pickles.is_empty());
    assert_eq!(pickles.len(), timelines.len());
    assert_eq!(pickles.len(), metrics.len());
    for mode in ["0", "1", "2", "3"] {
        let tag = format!("__mode-{mode}__");
        assert!(
            pickles.iter().any(|p| p.to_string_lossy().contains(&tag)),
            "mode {mode} wrote snapshots"
        );
    }

    let mut collectives = 0;
    for t in &timelines {
        collectives += validate_timeline(t).get("collective").copied().unwrap_or(0);
    }
    assert!(collectives > 0, "collective spans on comm streams");
    for m in &metrics {
        let text = std::fs::read_to_string(m).unwrap();
        assert!(text.ends_with("# EOF\n"), "{}", m.display());
        assert!(text.contains("memreuse_reserved_bytes{"));
        assert!(text.contains("memreuse_pg_works_issued_total{"));
    }

    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    let name = pickles[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        html.contains(&format!("../snap/{name}\"")),
        "report links {name}"
    );
    assert!(html.contains(".trace.json\""));

    if have_python() {
        // Every snapshot follows the viewer's rules, and every mode has snapshots taken
        // mid-schedule while blocks were pending-free (mode 0, record_stream: all of them).
        let summary = check(&pickles, &[]);
        for mode in ["0", "1", "2", "3"] {
            let tag = format!("__mode-{mode}__");
            let with_pending: Vec<PathBuf> = summary
                .lines()
                .filter(|l| l.contains(&tag) && !l.contains("'pending': 0,"))
                .filter_map(|l| l.split_whitespace().nth(1).map(PathBuf::from))
                .collect();
            assert!(
                !with_pending.is_empty(),
                "mode {mode}: a snapshot with pending frees"
            );
            check(&with_pending, &["--require-pending"]);
        }
        let mode0: Vec<PathBuf> = pickles
            .iter()
            .filter(|p| p.to_string_lossy().contains("__mode-0__"))
            .cloned()
            .collect();
        check(&mode0, &["--require-pending"]);
    }
    let _ = std::fs::remove_dir_all(&root);
}
