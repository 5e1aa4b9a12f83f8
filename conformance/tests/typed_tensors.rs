//! Typed tensors in schedules (docs/schedule-format.md "Typed tensors"): the bad input
//! `validate` refuses (exit 2, with the reason), element sizes in the byte figures, the
//! digest over each value's own bytes, the generators' `--dtype`, and the built-in typed
//! schedules replayed on the mock in every mode.

use std::path::PathBuf;
use std::process::{Command, Output};

use memreuse_conformance::replay::{ModeChoice, ReplayOptions, replay};
use memreuse_conformance::report::RunStatus;
use memreuse_conformance::suite::suite;
use memreuse_conformance::validate::load_str;

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(args)
        .output()
        .expect("runs")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memreuse-typed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A schedule of `world` ranks whose body is `body` (a JSON list's inside).
fn schedule(world: usize, body: &str) -> String {
    format!(
        r#"{{"format": "memreuse.schedule/1", "name": "typed", "world_size": {world},
            "body": [{body}]}}"#
    )
}

/// `validate` on `text` through the binary: its exit status and output.
fn validate(name: &str, text_: &str) -> (Option<i32>, String) {
    let path = tmp(name);
    std::fs::write(&path, text_).expect("write");
    let o = cli(&["validate", path.to_str().expect("utf-8")]);
    (o.status.code(), text(&o))
}

fn refused(name: &str, text_: &str, needles: &[&str]) {
    let (code, out) = validate(name, text_);
    assert_eq!(code, Some(2), "{name}: {out}");
    for n in needles {
        assert!(out.contains(n), "{name}: no {n:?} in {out}");
    }
}

#[test]
fn an_unknown_dtype_is_refused_with_the_valid_names() {
    refused(
        "unknown-dtype.json",
        &schedule(
            1,
            r#"{"op": "alloc", "t": "a", "elems": 16, "dtype": "bfloat16"}, {"op": "free", "t": "a"}"#,
        ),
        &[
            "\"bfloat16\"",
            "f32, f16, bf16, f64, i8, u8, i32, u32, i64, u64, f8e4m3, f8e5m2",
        ],
    );
}

#[test]
fn ops_across_types_are_refused_naming_both() {
    let pair = r#"{"op": "alloc", "t": "a", "elems": 64, "dtype": "bf16"},
        {"op": "alloc", "t": "b", "elems": 64}, {"op": "upload", "t": "a", "seed": 1}"#;
    refused(
        "cross-copy.json",
        &schedule(
            1,
            &format!(
                r#"{pair}, {{"op": "copy", "src": "a", "dst": "b"}},
                {{"op": "free", "t": "a"}}, {{"op": "free", "t": "b"}}"#
            ),
        ),
        &["copy", "\"a\" is bf16", "\"b\" is f32"],
    );
    refused(
        "cross-gather.json",
        &schedule(
            1,
            &format!(
                r#"{pair}, {{"op": "all_gather", "in": "a", "out": "b"}},
                {{"op": "free", "t": "a"}}, {{"op": "free", "t": "b"}}"#
            ),
        ),
        &["all_gather", "bf16", "f32"],
    );
    // A send and its recv in different types.
    refused(
        "cross-p2p.json",
        &schedule(
            2,
            r#"{"op": "alloc", "t": "a", "elems": 16, "dtype": "i32", "ranks": [0]},
               {"op": "alloc", "t": "a", "elems": 16, "dtype": "u32", "ranks": [1]},
               {"op": "upload", "t": "a", "seed": 1, "ranks": [0]},
               {"op": "send", "t": "a", "peer": 1, "ranks": [0]},
               {"op": "recv", "t": "a", "peer": 0, "ranks": [1]},
               {"op": "free", "t": "a"}"#,
        ),
        &["i32 here, u32 at the peer"],
    );
    // The members of one collective in different types.
    refused(
        "cross-collective.json",
        &schedule(
            2,
            r#"{"op": "alloc", "t": "g", "elems": 16, "dtype": "bf16", "ranks": [0]},
               {"op": "alloc", "t": "g", "elems": 16, "ranks": [1]},
               {"op": "upload", "t": "g", "seed": 1}, {"op": "all_reduce", "t": "g"},
               {"op": "free", "t": "g"}"#,
        ),
        &["all_reduce(16) dtype=bf16"],
    );
}

