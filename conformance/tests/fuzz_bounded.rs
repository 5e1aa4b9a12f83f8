//! Fuzzing the schedule parser and validator through the command line, on the stable
//! toolchain: hostile mutations of valid schedules (huge counts and sizes, long names,
//! duplicate keys, deep nesting, repeated ops), each validated by a fresh
//! `memreuse-conformance validate` under `ulimit -t <cpu> -v 524288`. The property: every
//! input ends in exit 0, 1 or 2 within 2 s of CPU and 512 MiB (a signal, a panic's 101
//! or an abort fails it).
//!
//! The 2 s hold for the release binary, which `.ci/fuzz` points `MEMREUSE_FUZZ_BIN` at.
//! The debug binary `cargo test` builds is about five times slower, so without
//! `MEMREUSE_FUZZ_BIN` the CPU allowance is 10 s (`MEMREUSE_FUZZ_CPU_S` overrides both).
//!
//! Fixed seed, fixed case count: `MEMREUSE_FUZZ_CASES` (default 24, so `cargo test`
//! stays quick; `.ci/fuzz` runs more). A failure prints the input file, which is kept;
//! the run stops at the first one (no shrinking: each case is a process).

use std::path::PathBuf;
use std::process::Command;

use memreuse_conformance::generate::{GenOptions, generate};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};

const SEED: [u8; 32] = *b"memreuse-issue-12-fuzz-seed-0001";
/// Largest input text built by a mutation (about 4 MB).
const MAX_TEXT_BYTES: usize = 4 << 20;

/// The binary under test; `MEMREUSE_FUZZ_BIN` points elsewhere (an older build, to show
/// what the fuzz finds there).
fn binary() -> String {
    std::env::var("MEMREUSE_FUZZ_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_memreuse-conformance").to_owned())
}

/// CPU seconds one input may use (see the module doc).
fn cpu_seconds() -> u32 {
    std::env::var("MEMREUSE_FUZZ_CPU_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if std::env::var_os("MEMREUSE_FUZZ_BIN").is_some() {
            2
        } else {
            10
        })
}

fn cases() -> u32 {
    std::env::var("MEMREUSE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// Valid schedules to mutate: the examples and small generated presets.
fn bases() -> Vec<Value> {
    let mut out: Vec<Value> = [
        include_str!("data/e1-ddp-buckets.json"),
        include_str!("data/e2-p2p-batch.json"),
    ]
    .iter()
    .map(|t| serde_json::from_str(t).expect("JSON"))
    .collect();
    let opts = GenOptions {
        layers: 1,
        elems: 16,
        iterations: 1,
        ..GenOptions::default()
    };
    for preset in ["ddp", "fsdp", "pp", "moe-mixed", "p2p-mode2"] {
        let s = generate(preset, &opts).expect("generates");
        out.push(serde_json::from_str(&s.to_json_string()).expect("JSON"));
    }
    out
}

/// Values an adversary would try: limits, one past them, and absurd ones.
fn hostile() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => prop::sample::select(vec![
            json!(0),
            json!(1),
            json!(-1),
            json!(1024),
            json!(1025),
            json!(10_000),
            json!(10_001),
            json!(1u64 << 26),
            json!((1u64 << 26) + 1),
            json!(u32::MAX),
            json!(u64::MAX),
            json!(1e308),
            json!(null),
            json!({}),
            json!([]),
        ]),
        1 => (1usize..300).prop_map(|n| json!("n".repeat(n))),
        1 => (1usize..2000).prop_map(|n| json!((0..n).collect::<Vec<_>>())),
    ]
}

