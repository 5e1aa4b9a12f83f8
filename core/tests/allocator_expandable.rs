//! `expandable_segments:True` (docs/expandable-segments.md): growth by pages, merge across
//! page boundaries, partial unmap by `empty_cache`, the out-of-memory chain unmapping
//! another stream's free pages, undo of a failed growth, figures, snapshot and trace, and
//! config errors. On [`ManualBackend`], which has virtual memory (2 MiB granularity).

mod common;
mod observe_support;

use std::sync::Arc;

use common::{MIB, check_identities, check_tiling};
use memreuse_core::allocator::{BlockState, CachingAllocator, ConfigError, TraceAction};
use memreuse_core::testing::{ManualBackend, ManualStream, SplitMix64};
use memreuse_core::{AllocError, AllocatorConfig, Backend, Storage};

type Alloc = Arc<CachingAllocator<ManualBackend>>;

fn setup(capacity: u64, extra: &str) -> (Arc<ManualBackend>, Alloc, [ManualStream; 2]) {
    common::setup_expandable(capacity, extra)
}

fn consistent(backend: &ManualBackend, alloc: &Alloc) {
    common::check_expandable(backend, alloc);
}

#[test]
fn pages_are_mapped_as_blocks_need_them_and_blocks_span_pages() {
    let (backend, alloc, [s0, _]) = setup(1 << 30, "");
    let a = alloc.allocate(4 * MIB, &s0).unwrap();
    let s = alloc.stats();
    assert_eq!(
        s.reserved_bytes.current,
        20 * MIB,
        "one 20 MiB large-pool page"
    );
    assert_eq!(s.num_device_map, 1);
    // The 16 MiB left of the page plus one more page: one block across the boundary.
    let b = alloc.allocate(30 * MIB, &s0).unwrap();
    assert_eq!(
        b.ptr().addr(),
        a.ptr().addr() + 4 * MIB,
        "contiguous, across pages"
    );
    let s = alloc.stats();
    assert_eq!(s.reserved_bytes.current, 40 * MIB);
    assert_eq!(s.num_device_map, 2);
    assert_eq!(
        s.num_device_alloc, 2,
        "one per growth, as PyTorch's map_block"
    );
    assert_eq!(backend.counters().raw_mallocs, 0);
    // A small request maps a 2 MiB page of the small pool's own segment.
    let c = alloc.allocate(1000, &s0).unwrap();
    assert_eq!(alloc.stats().reserved_bytes.small_pool.current, 2 * MIB);
    consistent(&backend, &alloc);
    drop((a, b, c));
    let s = alloc.stats();
    assert_eq!(s.cached_free_bytes, 42 * MIB, "freed, still mapped");
    assert_eq!(
        s.fragmentation.large.free_blocks, 1,
        "merged across the page boundary"
    );
    alloc.empty_cache().unwrap();
    let s = alloc.stats();
    assert_eq!(s.reserved_bytes.current, 0);
    assert_eq!(s.num_device_unmap, 3);
    assert_eq!(backend.physical_bytes(), 0);
    assert!(alloc.snapshot().segments.is_empty(), "ranges released");
    consistent(&backend, &alloc);
}

#[test]
fn empty_cache_unmaps_only_whole_free_pages_and_the_hole_is_mapped_again() {
    let (backend, alloc, [s0, _]) = setup(1 << 30, "");
    let a = alloc.allocate(30 * MIB, &s0).unwrap();
    let base = a.ptr().addr();
    let b = alloc.allocate(8 * MIB, &s0).unwrap();
    assert_eq!(b.ptr().addr(), base + 30 * MIB);
    drop(a);
    alloc.empty_cache().unwrap();
    // [0, 20) unmapped; [20, 30) stays free and mapped (part of a page still in use).
    let s = alloc.stats();
    assert_eq!(s.reserved_bytes.current, 20 * MIB);
    assert_eq!(s.num_device_unmap, 1);
    let snap = alloc.snapshot();
    assert_eq!(snap.segments.len(), 1, "one mapped run");
    let run = &snap.segments[0];
    assert!(run.is_expandable);
    assert_eq!((run.address, run.total_size), (base + 20 * MIB, 20 * MIB));
    let states: Vec<_> = run
        .blocks
        .iter()
        .map(|b| (b.address - base, b.state))
        .collect();
    assert_eq!(
        states,
        vec![
            (20 * MIB, BlockState::Inactive),
            (30 * MIB, BlockState::ActiveAllocated),
            (38 * MIB, BlockState::Inactive),
        ]
    );
    consistent(&backend, &alloc);
    // 16 MiB fits no free block: the hole is mapped again and merged with [20, 30).
    let c = alloc.allocate(16 * MIB, &s0).unwrap();
    assert_eq!(c.ptr().addr(), base, "lowest address first");
    assert_eq!(alloc.stats().reserved_bytes.current, 40 * MIB);
    consistent(&backend, &alloc);
}

