//! `whatif` importers: memreuse's own snapshots (pickle and JSON), hand-made PyTorch-format
//! pickles (every action, several streams, a wrapped trace ring, bad entries), traces, and
//! what is not a history.

use std::collections::BTreeMap;
use std::sync::Arc;

use memreuse::observe::viewer::ViewerSnapshot;
use memreuse::testing::ManualBackend;
use memreuse::{AllocatorConfig, Backend, CachingAllocator};
use memreuse_conformance::whatif::{Action, ImportError, import_bytes};
use serde_pickle::{HashableValue, SerOptions, Value};

const MIB: u64 = 1 << 20;

fn dict(pairs: Vec<(&str, Value)>) -> Value {
    Value::Dict(
        pairs
            .into_iter()
            .map(|(k, v)| (HashableValue::String(k.to_owned()), v))
            .collect::<BTreeMap<_, _>>(),
    )
}

fn entry(action: &str, addr: i64, size: i64, stream: i64) -> Value {
    dict(vec![
        ("action", Value::String(action.to_owned())),
        ("addr", Value::I64(addr)),
        ("size", Value::I64(size)),
        ("stream", Value::I64(stream)),
        ("time_us", Value::I64(1_700_000_000_000_000)),
        ("frames", Value::List(vec![])),
    ])
}

fn snapshot(traces: Vec<Value>, segments: Vec<Value>) -> Vec<u8> {
    let root = dict(vec![
        ("segments", Value::List(segments)),
        ("device_traces", Value::List(vec![Value::List(traces)])),
    ]);
    serde_pickle::value_to_vec(&root, SerOptions::new()).unwrap()
}

fn segment(address: i64, stream: i64, blocks: Vec<(i64, i64, &str)>) -> Value {
    let total: i64 = blocks.iter().map(|b| b.0).sum();
    let mut at = address;
    let blocks = blocks
        .into_iter()
        .map(|(size, requested, state)| {
            let b = dict(vec![
                ("address", Value::I64(at)),
                ("size", Value::I64(size)),
                ("requested_size", Value::I64(requested)),
                ("state", Value::String(state.to_owned())),
            ]);
            at += size;
            b
        })
        .collect();
    dict(vec![
        ("device", Value::I64(0)),
        ("address", Value::I64(address)),
        ("total_size", Value::I64(total)),
        ("stream", Value::I64(stream)),
        ("segment_type", Value::String("large".to_owned())),
        ("blocks", Value::List(blocks)),
    ])
}

fn actions(h: &memreuse_conformance::whatif::ReplayHistory) -> Vec<(usize, Action, u64)> {
    h.entries
        .iter()
        .map(|e| (e.id, e.action, e.source))
        .collect()
}

#[test]
fn every_pytorch_action_is_read_and_segment_decisions_are_not_replayed() {
    // A block on a side stream (a cudaStream_t value) freed with a delay, a plain free, and
    // every action of the recording allocator's own.
    let side = 0x5566_7788_i64;
    let bytes = snapshot(
        vec![
            entry("segment_alloc", 0x1000_0000, 20 * MIB as i64, 0), // 0
            entry("alloc", 0x1000_0000, 3 * MIB as i64, 0),          // 1
            entry("alloc", 0x2000_0000, 5000, side),                 // 2
            entry("free_requested", 0x1000_0000, 3 * MIB as i64, 0), // 3: pending
            entry("alloc", 0x1030_0000, 4 * MIB as i64, 0),          // 4
            entry("free_completed", 0x1000_0000, 3 * MIB as i64, 0), // 5: completes now
            entry("free_requested", 0x2000_0000, 5000, side),        // 6
            entry("free_completed", 0x2000_0000, 5000, side),        // 7: immediate
            entry("segment_map", 0x3000_0000, 2 * MIB as i64, 0),
            entry("segment_unmap", 0x3000_0000, 2 * MIB as i64, 0),
            entry("segment_free", 0x4000_0000, 2 * MIB as i64, 0),
            entry("snapshot", 0, 0, 0),
            entry("oom", 0, 8 * MIB as i64, 0), // 12
        ],
        vec![],
    );
    let h = import_bytes("t.pickle", &bytes, None).unwrap();
    assert_eq!(h.format, "snapshot (pickle)");
    assert_eq!(
        actions(&h),
        vec![
            (
                0,
                Action::Alloc {
                    size: 3 * MIB,
                    stream: 0
                },
                1
            ),
            (
                1,
                Action::Alloc {
                    size: 5000,
                    stream: 1
                },
                2
            ),
            (0, Action::FreeRequested, 3),
            (
                2,
                Action::Alloc {
                    size: 4 * MIB,
                    stream: 0
                },
                4
            ),
            (0, Action::FreeCompleted, 5),
            (1, Action::Free, 6),
        ]
    );
    assert_eq!(
        h.streams,
        vec![0, side as u64],
        "streams keep their identity"
    );
    assert_eq!(
        h.ignored_entries, 6,
        "segment_* and snapshot and oom entries"
    );
    assert_eq!(h.recorded_ooms, vec![12]);
    assert!(!h.lower_bound);
    assert_eq!(h.live_peak_bytes(), 4 * MIB + 5000);
}

