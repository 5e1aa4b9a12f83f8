//! The `memreuse-cuda-bench` binary as a process: a skip (exit 0) without a driver, a short
//! real run with one, exit 2 on bad arguments; and the Python peer's self-test on a trace the
//! Rust writer wrote. On the GPU machine (no source tree, no cargo) the binary is found
//! through `MEMREUSE_CUDA_BENCH_BIN`; what cannot be found prints `skipped: ...`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use memreuse_cuda::bench::trace::{Trace, TraceSpec};
use memreuse_cuda::device_count;

fn bench_bin() -> Option<PathBuf> {
    let path = std::env::var_os("MEMREUSE_CUDA_BENCH_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_memreuse-cuda-bench")),
        PathBuf::from,
    );
    if path.exists() {
        Some(path)
    } else {
        println!("skipped: bench binary not found at {}", path.display());
        None
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memreuse-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .output()
        .expect("spawn the bench")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("json file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn without_a_driver_a_required_device_fails_the_bench() {
    let Some(bin) = bench_bin() else { return };
    if device_count().is_ok() {
        println!("skipped: a CUDA driver is present");
        return;
    }
    let out = Command::new(&bin)
        .args(["--pairs", "10", "--trace-ops", "100", "--raw-pairs", "1"])
        .env("MEMREUSE_REQUIRE_DEVICE", "1")
        .output()
        .expect("spawn the bench");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("unavailable"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bench_skips_without_a_driver_and_runs_briefly_with_one() {
    let Some(bin) = bench_bin() else { return };
    let dir = scratch("run");
    let (trace, json) = (dir.join("trace.txt"), dir.join("bench.jsonl"));
    let out = run(
        &bin,
        &[
            "--write-trace",
            trace.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
            "--pairs",
            "200",
            "--raw-pairs",
            "20",
            "--warmup",
            "5",
            "--trace-ops",
            "2_000",
            "--raw-trace-ops",
            "300",
            "--max-live",
            "32",
            "--max-live-mib",
            "512",
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", out.status);
    // The trace is written before CUDA is touched, and is what the generator makes.
    let written = Trace::read_from(&trace).expect("a valid trace file");
    let spec = TraceSpec {
        ops: 2_000,
        max_live: 32,
        max_live_bytes: 512 << 20,
        ..TraceSpec::GPU
    };
    assert_eq!(written, Trace::generate(&spec).unwrap());
    let records = json_lines(&json);
    match device_count() {
        Err(e) => {
            assert!(stdout.starts_with("skipped: "), "{stdout}");
            assert!(stdout.contains("unavailable"), "{stdout}");
            assert_eq!(records.len(), 2, "{records:?}");
            assert!(records.iter().all(|r| r["skipped"].is_string()));
            println!("no driver ({e}): the bench skipped as it should");
        }
        Ok(n) => {
            println!("CUDA driver present ({n} device(s)): short real run\n{stderr}");
            let names: Vec<(String, String)> = records
                .iter()
                .map(|r| {
                    let s = |k: &str| r[k].as_str().unwrap_or("?").to_owned();
                    (s("peer"), s("workload"))
                })
                .collect();
            for want in [
                ("memreuse", "pair_4KiB"),
                ("memreuse", "pair_2MiB"),
                ("memreuse", "trace_cold"),
                ("memreuse", "trace"),
                ("raw-cuMemAlloc", "pair_4KiB"),
                ("raw-cuMemAlloc", "trace"),
            ] {
                let want = (want.0.to_owned(), want.1.to_owned());
                assert!(names.contains(&want), "{want:?} missing from {names:?}");
            }
            for r in &records {
                assert!(r["ns_per_op"].as_f64().unwrap() > 0.0, "{r}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_arguments_exit_2_with_a_reason() {
    let Some(bin) = bench_bin() else { return };
    for (args, says) in [
        (&["--pairs", "0"][..], "must be at least 1"),
        (&["--pairs", "many"][..], "is not a whole number"),
        (&["--max-live", "70000"][..], "out of range"),
        (&["--max-live-mib", "1"][..], "below the largest size"),
        (&["--no-such-flag"][..], "unexpected argument"),
    ] {
        let out = run(&bin, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn python_peer_self_test_reads_the_rust_trace() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu_peer_bench.py");
    if !script.exists() {
        println!("skipped: {} not found", script.display());
        return;
    }
    let dir = scratch("py");
    let trace = dir.join("trace.txt");
    let t = Trace::generate(&TraceSpec {
        ops: 5_000,
        ..TraceSpec::GPU
    })
    .unwrap();
    t.write_to(&trace).unwrap();
    let out = match Command::new("python3")
        .arg(&script)
        .arg("--self-test")
        .arg("--trace")
        .arg(&trace)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            println!("skipped: python3 not runnable ({e})");
            return;
        }
    };
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("self-test: ok"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "{} ops, 256 slots, live peak {} B",
            t.ops.len(),
            t.live_peak_bytes
        )),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