/// The issue's example: 64 ranks of seed 7 over 4,096 bf16 elements reach 257 > 2^8;
/// 32 ranks stay inside.
#[test]
fn an_inexact_reduction_is_refused_naming_the_type_and_the_bound() {
    let body = r#"{"op": "alloc", "t": "g", "elems": 4096, "dtype": "bf16"},
        {"op": "upload", "t": "g", "seed": 7}, {"op": "all_reduce", "t": "g"},
        {"op": "check", "t": "g"}, {"op": "free", "t": "g"}"#;
    refused("bf16-64.json", &schedule(64, body), &["bf16", "257 > 2^8"]);
    let (code, out) = validate("bf16-32.json", &schedule(32, body));
    assert_eq!(code, Some(0), "{out}");
    // Integers: every intermediate inside the range (u8 sums of 0..=250 overflow at once).
    refused(
        "u8-sum.json",
        &schedule(
            2,
            r#"{"op": "alloc", "t": "m", "elems": 16, "dtype": "u8"},
               {"op": "upload", "t": "m", "seed": 1}, {"op": "all_reduce", "t": "m"},
               {"op": "free", "t": "m"}"#,
        ),
        &["range of u8 (0..=255)"],
    );
}

#[test]
fn fp8_reductions_and_avg_are_refused() {
    for dtype in ["f8e4m3", "f8e5m2"] {
        refused(
            &format!("{dtype}-reduce.json"),
            &schedule(
                2,
                &format!(
                    r#"{{"op": "alloc", "t": "w", "elems": 16, "dtype": "{dtype}"}},
                    {{"op": "upload", "t": "w", "seed": 1}},
                    {{"op": "all_reduce", "t": "w", "reduce": "max"}},
                    {{"op": "free", "t": "w"}}"#
                ),
            ),
            &[dtype, "data movement only"],
        );
    }
    refused(
        "avg.json",
        &schedule(
            2,
            r#"{"op": "alloc", "t": "g", "elems": 16, "dtype": "bf16"},
               {"op": "upload", "t": "g", "seed": 1},
               {"op": "all_reduce", "t": "g", "reduce": "avg"}, {"op": "free", "t": "g"}"#,
        ),
        &["avg", "not exact", "sum, prod, max, min"],
    );
}

/// Bytes are elems x the type's size; the digest hashes each value's own bytes (bf16: the
/// upper half of the f32 encoding), so a file without `dtype` keeps its f32 digest.
#[test]
fn byte_figures_and_digest_follow_the_element_type() {
    let one = |dtype: &str| {
        load_str(
            "t",
            &schedule(
                1,
                &format!(
                    r#"{{"op": "alloc", "t": "a", "elems": 1000, "dtype": "{dtype}"}},
                    {{"op": "upload", "t": "a", "seed": 3}}, {{"op": "check", "t": "a"}},
                    {{"op": "free", "t": "a"}}"#
                ),
            ),
        )
        .expect("valid")
    };
    for (dtype, size) in [
        ("f32", 4),
        ("bf16", 2),
        ("f64", 8),
        ("u8", 1),
        ("f8e5m2", 1),
    ] {
        assert_eq!(one(dtype).reference.live_peak_bytes, 1000 * size, "{dtype}");
    }
    let pattern = |i: u64| (3 * 1_000_003 + i * 31) % 251;
    let fnv = |bytes: &[u8]| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{h:016x}")
    };
    #[allow(clippy::cast_possible_wrap, clippy::cast_precision_loss)]
    let bf16: Vec<u8> = (0..1000)
        .flat_map(|i| {
            let v = (pattern(i) % 15) as f32 - 7.0;
            (((v.to_bits() >> 16) as u16).to_le_bytes()).to_vec()
        })
        .collect();
    assert_eq!(one("bf16").reference.digest, fnv(&bf16));
    let i64s: Vec<u8> = (0..1000)
        .flat_map(|i| (pattern(i) as i64 - 125).to_le_bytes())
        .collect();
    assert_eq!(one("i64").reference.digest, fnv(&i64s));
    let u8s: Vec<u8> = (0..1000)
        .map(|i| u8::try_from(pattern(i)).expect("< 251"))
        .collect();
    assert_eq!(one("u8").reference.digest, fnv(&u8s));
    // `dtype: f32` and no dtype are the same schedule.
    let plain = load_str(
        "t",
        &schedule(
            1,
            r#"{"op": "alloc", "t": "a", "elems": 1000}, {"op": "upload", "t": "a", "seed": 3},
               {"op": "check", "t": "a"}, {"op": "free", "t": "a"}"#,
        ),
    )
    .expect("valid");
    assert_eq!(plain.reference.digest, one("f32").reference.digest);
}

