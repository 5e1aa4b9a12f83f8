//! `memreuse.trace/1`: round trips, every rule's typed error with its line, gzip, and the
//! recorded model traces in `traces/`.

use std::io::Write;
use std::path::{Path, PathBuf};

use memreuse_core::StreamId;
use memreuse_core::history::{
    AllocationHistory, EventKind, HistoryError, HistoryEvent, TRACE_FORMAT, TraceReader,
    read_trace, read_trace_file, write_trace,
};
use proptest::prelude::*;

fn alloc(id: u64, size: u64, stream: u64, time_us: Option<u64>) -> HistoryEvent {
    HistoryEvent {
        kind: EventKind::Alloc,
        id,
        size,
        stream: StreamId(stream),
        time_us,
    }
}

fn free(id: u64, size: u64, stream: u64, time_us: Option<u64>) -> HistoryEvent {
    HistoryEvent {
        kind: EventKind::Free,
        ..alloc(id, size, stream, time_us)
    }
}

fn parse(text: &str) -> Result<AllocationHistory, HistoryError> {
    read_trace(text.as_bytes())
}

fn err(text: &str) -> HistoryError {
    parse(text).expect_err("the text must be rejected")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn reads_every_line_kind_and_keeps_comments_and_times() {
    let h = parse(
        "memreuse.trace/1\n# model: x\n\nalloc 1 4096 0 10\n  alloc\t2 100 3  \r\nfree 1 4096 0 25\n#second\nend 3\n\n",
    )
    .unwrap();
    assert_eq!(
        h.events(),
        [
            alloc(1, 4096, 0, Some(10)),
            alloc(2, 100, 3, None),
            free(1, 4096, 0, Some(25))
        ]
    );
    assert_eq!(h.comments(), ["model: x", "second"]);
    assert!(h.is_complete());
    assert_eq!(h.alloc_count(), 2);
    assert_eq!(h.live_peak_bytes(), 4196);
    assert_eq!(h.live_bytes_at_end(), 100);
    assert_eq!(h.streams(), [StreamId(0), StreamId(3)]);
}

#[test]
fn a_file_without_end_reads_but_is_marked_possibly_incomplete() {
    let h = parse("memreuse.trace/1\nalloc 1 8 0\n").unwrap();
    assert_eq!(h.events().len(), 1);
    assert!(!h.is_complete());
}

#[test]
fn an_id_may_be_used_again_after_its_free() {
    let h = parse("memreuse.trace/1\nalloc 7 8 0\nfree 7 8 0\nalloc 7 16 1\nend 3\n").unwrap();
    assert_eq!(h.events()[2], alloc(7, 16, 1, None));
    assert_eq!(h.live_peak_bytes(), 16);
}

#[test]
fn header_errors() {
    assert!(matches!(err(""), HistoryError::Empty));
    match err("alloc 1 8 0\n") {
        HistoryError::MissingHeader { found } => assert_eq!(found, "alloc 1 8 0"),
        other => panic!("{other}"),
    }
    match err("memreuse.trace/2\nalloc 1 8 0\n") {
        e @ HistoryError::UnsupportedVersion { .. } => {
            assert!(e.to_string().contains("memreuse.trace/1"), "{e}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn syntax_errors_name_the_line_and_the_valid_syntax() {
    match err("memreuse.trace/1\nalloc 1 8 0\nmalloc 2 8 0\n") {
        HistoryError::UnknownAction { entry, found } => assert_eq!((entry, &*found), (3, "malloc")),
        other => panic!("{other}"),
    }
    match err("memreuse.trace/1\n\nalloc 1 8\n") {
        e @ HistoryError::MissingField {
            entry: 3,
            field: "STREAM",
            ..
        } => {
            assert!(
                e.to_string().contains("alloc ID SIZE STREAM [TIME_US]"),
                "{e}"
            );
        }
        other => panic!("{other}"),
    }
    match err("memreuse.trace/1\nfree 1\n") {
        HistoryError::MissingField {
            entry: 2,
            field: "SIZE",
            expected,
        } => {
            assert_eq!(expected, "free ID SIZE STREAM [TIME_US]");
        }
        other => panic!("{other}"),
    }
    for bad in [
        "+8",
        "-8",
        "0x10",
        "8.0",
        "1_000",
        "18446744073709551616",
        "eight",
    ] {
        match err(&format!("memreuse.trace/1\nalloc 1 {bad} 0\n")) {
            HistoryError::BadNumber {
                entry: 2,
                field: "SIZE",
                found,
            } => assert_eq!(found, bad),
            other => panic!("{bad}: {other}"),
        }
    }
    match err("memreuse.trace/1\nalloc 1 8 0 5 6\n") {
        HistoryError::ExtraField {
            entry: 2, found, ..
        } => assert_eq!(found, "6"),
        other => panic!("{other}"),
    }
    match err("memreuse.trace/1\nalloc 1 8 0 5\nend\n") {
        HistoryError::MissingField {
            entry: 3,
            field: "EVENTS",
            ..
        } => {}
        other => panic!("{other}"),
    }
    match err("memreuse.trace/1\n\u{ff}\u{fe}\n") {
        HistoryError::UnknownAction { entry: 2, .. } => {}
        other => panic!("{other}"),
    }
    let long = format!("memreuse.trace/1\n{}\n", "x".repeat(10_000));
    match err(&long) {
        HistoryError::UnknownAction { found, .. } => assert_eq!(found.len(), 80),
        other => panic!("{other}"),
    }
}

#[test]
fn rule_errors_name_both_entries() {
    match err("memreuse.trace/1\nalloc 1 8 0\nalloc 1 8 0\n") {
        HistoryError::DuplicateId {
            unit: "line",
            entry: 3,
            id: 1,
            alloc_entry: 2,
        } => {}
        other => panic!("{other}"),
    }
    match err("memreuse.trace/1\nalloc 1 8 0\nfree 1 8 0\nfree 1 8 0\n") {
        HistoryError::UnknownId {
            unit: "line",
            entry: 4,
            id: 1,
        } => {}
        other => panic!("{other}"),
    }
    match err("memreuse.trace/1\n# c\nalloc 1 8 0\nfree 1 16 0\n") {
        e @ HistoryError::FreeMismatch {
            unit: "line",
            entry: 4,
            id: 1,
            field: "size",
            at_alloc: 8,
            at_free: 16,
            alloc_entry: 3,
        } => assert!(
            e.to_string()
                .contains("repeats its allocation's size and stream")
        ),
        other => panic!("{other}"),
    }
    match err("memreuse.trace/1\nalloc 1 8 2\nfree 1 8 0\n") {
        HistoryError::FreeMismatch {
            field: "stream",
            at_alloc: 2,
            at_free: 0,
            ..
        } => {}
        other => panic!("{other}"),
    }
}

#[test]
fn truncation_and_end_errors() {
    match err("memreuse.trace/1\nalloc 1 8 0\nalloc 2 40") {
        HistoryError::Truncated { entry: 3 } => {}
        other => panic!("{other}"),
    }
    // Cut mid-header is caught too.
    assert!(matches!(
        err("memreuse.tra"),
        HistoryError::Truncated { entry: 1 }
    ));
    match err("memreuse.trace/1\nalloc 1 8 0\nend 2\n") {
        HistoryError::EndCountMismatch {
            entry: 3,
            declared: 2,
            read: 1,
        } => {}
        other => panic!("{other}"),
    }
    match err("memreuse.trace/1\nalloc 1 8 0\nend 1\n\nfree 1 8 0\n") {
        HistoryError::AfterEnd { entry: 5, found } => assert_eq!(found, "free 1 8 0"),
        other => panic!("{other}"),
    }
}

#[test]
fn the_streaming_reader_stops_at_the_first_error() {
    let text = "memreuse.trace/1\nalloc 1 8 0\nbogus\nalloc 2 8 0\n";
    let mut reader = TraceReader::new(text.as_bytes()).unwrap();
    assert_eq!(reader.next().unwrap().unwrap(), alloc(1, 8, 0, None));
    assert!(matches!(
        reader.next(),
        Some(Err(HistoryError::UnknownAction { entry: 3, .. }))
    ));
    assert!(reader.next().is_none());
}

#[test]
fn histories_built_in_memory_are_validated_by_position() {
    let e = AllocationHistory::new(vec![], vec![alloc(1, 8, 0, None), free(2, 8, 0, None)])
        .unwrap_err();
    assert!(
        matches!(
            e,
            HistoryError::UnknownId {
                unit: "event",
                entry: 2,
                id: 2
            }
        ),
        "{e}"
    );
}

#[test]
fn the_documented_example_reads() {
    let doc = std::fs::read_to_string(repo_root().join("docs/trace-format.md")).unwrap();
    let start = doc.find("```text\n").unwrap() + "```text\n".len();
    let example = &doc[start..start + doc[start..].find("```").unwrap()];
    let h = parse(example).unwrap();
    assert!(h.is_complete());
    assert_eq!(h.events().len(), 6);
    assert_eq!(h.events()[4], alloc(2, 512, 1, None));
    assert!(example.starts_with(TRACE_FORMAT));
}

#[test]
fn gzip_files_are_recognised_by_content_and_a_cut_gzip_is_an_io_error() {
    let history = AllocationHistory::new(
        vec!["gz".into()],
        (0..2000)
            .flat_map(|i| {
                [
                    alloc(i, 512 * (i + 1), i % 3, Some(i)),
                    free(i, 512 * (i + 1), i % 3, None),
                ]
            })
            .collect(),
    )
    .unwrap();
    let text = write_trace(Vec::new(), &history).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&text).unwrap();
    let gz = gz.finish().unwrap();

    let dir = std::env::temp_dir().join(format!("memreuse-history-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plain_path = dir.join("plain.trace.gz"); // the name does not decide
    let gz_path = dir.join("compressed.trace");
    let cut_path = dir.join("cut.trace.gz");
    std::fs::write(&plain_path, &text).unwrap();
    std::fs::write(&gz_path, &gz).unwrap();
    std::fs::write(&cut_path, &gz[..gz.len() / 2]).unwrap();
    assert_eq!(read_trace_file(&plain_path).unwrap(), history);
    assert_eq!(read_trace_file(&gz_path).unwrap(), history);
    match read_trace_file(&cut_path) {
        Err(HistoryError::Io { .. } | HistoryError::Truncated { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        read_trace_file(&dir.join("missing")),
        Err(HistoryError::Io { .. })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Each recorded model trace reads whole, and its figures are those its recorder wrote in
/// its header (so the script and the reader agree on every line).
#[test]
fn the_recorded_model_traces_read_whole_and_match_their_headers() {
    let mut seen = 0;
    for entry in std::fs::read_dir(repo_root().join("traces")).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".trace.gz") {
            continue;
        }
        seen += 1;
        let h = read_trace_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(h.is_complete(), "{}", path.display());
        let totals = h
            .comments()
            .iter()
            .find(|c| c.starts_with("events: "))
            .unwrap_or_else(|| panic!("{}: no totals comment", path.display()));
        let field = |name: &str| -> u64 {
            let rest = &totals[totals.find(name).unwrap() + name.len()..];
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        assert_eq!(field("events: "), h.events().len() as u64);
        assert_eq!(field("live peak: "), h.live_peak_bytes());
        assert_eq!(field("allocations live at end: "), {
            let frees = h.events().len() - h.alloc_count();
            (h.alloc_count() - frees) as u64
        });
        assert!(
            h.live_peak_bytes() > 500 << 20,
            "a 124 M-parameter model with AdamW"
        );
    }
    assert_eq!(seen, 2, "traces/ holds the two recorded model traces");
}

fn arb_history() -> impl Strategy<Value = AllocationHistory> {
    // Ops: allocate (size, stream, time?) or free the k-th live allocation.
    let op = prop_oneof![
        (0u64..1 << 40, 0u64..4, proptest::option::of(any::<u64>()))
            .prop_map(|(s, st, t)| (true, s, st, t, 0usize)),
        (any::<usize>(), proptest::option::of(any::<u64>())).prop_map(|(k, t)| (false, 0, 0, t, k)),
    ];
    proptest::collection::vec(op, 0..200).prop_map(|ops| {
        let mut live: Vec<(u64, u64, u64)> = Vec::new();
        let mut events = Vec::new();
        let mut next = 0u64;
        for (is_alloc, size, stream, t, k) in ops {
            if is_alloc || live.is_empty() {
                // Ids are reused: small id space, skipping live ones.
                let id = (0..64)
                    .map(|i| (next + i) % 64)
                    .find(|id| !live.iter().any(|l| l.0 == *id))
                    .unwrap();
                next = id + 1;
                live.push((id, size, stream));
                events.push(alloc(id, size, stream, t));
            } else {
                let (id, size, stream) = live.swap_remove(k % live.len());
                events.push(free(id, size, stream, t));
            }
            if live.len() == 64 {
                let (id, size, stream) = live.swap_remove(0);
                events.push(free(id, size, stream, None));
            }
        }
        AllocationHistory::new(vec!["p".into(), "q r".into()], events).unwrap()
    })
}

proptest! {
    #[test]
    fn write_then_read_gives_the_same_history(h in arb_history()) {
        let text = write_trace(Vec::new(), &h).unwrap();
        prop_assert_eq!(read_trace(text.as_slice()).unwrap(), h);
    }
}
