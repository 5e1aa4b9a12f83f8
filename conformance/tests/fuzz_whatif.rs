//! Fuzzing `whatif`'s importers (issue 27): byte-level mutations of valid histories (a
//! pickle written by Python with PyTorch's structure, a memreuse-shaped JSON snapshot, a
//! `memreuse.trace/1` file), each also gzip-compressed, imported in-process under tight
//! [`ImportLimits`]. The property: every input ends in a history or a typed
//! [`ImportError`], never a panic, and a bound is always reported as `LimitExceeded`.
//!
//! Mutations: flipped and overwritten bytes, cut files, spliced runs of hostile opcodes
//! (MARK, EMPTY_LIST, APPEND, memo references, DUP, text integers), duplicated chunks.
//! Fixed seed, fixed case count: `MEMREUSE_FUZZ_IMPORT_CASES` (default 20,000; each case
//! takes about 0.1 ms). A failure prints the input's case number.

use std::cell::Cell;
use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use memreuse_conformance::whatif::{ImportError, ImportLimits, import_reader};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

const SEED: [u8; 32] = *b"memreuse-issue-27-import-fuzz-01";

const JSON: &str = r#"{"device_total": 1073741824, "device_traces": [[
 {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "frames": [{"filename": "a.py", "line": 1, "name": "f"}]},
 {"action": "free_requested", "addr": 4096, "size": 512, "stream": 0, "frames": []},
 {"action": "free_completed", "addr": 4096, "size": 512, "stream": 0, "frames": []},
 {"action": "alloc", "addr": 8192, "size": 2097152, "stream": 7, "frames": []}
]], "segments": [{"device": 0, "address": 8192, "stream": 7, "blocks": [
 {"address": 8192, "size": 2097152, "requested_size": 2097152, "state": "active_allocated"}]}]}"#;

const TRACE: &str = "memreuse.trace/1\n# device_total: 1073741824\nalloc 1 512 0 0\n\
                     alloc 2 2097152 3 5\nfree 1 512 0 9\nfree 2 2097152 3 10\nend 4\n";

fn cases() -> u32 {
    std::env::var("MEMREUSE_FUZZ_IMPORT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn bases() -> Vec<Vec<u8>> {
    let pickle = include_bytes!("data/torch-snapshot-shaped.pickle").to_vec();
    let plain = vec![pickle, JSON.as_bytes().to_vec(), TRACE.as_bytes().to_vec()];
    let mut out = plain.clone();
    out.extend(plain.iter().map(|b| gzip(b)));
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
    enc.write_all(bytes).expect("gzip");
    enc.finish().expect("gzip")
}

/// One edit at a relative position (per mille of the length).
#[derive(Debug, Clone)]
enum Mutation {
    Flip(u16, u8),
    Set(u16, u8),
    Cut(u16),
    Splice(u16, Vec<u8>, u16),
    Duplicate(u16, u16),
}

fn hostile_run() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(vec![
        b"(".to_vec(),
        b"]".to_vec(),
        b"a".to_vec(),
        b"2".to_vec(),
        b"}".to_vec(),
        b"h\x00".to_vec(),
        b"\x94".to_vec(),
        b"I99999999999999999999999\n".to_vec(),
        b"\x8b\xff\xff\x00\x00".to_vec(),
        b"\x8d\xff\xff\xff\xff\xff\x00\x00\x00".to_vec(),
        b"cos\nsystem\n".to_vec(),
        b"[".to_vec(),
        b"{\"a\":".to_vec(),
        b"alloc 1 18446744073709551615 0\n".to_vec(),
    ])
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0..1000u16, any::<u8>()).prop_map(|(p, b)| Mutation::Flip(p, b)),
        (0..1000u16, any::<u8>()).prop_map(|(p, b)| Mutation::Set(p, b)),
        (0..1000u16).prop_map(Mutation::Cut),
        (0..1000u16, hostile_run(), 1..2000u16).prop_map(|(p, r, n)| Mutation::Splice(p, r, n)),
        (0..1000u16, 1..200u16).prop_map(|(p, n)| Mutation::Duplicate(p, n)),
    ]
}

fn at(len: usize, per_mille: u16) -> usize {
    len * usize::from(per_mille) / 1000
}

fn apply(mut bytes: Vec<u8>, edits: &[Mutation]) -> Vec<u8> {
    for edit in edits {
        let len = bytes.len().max(1);
        match edit {
            Mutation::Flip(p, b) => {
                if let Some(x) = bytes.get_mut(at(len, *p)) {
                    *x ^= b | 1;
                }
            }
            Mutation::Set(p, b) => {
                if let Some(x) = bytes.get_mut(at(len, *p)) {
                    *x = *b;
                }
            }
            Mutation::Cut(p) => bytes.truncate(at(len, *p)),
            Mutation::Splice(p, run, n) => {
                let i = at(bytes.len(), *p);
                let insert: Vec<u8> = run
                    .iter()
                    .copied()
                    .cycle()
                    .take(run.len() * usize::from(*n))
                    .collect();
                bytes.splice(i..i, insert);
            }
            Mutation::Duplicate(p, n) => {
                let i = at(bytes.len(), *p);
                let chunk: Vec<u8> = bytes[i..].iter().take(usize::from(*n)).copied().collect();
                bytes.splice(i..i, chunk);
            }
        }
    }
    bytes
}

#[test]
fn mutated_histories_import_or_fail_with_a_typed_error() {
    let bases = bases();
    let limits = ImportLimits {
        file_bytes: 1 << 20,
        decompressed_bytes: 4 << 20,
        depth: 4096,
        elements: 100_000,
        memo_copies: 100_000,
        string_bytes: 64 << 10,
        trace_entries: 100_000,
        ..ImportLimits::default()
    };
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 0,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &SEED));
    let strategy = (0..bases.len(), prop::collection::vec(mutation(), 1..4));
    let outcomes: [Cell<u32>; 3] = Default::default();
    let bump = |i: usize| outcomes[i].set(outcomes[i].get() + 1);
    let result = runner.run(&strategy, |(which, edits)| {
        let input = apply(bases[which].clone(), &edits);
        match import_reader("fuzz", input.as_slice(), None, &limits) {
            Ok(h) => {
                prop_assert!(h.entries.len() <= 100_000);
                bump(0);
            }
            Err(ImportError::LimitExceeded { .. }) => bump(1),
            Err(e) => {
                // Every other error names the file and says what is wrong.
                prop_assert!(e.to_string().starts_with("fuzz") || e.to_string().contains("fuzz"));
                bump(2);
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let counts = outcomes.map(Cell::into_inner);
    assert_eq!(counts.iter().sum::<u32>(), cases());
    // The mutations reach all three outcomes.
    assert!(counts.iter().all(|&n| n > 0), "{counts:?}");
}