#[test]
fn out_of_memory_chain_unmaps_free_pages_of_other_streams_first() {
    let (backend, alloc, [s0, s1]) = setup(60 * MIB, "");
    drop(alloc.allocate(40 * MIB, &s1).unwrap());
    assert_eq!(
        alloc.stats().reserved_bytes.current,
        40 * MIB,
        "cached on s1"
    );
    // s0 needs two pages; only one fits next to s1's cached pages.
    let a = alloc.allocate(40 * MIB, &s0).unwrap();
    let s = alloc.stats();
    assert_eq!(s.reserved_bytes.current, 40 * MIB);
    assert_eq!(s.num_alloc_retries, 1);
    assert_eq!(s.num_ooms, 0);
    assert_eq!(
        s.num_device_unmap, 3,
        "the undone first try's page, then s1's two"
    );
    assert_eq!(s.num_device_map, 2 + 1 + 2, "s1's, the undone one, s0's");
    let snap = alloc.snapshot();
    assert_eq!(snap.segments.len(), 1);
    assert_eq!(snap.segments[0].stream, backend.stream_id(&s0));
    consistent(&backend, &alloc);
    // Nothing left to unmap: a real out of memory, and the allocator is still sound.
    let Err(AllocError::OutOfMemory(_)) = alloc.allocate(40 * MIB, &s1) else {
        panic!("expected out of memory");
    };
    consistent(&backend, &alloc);
    drop(a);
    alloc.allocate(40 * MIB, &s1).unwrap();
    consistent(&backend, &alloc);
}

#[test]
fn a_growth_that_fails_midway_is_undone() {
    // Out of memory on the second page: the first is unmapped again, and the request
    // fails after the chain tried everything.
    let (backend, alloc, [s0, _]) = setup(30 * MIB, "");
    let Err(AllocError::OutOfMemory(_)) = alloc.allocate(30 * MIB, &s0) else {
        panic!("two 20 MiB pages do not fit in 30 MiB");
    };
    assert_eq!(backend.physical_bytes(), 0);
    assert_eq!(alloc.stats().num_ooms, 1);
    consistent(&backend, &alloc);
    assert!(alloc.snapshot().segments.is_empty());
    let ok = alloc.allocate(10 * MIB, &s0).unwrap();
    assert_eq!(alloc.stats().reserved_bytes.current, 20 * MIB);
    drop(ok);
    // A device error on the second page: returned, and the first page undone.
    let (backend, alloc, [s0, _]) = setup(1 << 30, "");
    backend.fail_nth_malloc(2);
    let Err(AllocError::Backend(e)) = alloc.allocate(30 * MIB, &s0) else {
        panic!("expected the injected failure");
    };
    assert!(e.to_string().contains("physical allocation #2"), "{e}");
    assert_eq!(backend.physical_bytes(), 0);
    assert_eq!(backend.vm_calls(), (1, 1), "one map, undone");
    consistent(&backend, &alloc);
    let ok = alloc.allocate(30 * MIB, &s0).unwrap();
    assert_eq!(alloc.stats().reserved_bytes.current, 40 * MIB);
    drop(ok);
    consistent(&backend, &alloc);
}

#[test]
fn the_trace_has_pytorch_segment_map_and_unmap_entries() {
    let (_backend, alloc, [s0, _]) = setup(1 << 30, "");
    let a = alloc.allocate(4 * MIB, &s0).unwrap();
    let base = a.ptr().addr();
    drop(a);
    alloc.empty_cache().unwrap();
    let snap = alloc.snapshot();
    let seg: Vec<_> = snap
        .traces
        .iter()
        .filter(|t| {
            matches!(
                t.action,
                TraceAction::SegmentMap | TraceAction::SegmentUnmap
            )
        })
        .map(|t| (t.action.as_str(), t.addr, t.size))
        .collect();
    assert_eq!(
        seg,
        vec![
            ("segment_map", base, 20 * MIB),
            ("segment_unmap", base, 20 * MIB)
        ]
    );
    assert!(
        !snap
            .traces
            .iter()
            .any(|t| t.action == TraceAction::SegmentAlloc)
    );
}

