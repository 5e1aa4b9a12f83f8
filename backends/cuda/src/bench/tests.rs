//! CPU tests of the trace and the runners (memreuse over `ManualBackend`).

use memreuse_core::AllocatorConfig;
use memreuse_core::testing::ManualBackend;

use super::run::{BenchPeer, MemreusePeer, Record, pair_workload, run_pairs, run_trace};
use super::trace::{Op, SplitMix64, Trace, TraceError, TraceSpec};

fn small() -> TraceSpec {
    TraceSpec {
        ops: 20_000,
        max_live: 64,
        max_live_bytes: 256 << 20,
        ..TraceSpec::GPU
    }
}

#[test]
fn generator_is_deterministic_and_seed_dependent() {
    let a = Trace::generate(&small()).unwrap();
    assert_eq!(a, Trace::generate(&small()).unwrap());
    let other = Trace::generate(&TraceSpec { seed: 1, ..small() }).unwrap();
    assert_ne!(a.ops, other.ops);
    // Pinned: the first ops of the GPU trace never change (Python and old results rely on it).
    let gpu = Trace::generate(&TraceSpec {
        ops: 8,
        ..TraceSpec::GPU
    })
    .unwrap();
    let mut rng = SplitMix64::new(0);
    assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
    assert!(matches!(gpu.ops[0], Op::Alloc { slot: 0, .. }));
}

#[test]
fn generator_keeps_the_live_set_under_its_bounds() {
    for spec in [small(), TraceSpec::GPU] {
        let t = Trace::generate(&spec).unwrap();
        assert!(t.live_peak_count <= spec.max_live, "{t:?}");
        assert!(t.live_peak_bytes <= spec.max_live_bytes);
        // The drain adds at most one free per slot.
        assert!(t.ops.len() <= spec.ops + spec.max_live as usize);
        // Independent recount of the bounds and the size range.
        let (mut live, mut bytes, mut sizes) = (vec![0u64; spec.max_live as usize], 0u64, 0u64);
        let (lo, hi) = (1u64 << spec.min_log2, 1u64 << spec.max_log2);
        for op in &t.ops {
            match *op {
                Op::Alloc { slot, size } => {
                    assert!((lo..=hi).contains(&size), "size {size}");
                    live[slot as usize] = size;
                    bytes += size;
                    sizes += 1;
                    assert!(bytes <= spec.max_live_bytes);
                }
                Op::Free { slot } => bytes -= std::mem::take(&mut live[slot as usize]),
            }
        }
        assert_eq!((bytes, sizes), (0, t.allocs));
    }
    // The GPU trace reaches both ends of its range and stays at a few GiB.
    let t = Trace::generate(&TraceSpec::GPU).unwrap();
    assert!(t.live_peak_bytes <= 4 << 30 && t.live_peak_bytes > 256 << 20);
    assert_eq!(t.live_peak_count, 256);
}

#[test]
fn bad_specs_are_errors() {
    for spec in [
        TraceSpec {
            max_live: 0,
            ..small()
        },
        TraceSpec {
            min_log2: 26,
            ..small()
        },
        TraceSpec {
            max_live_bytes: 1 << 20,
            ..small()
        },
        TraceSpec {
            alloc_per_mille: 1001,
            ..small()
        },
    ] {
        assert!(Trace::generate(&spec).is_err(), "{spec:?}");
    }
}