#[test]
fn a_wrapped_ring_skips_unknown_frees_and_rebuilds_live_blocks_from_segments() {
    let bytes = snapshot(
        vec![
            // Its alloc fell off the ring: counted and skipped, with its completion.
            entry("free_requested", 0x9000, 512, 0),
            entry("free_completed", 0x9000, 512, 0),
            entry("free_completed", 0x9100, 512, 0), // unknown, counted
            entry("alloc", 0x1000_0000, 2 * MIB as i64, 0),
        ],
        vec![segment(
            0x1000_0000,
            0,
            vec![
                (2 * MIB as i64, 2 * MIB as i64, "active_allocated"), // in the trace
                (4 * MIB as i64, 3 * MIB as i64 + 7, "active_allocated"), // before the ring
                (14 * MIB as i64, 0, "inactive"),
            ],
        )],
    );
    let h = import_bytes("t.pickle", &bytes, None).unwrap();
    assert_eq!(h.skipped_unknown_frees, 2);
    assert_eq!(h.initial.len(), 1);
    assert_eq!(h.initial[0].size, 3 * MIB + 7);
    assert!(h.lower_bound);
    assert_eq!(h.live_peak_bytes(), 5 * MIB + 7);
}

fn shape_error(entries: Vec<Value>) -> String {
    match import_bytes("bad.pickle", &snapshot(entries, vec![]), None) {
        Err(e @ ImportError::Shape { .. }) => e.to_string(),
        other => panic!("expected a shape error, got {other:?}"),
    }
}

#[test]
fn bad_entries_are_typed_errors_naming_the_entry() {
    let ok = entry("alloc", 0x1000, 512, 0);
    let no_size = dict(vec![
        ("action", Value::String("alloc".into())),
        ("addr", Value::I64(0x2000)),
    ]);
    let e = shape_error(vec![ok.clone(), no_size]);
    assert!(
        e.contains("device_traces[0][1]") && e.contains("`size` is missing"),
        "{e}"
    );
    let e = shape_error(vec![entry("alloc", 0x1000, -5, 0)]);
    assert!(
        e.contains("device_traces[0][0]") && e.contains("non-negative"),
        "{e}"
    );
    let e = shape_error(vec![ok.clone(), entry("mallocate", 0x1000, 512, 0)]);
    assert!(
        e.contains("unknown action `mallocate`") && e.contains("free_requested"),
        "{e}"
    );
    let e = shape_error(vec![ok.clone(), Value::I64(3)]);
    assert!(
        e.contains("device_traces[0][1]: expected a dict, found an integer"),
        "{e}"
    );
    let e = shape_error(vec![ok.clone(), ok.clone()]);
    assert!(e.contains("still live"), "{e}");
    let e = shape_error(vec![ok, entry("free_completed", 0x1000, 512, 0)]);
    assert!(e.contains("without its free_requested"), "{e}");
    let bad_action = dict(vec![("action", Value::I64(1))]);
    let e = shape_error(vec![bad_action]);
    assert!(
        e.contains("`action` is an integer: expected a string"),
        "{e}"
    );
}