#[test]
fn the_large_pool_page_size_is_configurable() {
    let (backend, alloc, [s0, _]) = setup(1 << 30, ",expandable_segments_page_size_mb:2");
    let a = alloc.allocate(5 * MIB, &s0).unwrap();
    let s = alloc.stats();
    assert_eq!(s.reserved_bytes.current, 6 * MIB, "three 2 MiB pages");
    assert_eq!(s.num_device_map, 3);
    drop(a);
    consistent(&backend, &alloc);
}

#[test]
fn config_errors_are_typed() {
    let vm = Arc::new(ManualBackend::new(1 << 30));
    let conf =
        AllocatorConfig::parse("expandable_segments:True,expandable_segments_page_size_mb:3")
            .unwrap();
    let err = CachingAllocator::try_new(Arc::clone(&vm), conf).unwrap_err();
    assert!(
        matches!(err, ConfigError::PageSize { page, granularity, .. } if page == 3 * MIB && granularity == 2 * MIB),
        "{err}"
    );
    assert!(err.to_string().contains("granularity"), "{err}");
    for (conf, what) in [
        ("expandable_segments_page_size_mb:20", "requires"),
        (
            "expandable_segments:True,expandable_segments_page_size_mb:0",
            "between",
        ),
        (
            "expandable_segments:True,expandable_segments_page_size_mb:1g",
            "whole number",
        ),
        ("expandable_segments:yes", "True, False"),
        ("expandable_segments_trim:True", "requires"),
        (
            "expandable_segments:False,expandable_segments_trim:True",
            "requires",
        ),
        (
            "expandable_segments:True,expandable_segments_trim:maybe",
            "True, False",
        ),
        (
            "expandable_segments:True,expandable_segments_trim:True,expandable_segments_trim:False",
            "more than once",
        ),
    ] {
        let err = AllocatorConfig::parse(conf).unwrap_err();
        assert!(err.to_string().contains(what), "{conf}: {err}");
    }
    let on =
        AllocatorConfig::parse("expandable_segments:True,expandable_segments_trim:True").unwrap();
    assert!(on.expandable_segments_trim);
    assert!(
        !AllocatorConfig::parse("expandable_segments:True")
            .unwrap()
            .expandable_segments_trim,
        "off by default"
    );
    // Without the capability: refused by try_new, ordinary segments with new.
    let plain = Arc::new(ManualBackend::new(1 << 30).without_virtual_memory());
    let conf = AllocatorConfig::parse("expandable_segments:True").unwrap();
    assert!(matches!(
        CachingAllocator::try_new(Arc::clone(&plain), conf.clone()),
        Err(ConfigError::Unsupported { .. })
    ));
    let alloc = CachingAllocator::new(Arc::clone(&plain), conf);
    drop(alloc.allocate(MIB * 4, &plain.default_stream()).unwrap());
    assert_eq!(plain.counters().raw_mallocs, 1);
}

#[test]
fn off_by_default_even_on_a_backend_with_virtual_memory() {
    let backend = Arc::new(ManualBackend::new(1 << 30));
    let alloc =
        CachingAllocator::try_new(Arc::clone(&backend), AllocatorConfig::default()).unwrap();
    let a = alloc.allocate(4 * MIB, &backend.default_stream()).unwrap();
    let s = alloc.stats();
    assert_eq!((s.segment.current, s.num_device_map), (1, 0));
    assert_eq!(backend.vm_calls(), (0, 0));
    assert!(!alloc.snapshot().segments[0].is_expandable);
    drop(a);
}

