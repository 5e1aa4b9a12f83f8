//! What `whatif` says, through the binary (issue 30 item 6): the live peak, "no setting can
//! fit", each setting's out-of-memory reason, the recommendation, entries numbered as the
//! header counts them (the source's own index stays in the JSON), the page's device line and
//! reasons, where files were written, `--json -`, sizes with units, and errors that name the
//! flag given.

use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("whatif-messages-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn write(d: &Path, text: &str) -> PathBuf {
    let path = d.join("run.trace");
    std::fs::write(&path, text).expect("write");
    path
}

/// Runs `whatif HISTORY ARGS` in `cwd`: (exit code, stdout, stderr).
fn whatif(cwd: &Path, history: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .current_dir(cwd)
        .arg("whatif")
        .arg(history)
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Three 30 MiB blocks live at once, after three comment lines: entry 3 is line 7.
const THREE: &str = "memreuse.trace/1\n# a\n# b\n# c\nalloc 1 31457280 0\nalloc 2 31457280 0\nalloc 3 31457280 0\nend 3\n";

#[test]
fn the_live_peak_no_setting_can_fit_and_entries_counted_as_the_header_counts_them() {
    let d = dir("live");
    let h = write(&d, THREE);
    let json = d.join("w.json");
    let (code, out, err) = whatif(
        &d,
        &h,
        &[
            "--alloc-conf",
            "",
            "--device-memory",
            "80MiB",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "a verdict, not an error: {out}{err}");
    assert!(out.contains("(3 entries,"), "{out}");
    assert!(out.contains("live peak 90.0 MiB at entry 3 of 3"), "{out}");
    assert!(
        out.contains(
            "no setting can fit: the program holds 90.0 MiB at entry 3, more than the 80.0 MiB device"
        ),
        "{out}"
    );
    assert!(out.contains("entry 3") && !out.contains("entry 7"), "{out}");
    assert!(
        out.contains("why \"\" (PyTorch defaults): out of memory at entry 3: live: "),
        "{out}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let s = &doc["settings"][0];
    assert_eq!(
        s["first_oom_entry"], 7,
        "the source's line stays in the JSON"
    );
    assert_eq!(s["first_oom_position"], 3);
    assert!(
        s["oom_reason"].as_str().unwrap().starts_with("live: "),
        "{s}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn each_setting_says_why_it_ran_out_of_memory() {
    let d = dir("why");
    // A 3 MiB request needs a 20 MiB large-pool segment: rounding on a 4 MiB device.
    let h = write(&d, "memreuse.trace/1\nalloc 1 3145728 0\nend 1\n");
    let (code, out, _) = whatif(&d, &h, &["--alloc-conf", "", "--device-memory", "4MiB"]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("at entry 1: rounding: 3.0 MiB requested, 4.0 MiB free"),
        "{out}"
    );
    // 60 MiB on a 100 MiB device whose process may use half of it: the cap.
    let h = write(&d, "memreuse.trace/1\nalloc 1 62914560 0\nend 1\n");
    let conf = "per_process_memory_fraction:0.5";
    let (_, out, _) = whatif(&d, &h, &["--alloc-conf", conf, "--device-memory", "100MiB"]);
    assert!(
        out.contains(
            "at entry 1: cap: per_process_memory_fraction allows 50.0 MiB of the 100.0 MiB device"
        ),
        "{out}"
    );
    // 30 MiB free in two pieces of one segment (20 MiB before a live 30 MiB block, 10 after),
    // 20 MiB free on the device: 40 MiB fits in neither.
    let h = write(
        &d,
        "memreuse.trace/1\nalloc 1 62914560 0\nfree 1 62914560 0\nalloc 2 20971520 0\nalloc 3 31457280 0\nfree 2 20971520 0\nalloc 4 41943040 0\nend 6\n",
    );
    let (_, out, _) = whatif(&d, &h, &["--alloc-conf", "", "--device-memory", "80MiB"]);
    assert!(
        out.contains("at entry 6: fragmentation: 20.0 MiB free on the device and 30.0 MiB cached, but no free block holds 40.0 MiB (largest 20.0 MiB)"),
        "{out}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_recommendation_names_the_roomiest_and_the_cheapest_setting() {
    let d = dir("recommend");
    let h = write(&d, THREE);
    let (_, out, _) = whatif(&d, &h, &["--alloc-conf", "", "--device-memory", "1GiB"]);
    assert!(
        out.contains("recommendation: \"\" (PyTorch defaults) fits with the most room (934.0 MiB to spare); PyTorch's defaults fit already: no change needed"),
        "{out}"
    );
    let gpt2 = Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/gpt2-small.trace.gz");
    let (_, out, _) = whatif(
        &d,
        &gpt2,
        &[
            "--alloc-conf",
            "",
            "--alloc-conf",
            "max_split_size_mb:256",
            "--alloc-conf",
            "expandable_segments:True,expandable_segments_page_size_mb:2",
            "--alloc-conf",
            "expandable_segments:True",
            "--device-memory",
            "4352MiB",
        ],
    );
    assert!(
        out.contains("recommendation: expandable_segments:True,expandable_segments_page_size_mb:2 fits with the most room (170.0 MiB to spare); the cheapest change from the defaults that fits: max_split_size_mb:256"),
        "{out}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_page_shows_the_device_and_the_reasons_and_the_terminal_says_where_files_went() {
    let d = dir("page");
    let h = write(&d, THREE);
    let json = d.join("w.json");
    let report = d.join("page");
    let (code, out, _) = whatif(
        &d,
        &h,
        &[
            "--alloc-conf",
            "",
            "--device-memory",
            "80MiB",
            "--json",
            json.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0));
    assert!(
        out.contains(&format!("wrote the JSON to {}", json.display())),
        "{out}"
    );
    let index = report.join("index.html");
    assert!(
        out.contains(&format!("wrote the page to {}", index.display())),
        "{out}"
    );
    let page = std::fs::read_to_string(&index).unwrap();
    assert!(
        page.contains("device memory 83886080 bytes (80.0 MiB)"),
        "{page}"
    );
    assert!(page.contains("no setting can fit"), "{page}");
    assert!(page.contains("out of memory at entry 3: live: "), "{page}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn json_dash_is_standard_output() {
    let d = dir("dash");
    let h = write(&d, THREE);
    let (code, out, err) = whatif(&d, &h, &["--alloc-conf", "", "--json", "-"]);
    assert_eq!(code, Some(0), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("stdout is the JSON alone");
    assert_eq!(doc["format"], "memreuse.whatif/1");
    assert!(
        err.contains("live peak 90.0 MiB"),
        "the table goes to stderr: {err}"
    );
    assert!(!d.join("-").exists(), "no file named -");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn device_memory_takes_units_and_names_itself_in_errors() {
    let d = dir("sizes");
    let h = write(&d, THREE);
    for given in ["83886080", "80MiB", "80mib", "80 MiB"] {
        let (code, out, err) = whatif(
            &d,
            &h,
            &["--alloc-conf", "", "--device-memory", given, "--json", "-"],
        );
        assert_eq!(code, Some(0), "{given}: {err}");
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(doc["device_memory_bytes"], 80 * MIB, "{given}");
    }
    for (given, says) in [
        ("7GB", "unknown unit `GB`"),
        ("-5", "`-5` is not a size"),
        ("99999999999TiB", "is more than"),
        ("5XiB", "unknown unit `XiB`"),
    ] {
        let (code, _, err) = whatif(&d, &h, &["--device-memory", given]);
        assert_eq!(code, Some(2), "{given}");
        assert!(
            err.contains("--device-memory") && err.contains(says),
            "{given}: {err}"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_alloc_conf_error_names_the_flag_and_the_setting() {
    let d = dir("conf");
    let h = write(&d, THREE);
    let (code, _, err) = whatif(&d, &h, &["--alloc-conf", "", "--alloc-conf", "bogus:1"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("whatif: --alloc-conf \"bogus:1\": unknown key `bogus`"),
        "{err}"
    );
    assert!(!err.contains("MEMREUSE_ALLOC_CONF"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}