#[test]
fn truncated_or_foreign_files_are_typed_errors() {
    let bytes = snapshot(vec![entry("alloc", 0x1000, 512, 0)], vec![]);
    for cut in [bytes.len() - 1, bytes.len() / 2, 3] {
        assert!(
            matches!(
                import_bytes("cut.pickle", &bytes[..cut], None),
                Err(ImportError::Decode { what: "pickle", .. })
            ),
            "cut at {cut}"
        );
    }
    assert!(matches!(
        import_bytes(
            "x.json",
            b"{\"device_traces\": [[{\"action\": \"alloc\"",
            None
        ),
        Err(ImportError::Decode { what: "JSON", .. })
    ));
    assert!(matches!(
        import_bytes("x.bin", b"GIF89a....", None),
        Err(ImportError::UnknownFormat { .. })
    ));
    let list = serde_pickle::value_to_vec(&Value::List(vec![]), SerOptions::new()).unwrap();
    match import_bytes("l.pickle", &list, None) {
        Err(e @ ImportError::Shape { .. }) => assert!(e.to_string().contains("the top level")),
        other => panic!("{other:?}"),
    }
    // No trace recorded, or the device asked for has none.
    let empty = snapshot(vec![], vec![]);
    assert!(matches!(
        import_bytes("e.pickle", &empty, None),
        Err(ImportError::NoTrace { .. })
    ));
    let one = snapshot(vec![entry("alloc", 0x1000, 512, 0)], vec![]);
    match import_bytes("one.pickle", &one, Some(3)) {
        Err(ImportError::NoTrace {
            device: 3, devices, ..
        }) => assert_eq!(devices, vec![0]),
        other => panic!("{other:?}"),
    }
    match import_bytes(
        "t.trace",
        b"memreuse.trace/1\nalloc 1 8 0\nfree 2 8 0\n",
        None,
    ) {
        Err(e @ ImportError::Trace { .. }) => assert!(e.to_string().contains("line 3"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn traces_keep_their_line_numbers_and_streams() {
    let text = b"memreuse.trace/1\n# device_total: 1048576\nalloc 4 100 7\n\nalloc 5 200 0\nfree 4 100 7\nend 3\n";
    let h = import_bytes("t.trace", text, None).unwrap();
    assert_eq!(
        actions(&h),
        vec![
            (
                0,
                Action::Alloc {
                    size: 100,
                    stream: 0
                },
                3
            ),
            (
                1,
                Action::Alloc {
                    size: 200,
                    stream: 1
                },
                5
            ),
            (0, Action::Free, 6),
        ]
    );
    assert_eq!(h.streams, vec![7, 0]);
    assert_eq!(h.device_total, Some(1 << 20));
    assert!(!h.lower_bound);
    let h = import_bytes("t.trace", b"memreuse.trace/1\nalloc 4 100 7\n", None).unwrap();
    assert!(h.lower_bound, "no end line: possibly cut");
}

/// A snapshot memreuse writes (through the viewer export, pickle and JSON) imports to the
/// requests that made it, a pending free included.
#[test]
fn memreuse_snapshots_import_to_the_requests_that_made_them() {
    let backend = Arc::new(ManualBackend::new(1 << 30));
    let config = AllocatorConfig::default().with_trace_capacity(1024);
    let alloc = CachingAllocator::new(Arc::clone(&backend), config);
    let main = backend.default_stream();
    let side = backend.create_stream().unwrap();
    let first = alloc.allocate(3 * MIB, &main).unwrap();
    let second = alloc.allocate(700, &main).unwrap();
    backend.enqueue_work(&side).unwrap();
    alloc.record_stream(&first, &side);
    drop(first); // pending on `side`
    drop(second);
    let third = alloc.allocate(5 * MIB, &main).unwrap();
    backend.advance(&side);
    let fourth = alloc.allocate(1000, &main).unwrap(); // processes the completed event
    let snap = ViewerSnapshot::from_snapshot(0, &alloc.snapshot()).unwrap();
    let expected = vec![
        Action::Alloc {
            size: 3 * MIB,
            stream: 0,
        },
        Action::Alloc {
            size: 700,
            stream: 0,
        },
        Action::FreeRequested,
        Action::Free,
        Action::Alloc {
            size: 5 * MIB,
            stream: 0,
        },
        Action::FreeCompleted,
        Action::Alloc {
            size: 1000,
            stream: 0,
        },
    ];
    for (bytes, json) in [
        (snap.to_pickle().unwrap(), false),
        (snap.to_json().unwrap().into_bytes(), true),
    ] {
        let h = import_bytes("m", &bytes, None).unwrap();
        assert_eq!(
            h.format,
            if json {
                "snapshot (JSON)"
            } else {
                "snapshot (pickle)"
            }
        );
        let got: Vec<Action> = h.entries.iter().map(|e| e.action).collect();
        assert_eq!(got, expected);
        assert!(h.ignored_entries >= 2, "segment_alloc and snapshot entries");
        assert!(h.initial.is_empty() && !h.lower_bound);
    }
    drop((third, fourth));
}

/// A snapshot written by Python's own pickle module with PyTorch's structure and types
/// (`tests/data/torch_snapshot_fixture.py`): tuples, floats, None, 64-bit addresses, a
/// cudaStream_t value, stack frames shared between entries (Python pickles a shared object
/// once and refers to it again), a wrapped ring, a pending free and an `oom` entry.
#[test]
fn a_snapshot_pickled_by_python_with_pytorch_structure_imports() {
    const SIDE: u64 = 0x55D1_2E3F_4A60;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/torch-snapshot-shaped.pickle");
    let h = memreuse_conformance::whatif::import_file(&path, None).unwrap();
    assert_eq!(h.streams, vec![0, SIDE]);
    assert_eq!(
        actions(&h),
        vec![
            (
                0,
                Action::Alloc {
                    size: 4 * MIB,
                    stream: 1
                },
                2
            ),
            (
                1,
                Action::Alloc {
                    size: 8 * MIB,
                    stream: 0
                },
                4
            ),
            (0, Action::FreeRequested, 5),
            (1, Action::Free, 6),
            (0, Action::FreeCompleted, 8),
        ]
    );
    assert_eq!(h.skipped_unknown_frees, 1);
    assert_eq!(h.initial.len(), 1);
    assert_eq!((h.initial[0].size, h.initial[0].stream), (6 * MIB - 100, 0));
    assert_eq!(h.recorded_ooms, vec![9]);
    assert_eq!(h.ignored_entries, 3);
    assert!(h.lower_bound);
    assert_eq!(h.live_peak_bytes(), 18 * MIB - 100);
    // 6 MiB and 8 MiB share one 20 MiB segment; the side stream's block needs its own.
    let f = memreuse_conformance::whatif::replay(
        &h,
        memreuse::AllocatorConfig::default(),
        u64::MAX,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(f.reserved_peak_bytes, 40 * MIB);
}

#[test]
fn a_snapshot_of_several_devices_replays_the_one_asked_for() {
    let root = dict(vec![
        ("segments", Value::List(vec![])),
        (
            "device_traces",
            Value::List(vec![
                Value::List(vec![]),
                Value::List(vec![entry("alloc", 0x1000, 512, 0)]),
                Value::List(vec![
                    entry("alloc", 0x2000, 4096, 0),
                    entry("alloc", 0x3000, 8192, 0),
                ]),
            ]),
        ),
    ]);
    let bytes = serde_pickle::value_to_vec(&root, SerOptions::new()).unwrap();
    let first = import_bytes("m.pickle", &bytes, None).unwrap();
    assert_eq!(
        first.entries.len(),
        1,
        "default: the first device with entries (1)"
    );
    let two = import_bytes("m.pickle", &bytes, Some(2)).unwrap();
    assert_eq!(two.live_peak_bytes(), 4096 + 8192);
    match import_bytes("m.pickle", &bytes, Some(0)) {
        Err(ImportError::NoTrace {
            device: 0, devices, ..
        }) => assert_eq!(devices, vec![1, 2]),
        other => panic!("{other:?}"),
    }
}