#[test]
fn text_round_trips() {
    let t = Trace::generate(&small()).unwrap();
    let mut text = Vec::new();
    t.write(&mut text).unwrap();
    let back = Trace::parse(text.as_slice()).unwrap();
    assert_eq!(back, t);
    let dir = std::env::temp_dir().join(format!("memreuse-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.txt");
    t.write_to(&path).unwrap();
    assert_eq!(Trace::read_from(&path).unwrap(), t);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Recognizes the expected error variant.
type IsError = fn(&TraceError) -> bool;

#[test]
fn malformed_traces_are_typed_errors() {
    let cases: [(&str, IsError); 8] = [
        ("nonsense\n", |e| matches!(e, TraceError::Header { .. })),
        ("memreuse-trace v1 slots x\n", |e| {
            matches!(e, TraceError::Header { .. })
        }),
        ("memreuse-trace v1 slots 2\nx 0\n", |e| {
            matches!(e, TraceError::Syntax { line: 2, .. })
        }),
        ("memreuse-trace v1 slots 2\na 0\n", |e| {
            matches!(e, TraceError::Syntax { .. })
        }),
        ("memreuse-trace v1 slots 2\na 0 5 6\n", |e| {
            matches!(e, TraceError::Syntax { .. })
        }),
        ("memreuse-trace v1 slots 2\na 2 5\n", |e| {
            matches!(e, TraceError::Invalid { line: 2, .. })
        }),
        ("memreuse-trace v1 slots 2\n# c\na 0 5\na 0 5\n", |e| {
            matches!(e, TraceError::Invalid { line: 4, .. })
        }),
        ("memreuse-trace v1 slots 2\na 0 5\n", |e| {
            matches!(e, TraceError::Invalid { .. })
        }),
    ];
    for (text, is) in cases {
        let e = Trace::parse(text.as_bytes()).expect_err(text);
        assert!(is(&e), "{text:?}: {e}");
    }
    assert!(Trace::parse("memreuse-trace v1 slots 1\nf 0\n".as_bytes()).is_err());
    assert!(Trace::parse("memreuse-trace v1 slots 1\na 0 0\n".as_bytes()).is_err());
    let ok = Trace::parse("memreuse-trace v1 slots 1\n\na 0 7\nf 0\n".as_bytes()).unwrap();
    assert_eq!((ok.allocs, ok.live_peak_bytes, ok.live_peak_op), (1, 7, 0));
}

#[test]
fn prefix_is_drained_and_valid() {
    let t = Trace::generate(&small()).unwrap();
    let p = t.prefix(1000);
    assert_eq!(&p.ops[..1000], &t.ops[..1000]);
    assert!(p.ops[1000..].iter().all(|op| matches!(op, Op::Free { .. })));
    assert_eq!(t.prefix(usize::MAX), t);
    assert!(t.prefix(0).ops.is_empty());
}

fn memreuse() -> MemreusePeer<ManualBackend> {
    MemreusePeer::new(ManualBackend::new(64 << 30), AllocatorConfig::default())
}

fn check(r: &Record, workload: &str, unit: &str, iterations: u64) {
    assert_eq!(
        (r.peer.as_str(), r.workload.as_str(), r.unit, r.iterations),
        ("memreuse", workload, unit, iterations)
    );
    assert!(r.ns_per_op > 0.0 && r.total_ns > 0);
    let json = serde_json::to_value(r).unwrap();
    for field in [
        "schema",
        "peer",
        "api",
        "workload",
        "unit",
        "iterations",
        "total_ns",
        "ns_per_op",
        "peak_reserved_bytes",
        "peak_live_bytes",
        "trace_live_peak_bytes",
        "device_allocs",
        "python_loop_ns_per_op",
        "python_call_ns_per_op",
        "note",
    ] {
        assert!(json.get(field).is_some(), "{field} missing from {json}");
    }
}

#[test]
fn pairs_are_served_from_the_cache() {
    let mut peer = memreuse();
    for size in [4 << 10, 2 << 20] {
        let r = run_pairs(&mut peer, size, 10, 1000).unwrap();
        check(&r, &pair_workload(size), "pair", 1000);
        assert_eq!(r.device_allocs, Some(0), "warm-up filled the cache");
        assert!(r.peak_live_bytes.unwrap() >= size);
    }
    assert_eq!(pair_workload(4096), "pair_4KiB");
    assert_eq!(pair_workload(2 << 20), "pair_2MiB");
    assert_eq!(pair_workload(1000), "pair_1000B");
}

#[test]
fn trace_replays_cold_then_warm() {
    let t = Trace::generate(&small()).unwrap();
    let mut peer = memreuse();
    peer.release_cache().unwrap();
    let cold = run_trace(&mut peer, &t, "trace_cold").unwrap();
    let warm = run_trace(&mut peer, &t, "trace").unwrap();
    for r in [&cold, &warm] {
        check(r, &r.workload, "op", t.ops.len() as u64);
        assert_eq!(r.trace_live_peak_bytes, Some(t.live_peak_bytes));
        assert!(r.peak_live_bytes.unwrap() >= t.live_peak_bytes);
        assert!(r.peak_reserved_bytes.unwrap() >= r.peak_live_bytes.unwrap());
    }
    assert!(cold.device_allocs.unwrap() > 0);
    assert!(warm.device_allocs.unwrap() <= cold.device_allocs.unwrap());
    assert_eq!(peer.allocator.stats().allocated_bytes.current, 0);
}