/// Every JSON pointer inside `v`.
fn pointers(v: &Value, at: &str, out: &mut Vec<String>) {
    out.push(at.to_owned());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                pointers(
                    x,
                    &format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                pointers(x, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// One mutation, as text (duplicate keys and deep nesting cannot be built as a `Value`).
#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the node at the `pick`-th pointer.
    Replace(usize, Value),
    /// Repeat the body `times` times.
    RepeatBody(usize),
    /// Add a duplicate of a top-level key.
    DuplicateKey(usize),
    /// Wrap the body in `depth` arrays.
    Nest(usize),
    /// Set a top-level count (`iterations`, `world_size`, `device_memory`).
    SetTop(&'static str, Value),
    /// Set a size field of the `pick`-th body op (`elems`, `us`, `peer`, `root`, `seed`).
    SetOpField(usize, &'static str, Value),
    /// Insert an op at the front of the body.
    AddOp(Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), hostile()).prop_map(|(p, v)| Mutation::Replace(p, v)),
        1 => (2usize..3000).prop_map(Mutation::RepeatBody),
        1 => any::<usize>().prop_map(Mutation::DuplicateKey),
        1 => (1usize..400).prop_map(Mutation::Nest),
        3 => (prop::sample::select(vec!["iterations", "world_size", "device_memory"]), hostile())
            .prop_map(|(k, v)| Mutation::SetTop(k, v)),
        3 => (any::<usize>(), prop::sample::select(vec!["elems", "us", "peer", "root", "seed"]), hostile())
            .prop_map(|(p, k, v)| Mutation::SetOpField(p, k, v)),
        2 => prop_oneof![
            hostile().prop_map(|us| json!({"op": "delay", "us": us})),
            hostile().prop_map(|e| json!({"op": "alloc", "t": "fuzz", "elems": e})),
            Just(json!({"op": "zero", "t": "fuzz"})),
            Just(json!({"op": "check", "t": "fuzz"})),
            Just(json!({"op": "barrier", "group": "fuzz"})),
        ]
        .prop_map(Mutation::AddOp),
    ]
}

fn apply(mut v: Value, edits: &[Mutation]) -> String {
    let mut prefix = String::new();
    let mut nest = 0;
    for m in edits {
        match m {
            Mutation::Replace(pick, value) => {
                let mut all = Vec::new();
                pointers(&v, "", &mut all);
                let target = all[pick % all.len()].clone();
                if let Some(node) = v.pointer_mut(&target) {
                    *node = value.clone();
                }
            }
            Mutation::RepeatBody(times) => {
                if let Some(Value::Array(body)) = v.get_mut("body") {
                    let copy = body.clone();
                    // Inputs stay under MAX_TEXT_BYTES: the harness itself is not limited.
                    let len = Value::Array(copy.clone()).to_string().len().max(1);
                    for _ in 1..(*times).min(MAX_TEXT_BYTES / len) {
                        body.extend(copy.iter().cloned());
                    }
                }
            }
            Mutation::DuplicateKey(pick) => {
                if let Some(m) = v.as_object()
                    && !m.is_empty()
                {
                    let (k, x) = m.iter().nth(pick % m.len()).expect("in range");
                    prefix = format!("{}:{},", json!(k), x);
                }
            }
            Mutation::Nest(depth) => nest = *depth,
            Mutation::SetTop(key, value) => {
                if let Some(m) = v.as_object_mut() {
                    m.insert((*key).to_owned(), value.clone());
                }
            }
            Mutation::SetOpField(pick, key, value) => {
                if let Some(Value::Array(body)) = v.get_mut("body")
                    && !body.is_empty()
                {
                    let n = body.len();
                    if let Some(op) = body[pick % n].as_object_mut() {
                        op.insert((*key).to_owned(), value.clone());
                    }
                }
            }
            Mutation::AddOp(op) => {
                if let Some(Value::Array(body)) = v.get_mut("body") {
                    body.insert(0, op.clone());
                }
            }
        }
    }
    let mut text = v.to_string();
    if nest > 0 {
        text = text.replacen("\"body\":", &format!("\"body\":{}", "[".repeat(nest)), 1);
        if let Some(end) = text.rfind('}') {
            text.insert_str(end, &"]".repeat(nest));
        }
    }
    if !prefix.is_empty() {
        text.insert_str(1, &prefix);
    }
    text
}

/// Validates `text` in a fresh process under the CPU and memory limits.
fn validate_bounded(dir: &std::path::Path, n: usize, text: &str) -> Result<(), String> {
    let path: PathBuf = dir.join(format!("case-{n}.json"));
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    let o = Command::new("sh")
        .arg("-c")
        // One option per `ulimit` call: dash takes no more.
        .arg(format!(
            "ulimit -t {} && ulimit -v 524288 && exec \"$@\"",
            cpu_seconds()
        ))
        .arg("sh")
        .arg(binary())
        .arg("validate")
        .arg(&path)
        .output()
        .map_err(|e| e.to_string())?;
    match o.status.code() {
        // `validate` prints a verdict or the errors: output proves it ran (not the shell).
        Some(0..=2) if !o.stdout.is_empty() => {
            let _ = std::fs::remove_file(&path);
            Ok(())
        }
        code => Err(format!(
            "{}: exit {code:?} (a signal if None), {} bytes of output: {}",
            path.display(),
            o.stdout.len(),
            String::from_utf8_lossy(&o.stderr)
        )),
    }
}

#[test]
fn hostile_schedules_end_in_exit_0_1_or_2_within_the_cpu_and_memory_limits() {
    let dir = std::env::temp_dir().join(format!("memreuse-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bases = bases();
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 0,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &SEED));
    let counter = std::sync::atomic::AtomicUsize::new(0);
    let strategy = (0..bases.len(), prop::collection::vec(mutation(), 1..4));
    let result = runner.run(&strategy, |(which, edits)| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let text = apply(bases[which].clone(), &edits);
        validate_bounded(&dir, n, &text).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert_eq!(
        counter.load(std::sync::atomic::Ordering::Relaxed),
        cases() as usize
    );
}