#[test]
fn random_allocations_keep_reserved_equal_to_mapped() {
    // PyTorch's rule, and memreuse's trim before growth (which unmaps during allocations).
    for (seed, extra) in (0..12).flat_map(|s| [(s, ""), (s, ",expandable_segments_trim:True")]) {
        let (backend, alloc, streams) = setup(400 * MIB, extra);
        let mut rng = SplitMix64::new(seed);
        let mut live: Vec<Storage<ManualBackend>> = Vec::new();
        for step in 0..300 {
            match rng.below(10) {
                0..=4 => {
                    let bytes = if rng.chance(300) {
                        rng.range_inclusive(1, 1 << 20)
                    } else {
                        rng.range_inclusive(1 << 20, 48 << 20)
                    };
                    let s = &streams[rng.below(2)];
                    match alloc.allocate(bytes, s) {
                        Ok(st) => {
                            if rng.chance(200) {
                                alloc.record_stream(&st, &streams[rng.below(2)]);
                            }
                            live.push(st);
                        }
                        Err(AllocError::OutOfMemory(_)) => {}
                        Err(e) => panic!("seed {seed}{extra} step {step}: {e}"),
                    }
                }
                5..=8 if !live.is_empty() => {
                    let i = rng.below(live.len());
                    drop(live.swap_remove(i));
                }
                _ => {
                    if rng.chance(500) {
                        backend.advance_all();
                    }
                    alloc.empty_cache().unwrap();
                }
            }
            let s = alloc.stats();
            check_identities(&s);
            assert_eq!(
                s.reserved_bytes.current,
                backend.physical_bytes(),
                "seed {seed}{extra} step {step}: reserved = mapped"
            );
            assert!(s.allocated_bytes.current <= s.reserved_bytes.current);
            if step % 25 == 0 {
                check_tiling(&alloc.snapshot());
            }
        }
        live.clear();
        backend.advance_all();
        alloc.empty_cache().unwrap();
        assert_eq!(
            backend.physical_bytes(),
            0,
            "seed {seed}{extra}: everything unmapped"
        );
        assert!(alloc.snapshot().segments.is_empty());
    }
}

#[test]
fn garbage_collection_leaves_free_pages_mapped_as_pytorch() {
    let (backend, alloc, [s0, s1]) = setup(
        100 * MIB,
        ",per_process_memory_fraction:1.0,garbage_collection_threshold:0.5",
    );
    drop(alloc.allocate(60 * MIB, &s0).unwrap());
    assert_eq!(
        alloc.stats().reserved_bytes.current,
        60 * MIB,
        "cached on s0"
    );
    // A miss on s1 finds reserved (60 MiB) above half the limit, but PyTorch's GC skips
    // expandable blocks: s0's free pages stay mapped and s1 maps a page of its own.
    let a = alloc.allocate(4 * MIB, &s1).unwrap();
    let s = alloc.stats();
    assert_eq!(s.reserved_bytes.current, 80 * MIB);
    assert_eq!(s.num_device_unmap, 0);
    assert_eq!(s.num_alloc_retries, 0, "no out-of-memory retry was needed");
    let snap = alloc.snapshot();
    assert_eq!(snap.segments.len(), 2);
    drop(a);
    consistent(&backend, &alloc);
}

#[test]
fn viewer_snapshots_mark_expandable_segments_and_pass_the_checker() {
    use memreuse_core::observe::ViewerSnapshot;
    let (_backend, alloc, [s0, _]) = setup(1 << 30, "");
    let a = alloc.allocate(30 * MIB, &s0).unwrap();
    let b = alloc.allocate(8 * MIB, &s0).unwrap();
    drop(a);
    alloc.empty_cache().unwrap();
    let viewer = ViewerSnapshot::from_snapshot(0, &alloc.snapshot()).unwrap();
    let json: serde_json::Value = serde_json::from_str(&viewer.to_json().unwrap()).unwrap();
    let seg = &json["segments"][0];
    assert_eq!(seg["is_expandable"], true, "{seg}");
    let actions: Vec<&str> = json["device_traces"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"segment_map") && actions.contains(&"segment_unmap"),
        "{actions:?}"
    );
    let dir = observe_support::temp_dir("expandable-viewer");
    let file = dir.join("snapshot.pickle");
    viewer.write_pickle(&file).unwrap();
    observe_support::check_pickles(&[file], &[]);
    drop(b);
}

#[test]
fn an_unmap_that_fails_midway_leaves_the_rest_mapped_and_consistent() {
    let (backend, alloc, [s0, _]) = setup(1 << 30, "");
    drop(alloc.allocate(60 * MIB, &s0).unwrap());
    backend.fail_nth_vm_unmap(2);
    let Err(AllocError::Backend(e)) = alloc.empty_cache() else {
        panic!("expected the injected unmap failure");
    };
    assert!(e.to_string().contains("vm_unmap #2"), "{e}");
    // The first page is unmapped and recorded as such; the other two stay mapped and free.
    let s = alloc.stats();
    assert_eq!(s.reserved_bytes.current, 40 * MIB);
    assert_eq!(s.cached_free_bytes, 40 * MIB);
    assert_eq!(s.num_device_unmap, 1);
    consistent(&backend, &alloc);
    // The next release finishes the job; the next request is served.
    alloc.empty_cache().unwrap();
    assert_eq!(backend.physical_bytes(), 0);
    consistent(&backend, &alloc);
    drop(alloc.allocate(60 * MIB, &s0).unwrap());
    consistent(&backend, &alloc);
}
