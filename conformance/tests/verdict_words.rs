//! Through the binary (issue 30): one verdict drives the exit status, the terminal's last
//! line, `summary.md` and `report.html`; PASS appears only when the verdict is PASS; skip
//! reasons are written once per (backend, reason); and a schedule's declared
//! out-of-memory outcome is judged as declared, not as an error.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"));
    c.args(args).env_remove("MEMREUSE_ALLOC_CONF");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("runs")
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("memreuse-words-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn last_line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

fn read(d: &Path, f: &str) -> String {
    std::fs::read_to_string(d.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"))
}

fn report(d: &Path) -> serde_json::Value {
    serde_json::from_str(&read(d, "report.json")).expect("json")
}

/// A schedule file every test can run quickly.
const SCHEDULE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/e1-ddp-buckets.json"
);

/// Whether `cuda` is linked into the binary under test: a run of it is skipped as not
/// compiled when it is not.
fn cuda_linked() -> bool {
    let d = dir("probe");
    let json = d.join("probe.json");
    let o = cli(
        &[
            "--quiet",
            "--schedule",
            SCHEDULE,
            "--mode",
            "0",
            "--backend",
            "cuda",
            "--json",
            &json.to_string_lossy(),
        ],
        &[],
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    let _ = std::fs::remove_dir_all(d);
    !v["runs"][0]["skip_reason"]
        .as_str()
        .is_some_and(|r| r.contains("not compiled"))
}

/// `--backend cuda` on a build without it skips every run: exit 0 (a GPU-less job keeps
/// passing) but the verdict is NOTHING RAN with the reason, everywhere, and never PASS.
#[test]
fn every_run_skipped_is_nothing_ran_with_exit_0_and_no_pass_anywhere() {
    let d = dir("nothing");
    let o = cli(
        &[
            "--quiet",
            "--suite",
            "single-device",
            "--mode",
            "0",
            "--backend",
            "cuda",
            "--report",
            &d.to_string_lossy(),
        ],
        &[],
    );
    let runs = report(&d)["runs"].as_array().expect("runs").clone();
    if runs.iter().any(|r| r["status"] != "skipped") {
        assert!(cuda_linked() || runs.is_empty(), "{}", text(&o));
        return; // cuda is linked and ran here: nothing to check
    }
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let last = last_line(&o);
    assert!(
        last.starts_with("NOTHING RAN: all ") && last.contains("runs skipped"),
        "{}",
        text(&o)
    );
    let (md, html) = (read(&d, "summary.md"), read(&d, "report.html"));
    for (name, page) in [("summary.md", &md), ("report.html", &html)] {
        assert!(page.contains("NOTHING RAN: all "), "{name}: {page}");
        assert!(!page.contains("PASS"), "{name} says PASS: {page}");
    }
    // The reason is written once, however many runs it skipped; the rows link to it.
    let reason = runs[0]["skip_reason"]
        .as_str()
        .expect("a reason")
        .to_owned();
    assert!(runs.len() > 1, "the suite has several schedules");
    assert_eq!(
        html.matches(&reason).count(),
        2,
        "verdict line and list: {html}"
    );
    assert_eq!(
        html.matches("href=\"#skip-1\"").count(),
        runs.len(),
        "{html}"
    );
    assert_eq!(
        md.matches(&reason).count(),
        2,
        "verdict line and list: {md}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// A `--require-backend` backend that cannot run fails the run (exit 1), and the files say
/// FAIL with the reason first, never PASS, although every mock run passed.
#[test]
fn a_missing_required_backend_is_fail_in_every_output() {
    if cuda_linked() {
        return;
    }
    let d = dir("required");
    let o = cli(
        &[
            "--quiet",
            "--schedule",
            SCHEDULE,
            "--mode",
            "0",
            "--backend",
            "mock",
            "--require-backend",
            "cuda",
            "--report",
            &d.to_string_lossy(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        last_line(&o).starts_with("FAIL: required backend `cuda` is "),
        "{}",
        text(&o)
    );
    let json = report(&d);
    assert!(
        json["required_missing"][0]
            .as_str()
            .is_some_and(|m| m.starts_with("`cuda` is ")),
        "{json}"
    );
    for name in ["summary.md", "report.html"] {
        let page = read(&d, name);
        assert!(
            page.contains("FAIL: required backend `cuda` is "),
            "{name}: {page}"
        );
        assert!(!page.contains("PASS"), "{name} says PASS: {page}");
    }
    let _ = std::fs::remove_dir_all(d);
}

/// `oom-pressure` declares that under 20 MiB expandable pages it runs out of memory, so
/// `MEMREUSE_ALLOC_CONF=expandable_segments:True` passes with the runs counted as
/// declared (exit 0, PASS); small pages still have to fit.
#[test]
fn a_declared_out_of_memory_passes_as_declared() {
    let d = dir("declared");
    let schedule = d.join("oom-pressure.json");
    let g = cli(
        &[
            "generate",
            "oom-pressure",
            "-o",
            &schedule.to_string_lossy(),
        ],
        &[],
    );
    assert_eq!(g.status.code(), Some(0), "{}", text(&g));
    assert!(
        read(&d, "oom-pressure.json").contains("\"expect_out_of_memory\""),
        "the generator writes the declaration"
    );
    let run = |conf: &str, out: &str| {
        let report = d.join(out);
        let o = cli(
            &[
                "--quiet",
                "--schedule",
                &schedule.to_string_lossy(),
                "--backend",
                "mock",
                "--mode",
                "0",
                "--mode",
                "2",
                "--report",
                &report.to_string_lossy(),
            ],
            &[("MEMREUSE_ALLOC_CONF", conf)],
        );
        (o, report)
    };
    let (o, out) = run("expandable_segments:True", "big-pages");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        last_line(&o),
        "PASS: 2 runs as expected (2 out of memory as declared)",
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("0 passed, 2 out of memory as declared, 0 failed, 0 errors"));
    for r in report(&out)["runs"].as_array().expect("runs") {
        assert_eq!(r["status"], "error", "{r}");
        assert_eq!(r["declared_outcome"], "out_of_memory", "{r}");
        assert!(
            r["declared_because"]
                .as_str()
                .is_some_and(|b| b.contains("20 MiB pages")),
            "{r}"
        );
    }
    let md = read(&out, "summary.md");
    assert!(md.contains("| declared |"), "{md}");
    assert!(!md.contains("Not as expected"), "{md}");
    // 2 MiB pages fit: the declaration does not apply and the runs pass outright.
    let (o, out) = run(
        "expandable_segments:True,expandable_segments_page_size_mb:2",
        "small-pages",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(last_line(&o), "PASS: 2 runs as expected", "{}", text(&o));
    for r in report(&out)["runs"].as_array().expect("runs") {
        assert_eq!(r["status"], "passed", "{r}");
        assert!(r.get("declared_outcome").is_none(), "{r}");
    }
    let _ = std::fs::remove_dir_all(d);
}

/// A declaration whose settings do not parse is refused when the schedule is read, with
/// the key that is wrong.
#[test]
fn an_invalid_declaration_is_refused_naming_the_key() {
    let d = dir("invalid");
    let mut v: serde_json::Value =
        serde_json::from_str(include_str!("data/e1-ddp-buckets.json")).expect("json");
    v["expect_out_of_memory"] =
        serde_json::json!([{"alloc_conf": "expandable_segment:True", "because": "x"}]);
    let f = d.join("bad.json");
    std::fs::write(&f, v.to_string()).expect("write");
    let o = cli(&["validate", &f.to_string_lossy()], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("expect_out_of_memory alloc_conf `expandable_segment:True`")
            && text(&o).contains("expandable_segment"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(d);
}