#[test]
fn generators_take_dtype() {
    let out = tmp("ddp-bf16.json");
    let path = out.to_str().expect("utf-8");
    let o = cli(&["generate", "ddp", "--dtype", "bf16", "-o", path]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let written = std::fs::read_to_string(&out).expect("written");
    assert!(written.contains("\"dtype\": \"bf16\""), "{written}");
    let v = cli(&["validate", path]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
    // ddp reduces its buckets: fp8 cannot, and says why.
    let o = cli(&["generate", "ddp", "--dtype", "f8e4m3", "-o", path]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("data movement only"), "{}", text(&o));
    let o = cli(&["generate", "ddp", "--dtype", "bfloat16", "-o", path]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("f8e4m3, f8e5m2"), "{}", text(&o));
}

/// Every built-in schedule's reference digest and live peak. The f32 ones (up to
/// `single-rank-streams`) are the values computed before typed tensors existed, unchanged
/// byte for byte; the typed ones are pinned so that a change to the reference model shows
/// (their live peaks count each type's size: bf16-gradients' 672 elements are 1,344
/// bytes).
const PINNED: &[(&str, &str, u64)] = &[
    ("ddp", "8db48ea59793f543", 4096),
    ("fsdp", "945fa82fd3add883", 15360),
    ("tp", "1ee7b18b8ad84f04", 4096),
    ("ep", "c0ef3b7298d08c11", 12288),
    ("pp", "6cbbd49d001b25b0", 4096),
    ("moe-mixed", "70aeeda89e1fe580", 10240),
    ("free-before-wait", "58b7cc10fd8a44a3", 6144),
    ("never-wait", "fe289051865c0439", 2048),
    ("late-wait", "e533ff4c59936345", 2048),
    ("p2p-mode2", "6d129b3de4e40c7e", 3072),
    ("oom-pressure", "c904e812e191983b", 29_376_512),
    ("e1-ddp-buckets", "9d15e2948ee6df12", 20480),
    ("e2-p2p-batch", "7698544667991271", 2048),
    ("side-stream-free-before-wait", "bb882be5eb0f26c8", 16384),
    ("two-inflight-one-tensor", "247aa9d26601df0f", 16384),
    ("ddp-ws1", "abeb9f859e3e55d3", 4096),
    ("fsdp-ws1", "13c1465648f597b6", 6144),
    ("free-before-wait-ws1", "feef00d418112013", 4096),
    ("single-rank-streams", "6a0a13be4fd9c340", 20480),
    ("bf16-gradients", "20c6c1a91d25cbbc", 1344),
    ("f16-shards", "1374fe2945f6cf1b", 512),
    ("i64-indices", "c30a12510afc56e1", 2304),
    ("u8-buffers", "58699b17d5229ce0", 1792),
    ("mixed-precision-step", "01885b616d08e581", 3776),
];

const TYPED: &[&str] = &[
    "bf16-gradients",
    "f16-shards",
    "i64-indices",
    "u8-buffers",
    "mixed-precision-step",
];

#[test]
fn suite_digests_are_pinned_and_f32_ones_unchanged() {
    let entries = suite("builtin").expect("builtin suite builds");
    let mut seen = Vec::new();
    for e in &entries {
        let (name, r) = (&e.valid.schedule.name, &e.valid.reference);
        println!("{name} {} {}", r.digest, r.live_peak_bytes);
        if let Some((_, digest, peak)) = PINNED.iter().find(|p| p.0 == name) {
            assert_eq!(
                (r.digest.as_str(), r.live_peak_bytes),
                (*digest, *peak),
                "{name}"
            );
            seen.push(name.clone());
        }
    }
    assert_eq!(seen.len(), PINNED.len(), "{seen:?}");
    for t in TYPED {
        assert!(entries.iter().any(|e| e.valid.schedule.name == *t), "{t}");
    }
}

#[test]
fn typed_suite_schedules_pass_on_the_mock_in_every_mode() {
    for entry in suite("builtin").expect("builtin suite builds") {
        let s = &entry.valid.schedule;
        if !TYPED.contains(&s.name.as_str()) {
            continue;
        }
        for mode in ModeChoice::public_modes() {
            let r = replay(s, &entry.valid.reference, &ReplayOptions::new("mock", mode)).record;
            assert_eq!(
                r.status,
                RunStatus::Passed,
                "{} mode {}: {:?} {:?}",
                s.name,
                mode.name(),
                r.error,
                r.race_examples
            );
            assert_eq!(
                r.digest.as_deref(),
                Some(entry.valid.reference.digest.as_str())
            );
        }
    }
}

/// The RFC suite's digests from before typed tensors (run with `--ignored`: building the
/// suite takes longer than CI's budget for this check).
#[test]
#[ignore = "builds the RFC suite (about 30 s): run with --ignored"]
fn rfc_suite_digests_are_unchanged() {
    let pinned = [
        ("moe-mixed-rfc", "06d11da008233890", 655_360),
        ("late-wait-rfc", "92580a424cf57ce5", 524_288),
        ("fsdp-large-rfc", "73e6b9290247b74b", 96_468_992),
    ];
    let entries = suite("rfc").expect("rfc suite builds");
    assert_eq!(entries.len(), pinned.len());
    for (e, (name, digest, peak)) in entries.iter().zip(pinned) {
        let r = &e.valid.reference;
        assert_eq!(e.valid.schedule.name, name);
        assert_eq!(
            (r.digest.as_str(), r.live_peak_bytes),
            (digest, peak),
            "{name}"
        );
    }
}

/// A batch member carries its tensor's element type: ten u8 elements (10 bytes, not a
/// whole number of f32s) go through `batch_isend_irecv` and arrive intact on every mode.
#[test]
fn a_batch_of_u8_tensors_runs_in_every_mode() {
    let body = r#"
        {"op": "alloc", "t": "s", "elems": 10, "dtype": "u8"},
        {"op": "upload", "t": "s", "seed": 3},
        {"op": "alloc", "t": "r", "elems": 10, "dtype": "u8"},
        {"op": "batch", "ops": [{"op": "send", "t": "s", "peer": 1}], "ranks": [0]},
        {"op": "batch", "ops": [{"op": "recv", "t": "r", "peer": 0}], "ranks": [1]},
        {"op": "check", "t": "r", "ranks": [1]},
        {"op": "free", "t": "s"},
        {"op": "free", "t": "r"}"#;
    let path = tmp("u8-batch.json");
    std::fs::write(&path, schedule(2, body)).expect("write");
    let o = cli(&[
        "run",
        "--schedule",
        path.to_str().expect("utf-8"),
        "--backend",
        "mock",
        "--mode",
        "all",
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("4 passed"), "{out}");
}
