//! Hostile histories (issue 27, "whatif has no memory bound"): each ends in a typed error
//! (`LimitExceeded` naming its bound, or a shape error) instead of filling memory,
//! overflowing the stack, taking quadratic time or executing anything. The inputs are built
//! here; every one of them aborted or ran for minutes on the serde-pickle importer.

use std::fmt::Write as _;
use std::io::Write;
use std::process::Command;

use flate2::Compression;
use flate2::write::GzEncoder;
use memreuse_conformance::whatif::{
    ImportError, ImportLimits, Limit, import_bytes, import_file, import_file_with, import_reader,
};

const PROTO: &[u8] = &[0x80, 0x04];
const EMPTY_LIST: u8 = b']';
const EMPTY_DICT: u8 = b'}';
const MARK: u8 = b'(';
const APPEND: u8 = b'a';
const APPENDS: u8 = b'e';
const SETITEMS: u8 = b'u';
const MEMOIZE: u8 = 0x94;
const BINGET: u8 = b'h';
const STOP: u8 = b'.';
const POP: u8 = b'0';

fn short_str(out: &mut Vec<u8>, s: &str) {
    out.push(0x8c);
    out.push(u8::try_from(s.len()).unwrap());
    out.extend_from_slice(s.as_bytes());
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn limit_of(result: Result<memreuse_conformance::whatif::ReplayHistory, ImportError>) -> Limit {
    match result {
        Err(ImportError::LimitExceeded { limit, .. }) => limit,
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

fn is_shape(result: &Result<memreuse_conformance::whatif::ReplayHistory, ImportError>) -> bool {
    matches!(result, Err(ImportError::Shape { .. }))
}

/// `{"device_traces": [L40]}` where `L(k+1) = [Lk, Lk]`: 2^40 leaves if copied, a few
/// hundred bytes and 80 shared references here.
#[test]
fn a_list_doubled_forty_times_is_shared_not_copied() {
    let mut p = PROTO.to_vec();
    p.extend([EMPTY_DICT, MEMOIZE]); // memo 0
    short_str(&mut p, "device_traces");
    p.push(MEMOIZE); // memo 1
    p.extend([EMPTY_LIST, MEMOIZE]); // memo 2: the device list
    p.extend([EMPTY_LIST, MEMOIZE, POP]); // memo 3: L0
    for k in 0..40u8 {
        // memo 4 + k: L(k+1) = [Lk, Lk]
        p.extend([
            EMPTY_LIST,
            MEMOIZE,
            MARK,
            BINGET,
            3 + k,
            BINGET,
            3 + k,
            APPENDS,
            POP,
        ]);
    }
    p.extend([BINGET, 43, APPEND, b's', STOP]);
    let result = import_bytes("double.pickle", &p, None);
    match &result {
        Err(ImportError::Shape { at, message, .. }) => {
            assert_eq!(at, "device_traces[0][0]");
            assert!(
                message.contains("expected a dict, found a list"),
                "{message}"
            );
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
}

/// One dict of 5,000 pairs referred to by 5,000 trace entries: 25 million items if each
/// reference were a copy.
#[test]
fn a_container_shared_by_many_entries_is_bounded_by_memo_copies() {
    let mut p = PROTO.to_vec();
    p.extend([EMPTY_DICT, MEMOIZE]); // 0: root
    short_str(&mut p, "device_traces");
    p.push(MEMOIZE); // 1
    p.extend([EMPTY_LIST, MEMOIZE, EMPTY_LIST, MEMOIZE]); // 2: devices, 3: entries
    p.extend([EMPTY_DICT, MEMOIZE]); // 4: the shared entry
    short_str(&mut p, "action");
    p.extend([MEMOIZE, POP]); // 5
    short_str(&mut p, "snapshot");
    p.extend([MEMOIZE, POP]); // 6
    p.push(MARK);
    for _ in 0..5000 {
        p.extend([BINGET, 5, BINGET, 6]);
    }
    p.push(SETITEMS);
    p.push(POP); // pop the dict, the entries list is on top
    p.push(MARK);
    for _ in 0..5000 {
        p.extend([BINGET, 4]);
    }
    p.extend([APPENDS, APPEND, b's', STOP]);
    assert_eq!(
        limit_of(import_bytes("shared.pickle", &p, None)),
        Limit::MemoCopies
    );
}

/// 1 MB of MARK opcodes (and the same as a 1 KB gzip).
#[test]
fn a_megabyte_of_marks_exceeds_the_depth() {
    let mut p = PROTO.to_vec();
    p.extend(std::iter::repeat_n(MARK, 1 << 20));
    assert_eq!(
        limit_of(import_bytes("marks.pickle", &p, None)),
        Limit::Depth
    );
    let z = gzip(&p);
    assert!(z.len() < 10_000, "{}", z.len());
    assert_eq!(
        limit_of(import_bytes("marks.pickle.gz", &z, None)),
        Limit::Depth
    );
}

/// A gzip holding a list of ten million items (one MARK, the items, one APPENDS): the
/// stack bound stops it long before the items are kept; one APPEND per item is held to
/// the element bound.
#[test]
fn a_gzip_of_millions_of_items_is_bounded() {
    let mut p = PROTO.to_vec();
    p.extend([EMPTY_LIST, MARK]);
    for _ in 0..10_000_000 {
        p.extend([b'K', 7]);
    }
    p.extend([APPENDS, STOP]);
    let z = gzip(&p);
    assert!(z.len() < 200_000, "{}", z.len());
    assert_eq!(
        limit_of(import_bytes("items.pickle.gz", &z, None)),
        Limit::Depth
    );

    let mut p = PROTO.to_vec();
    p.push(EMPTY_LIST);
    for _ in 0..2_000_000 {
        p.extend([b'K', 7, APPEND]);
    }
    p.push(STOP);
    let limits = ImportLimits {
        elements: 1_000_000,
        ..ImportLimits::default()
    };
    assert_eq!(
        limit_of(import_reader(
            "appends.pickle.gz",
            gzip(&p).as_slice(),
            None,
            &limits
        )),
        Limit::Elements
    );
}

/// A gzip of zeros is refused at its first byte; a gzip whose content goes on past the
/// bound is refused at the bound, not after holding it.
#[test]
fn gzip_bombs_stop_at_the_first_byte_or_the_decompressed_bound() {
    let zeros = gzip(&vec![0u8; 64 << 20]);
    assert!(matches!(
        import_bytes("zeros.gz", &zeros, None),
        Err(ImportError::UnknownFormat { .. })
    ));
    // A valid start, then a skipped 2^40-byte value (a stack frame's bytes) of zeros.
    let mut p = PROTO.to_vec();
    p.extend([EMPTY_DICT, MEMOIZE]);
    short_str(&mut p, "frames");
    p.push(0x8e);
    p.extend_from_slice(&(1u64 << 40).to_le_bytes());
    p.extend(std::iter::repeat_n(0u8, 8 << 20));
    let limits = ImportLimits {
        decompressed_bytes: 4 << 20,
        ..ImportLimits::default()
    };
    assert_eq!(
        limit_of(import_reader("bomb.gz", gzip(&p).as_slice(), None, &limits)),
        Limit::DecompressedBytes
    );
    // A string kept in memory is bounded by its own limit before it is read.
    let mut p = PROTO.to_vec();
    p.push(0x8d);
    p.extend_from_slice(&(1u64 << 40).to_le_bytes());
    assert_eq!(
        limit_of(import_bytes("long.pickle", &p, None)),
        Limit::StringBytes
    );
}

/// Endless input (a device like /dev/zero, a FIFO) is read up to the file bound; a regular
/// file over it is refused before anything is read.
#[test]
fn endless_and_oversized_inputs_stop_at_the_file_bound() {
    assert!(matches!(
        import_file(std::path::Path::new("/dev/zero"), None),
        Err(ImportError::UnknownFormat { .. })
    ));
    let limits = ImportLimits {
        file_bytes: 1 << 20,
        ..ImportLimits::default()
    };
    let endless = std::io::Read::chain(&b"{\"x\": \""[..], std::io::repeat(b'x'));
    assert_eq!(
        limit_of(import_reader("endless.json", endless, None, &limits)),
        Limit::FileBytes
    );
    let dir = std::env::temp_dir().join(format!("whatif-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.pickle");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    assert_eq!(
        limit_of(import_file_with(&big, None, &limits)),
        Limit::FileBytes
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Nesting 10,000 deep (pickle and JSON) is read without recursion; deeper than the
/// bound is refused.
#[test]
fn deep_nesting_neither_recurses_nor_overflows() {
    let nested = |depth: usize| {
        let mut p = PROTO.to_vec();
        p.extend(std::iter::repeat_n(EMPTY_LIST, depth));
        p.extend(std::iter::repeat_n(APPEND, depth - 1));
        p.push(STOP);
        p
    };
    let result = import_bytes("deep.pickle", &nested(10_000), None);
    assert!(is_shape(&result), "{result:?}");
    assert_eq!(
        limit_of(import_bytes("deeper.pickle", &nested(100_000), None)),
        Limit::Depth
    );
    let json = format!(
        "{{\"device_traces\": {}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert_eq!(
        limit_of(import_bytes("deep.json", json.as_bytes(), None)),
        Limit::Depth
    );
}

/// Four million digits in one integer literal (text `I`/`L` and binary `LONG4`) are
/// refused at the digit bound without being parsed; a wide literal within it is read in
/// linear time as "an integer wider than 64 bits".
#[test]
fn integer_literals_are_bounded_and_linear() {
    for op in [b'I', b'L'] {
        let mut p = PROTO.to_vec();
        p.push(op);
        p.extend(std::iter::repeat_n(b'7', 4 << 20));
        p.extend(b"\n.");
        assert_eq!(
            limit_of(import_bytes("digits.pickle", &p, None)),
            Limit::IntegerDigits
        );
    }
    let mut p = PROTO.to_vec();
    p.push(0x8b);
    p.extend_from_slice(&(4u32 << 20).to_le_bytes());
    p.extend(std::iter::repeat_n(1u8, 4 << 20));
    p.push(STOP);
    assert_eq!(
        limit_of(import_bytes("long4.pickle", &p, None)),
        Limit::IntegerDigits
    );
    // {"device_traces": [[{"action": "alloc", "addr": <4,000 digits>, ...}]]}
    let mut p = PROTO.to_vec();
    p.extend([EMPTY_DICT, MARK]);
    short_str(&mut p, "device_traces");
    p.extend([EMPTY_LIST, EMPTY_LIST, EMPTY_DICT, MARK]);
    short_str(&mut p, "action");
    short_str(&mut p, "alloc");
    short_str(&mut p, "addr");
    p.push(b'L');
    p.extend(std::iter::repeat_n(b'9', 4000));
    p.extend(b"L\n");
    p.extend([SETITEMS, APPEND, APPEND, SETITEMS, STOP]);
    match import_bytes("wide.pickle", &p, None) {
        Err(ImportError::Shape { message, .. }) => {
            assert!(message.contains("wider than 64 bits"), "{message}");
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
}

/// Pickles that call os.system, eval or subprocess (GLOBAL, STACK_GLOBAL, REDUCE, NEWOBJ,
/// INST, OBJ) are read as inert values: nothing runs, the file is a shape error.
#[test]
fn pickles_that_call_python_are_never_executed() {
    let marker = std::env::temp_dir().join(format!("whatif-pwned-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let command = format!("touch {}", marker.display());
    let mut calls = Vec::new();
    // GLOBAL os.system, the command, TUPLE1, REDUCE.
    let mut p = PROTO.to_vec();
    p.extend(b"cos\nsystem\n");
    short_str(&mut p, &command);
    p.extend([0x85, b'R', STOP]);
    calls.push(p);
    // STACK_GLOBAL builtins.eval("__import__('os').system(...)").
    let mut p = PROTO.to_vec();
    short_str(&mut p, "builtins");
    short_str(&mut p, "eval");
    p.push(0x93);
    short_str(&mut p, &format!("__import__('os').system('{command}')"));
    p.extend([0x85, b'R', STOP]);
    calls.push(p);
    // INST subprocess.check_call with the argument list, as the snapshot's device_traces.
    let mut p = PROTO.to_vec();
    p.extend([EMPTY_DICT]);
    short_str(&mut p, "device_traces");
    p.push(MARK);
    short_str(&mut p, "touch");
    short_str(&mut p, &marker.display().to_string());
    p.extend(b"isubprocess\ncheck_call\n");
    p.extend([b's', STOP]);
    calls.push(p);
    // OBJ and NEWOBJ on os.system.
    let mut p = PROTO.to_vec();
    p.push(MARK);
    p.extend(b"cos\nsystem\n");
    short_str(&mut p, &command);
    p.push(b'o');
    p.extend(b"cos\nsystem\n");
    p.push(b')');
    p.extend([0x81, POP, STOP]);
    calls.push(p);
    for (i, p) in calls.iter().enumerate() {
        let result = import_bytes("call.pickle", p, None);
        assert!(is_shape(&result), "call {i}: {result:?}");
    }
    assert!(!marker.exists(), "a pickle's call was executed");
}

/// Through the binary, a bound is exit status 2 with the bound named.
#[test]
fn a_bound_is_exit_status_2() {
    let dir = std::env::temp_dir().join(format!("whatif-limits-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("marks.pickle");
    let mut p = PROTO.to_vec();
    p.extend(std::iter::repeat_n(MARK, 1 << 20));
    std::fs::write(&file, p).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .arg("whatif")
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`depth` limit"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The JSON importer keeps only the fields it uses and is bounded like the pickle one.
#[test]
fn json_fields_not_read_are_skipped_and_elements_are_bounded() {
    let mut json = String::from("{\"device_traces\": [[");
    for i in 0..1000 {
        if i > 0 {
            json.push(',');
        }
        let frames = "{\"filename\": \"x.py\", \"line\": 1, \"name\": \"f\"},".repeat(50) + "{}";
        write!(
            json,
            "{{\"action\": \"alloc\", \"addr\": {}, \"size\": 512, \"frames\": [{frames}]}}",
            4096 * (i + 1)
        )
        .unwrap();
    }
    json.push_str("]]}");
    let history = import_bytes("frames.json", json.as_bytes(), None).unwrap();
    assert_eq!(history.entries.len(), 1000);
    // 1000 entries of 3 used fields each fit in 10,000 elements although the file holds
    // 50,000 frames.
    let limits = ImportLimits {
        elements: 10_000,
        ..ImportLimits::default()
    };
    assert!(import_reader("frames.json", json.as_bytes(), None, &limits).is_ok());
    let limits = ImportLimits {
        elements: 1_000,
        ..ImportLimits::default()
    };
    assert_eq!(
        limit_of(import_reader("frames.json", json.as_bytes(), None, &limits)),
        Limit::Elements
    );
}
