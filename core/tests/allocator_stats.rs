//! `empty_cache`, statistics, snapshots and traces, annotations, threads.

mod common;

use std::sync::Arc;

use common::{
    MIB, block_state, check_identities, check_tiling, setup, setup_traced_with, setup_with,
};
use memreuse_core::allocator::{self, BlockState, SegmentType, TraceAction};
use memreuse_core::testing::ManualBackend;
use memreuse_core::{AllocatorConfig, Backend, CachingAllocator};

#[test]
fn rule8_empty_cache_releases_only_whole_free_segments() {
    let (backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let b = alloc.allocate(1000, &s0).unwrap();
    let big = alloc.allocate(30 * MIB, &s1).unwrap();
    drop(big);
    drop(a);
    alloc.empty_cache().unwrap();
    let snap = alloc.snapshot();
    assert_eq!(
        snap.segments.len(),
        1,
        "the split small segment stays, the large one went"
    );
    assert_eq!(snap.segments[0].segment_type, SegmentType::Small);
    assert_eq!(backend.raw_bytes_in_use(), 2 * MIB);
    drop(b);
    alloc.empty_cache().unwrap();
    let st = alloc.stats();
    assert_eq!(st.reserved_bytes.aggregate.current, 0);
    assert_eq!((st.num_device_alloc, st.num_device_free), (2, 2));
    assert_eq!(backend.raw_bytes_in_use(), 0);
    assert_eq!(backend.live_raw_allocations(), 0);
    check_identities(&st);
}

#[test]
fn rule8_empty_cache_waits_for_pending_frees_like_pytorch() {
    let (backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    alloc.record_stream(&a, &s1);
    drop(a);
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.stats().reserved_bytes.aggregate.current, 0);
    assert!(backend.is_idle(&s1));
    assert_eq!(alloc.stats().num_sync_all_streams, 1);
}

#[test]
fn rule10_stats_follow_pytorch_semantics() {
    let (backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let st = alloc.stats();
    assert_eq!(st.allocation.aggregate.current, 1);
    assert_eq!(st.allocation.small_pool.current, 1);
    assert_eq!(st.allocated_bytes.aggregate.current, 1024);
    assert_eq!(st.requested_bytes.aggregate.current, 1000);
    assert_eq!(st.reserved_bytes.small_pool.current, 2 * MIB);
    assert_eq!(st.segment.aggregate.current, 1);
    assert_eq!(
        st.inactive_split.aggregate.current, 1,
        "the remainder is a free fragment"
    );
    assert_eq!(st.inactive_split_bytes.aggregate.current, 2 * MIB - 1024);
    check_identities(&st);
    alloc.record_stream(&a, &s1);
    drop(a);
    let st = alloc.stats();
    assert_eq!(st.allocated_bytes.aggregate.current, 0, "freed by the user");
    assert_eq!(
        st.active_bytes.aggregate.current, 1024,
        "but still active while pending"
    );
    assert_eq!(st.requested_bytes.aggregate.current, 1000);
    assert_eq!(st.pending_free_bytes, 1024);
    check_identities(&st);
    backend.advance(&s1);
    alloc.process_events().unwrap();
    let st = alloc.stats();
    assert_eq!(st.active_bytes.aggregate.current, 0);
    assert_eq!(st.requested_bytes.aggregate.current, 0);
    assert_eq!(
        st.inactive_split.aggregate.current, 0,
        "merged into a whole segment"
    );
    assert_eq!(st.cached_free_bytes, 2 * MIB);
    assert_eq!(st.allocated_bytes.aggregate.peak, 1024);
    assert_eq!(st.allocated_bytes.aggregate.allocated, 1024);
    assert_eq!(st.allocated_bytes.aggregate.freed, 1024);
    check_identities(&st);
    let big = alloc.allocate(12 * MIB, &s0).unwrap();
    assert_eq!(alloc.stats().allocated_bytes.large_pool.current, 12 * MIB);
    drop(big);
    alloc.reset_peak_stats();
    let st = alloc.stats();
    assert_eq!(st.allocated_bytes.aggregate.peak, 0);
    assert_eq!(st.reserved_bytes.aggregate.peak, 14 * MIB);
    assert_eq!(st.num_device_alloc, 2);
}

#[test]
fn rule11_snapshot_blocks_tile_segments_with_pytorch_names() {
    let (_backend, alloc, [s0, s1, _]) =
        setup_traced_with(1 << 40, "", allocator::DEFAULT_TRACE_CAPACITY);
    let a = alloc.allocate(1000, &s0).unwrap();
    let b = alloc.allocate(3000, &s0).unwrap();
    let c = alloc.allocate(5 * MIB, &s1).unwrap();
    alloc.record_stream(&b, &s1);
    let pb = b.ptr().addr();
    drop(b);
    let snap = alloc.snapshot();
    check_tiling(&snap);
    assert_eq!(snap.segments.len(), 2);
    let small = &snap.segments[0];
    assert_eq!(small.segment_type.as_str(), "small");
    assert_eq!(small.stream, a.stream_id());
    assert_eq!(
        (
            small.allocated_size,
            small.active_size,
            small.requested_size
        ),
        (1024, 1024 + 3072, 4000)
    );
    let states: Vec<_> = small.blocks.iter().map(|b| b.state.as_str()).collect();
    assert_eq!(
        states,
        ["active_allocated", "active_pending_free", "inactive"]
    );
    assert_eq!(block_state(&snap, pb), Some(BlockState::ActivePendingFree));
    let large = &snap.segments[1];
    assert_eq!(
        (large.segment_type.as_str(), large.stream),
        ("large", c.stream_id())
    );
    assert_eq!(large.total_size, 20 * MIB);
    let actions: Vec<_> = snap.traces.iter().map(|t| t.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "segment_alloc",
            "alloc",
            "alloc",
            "segment_alloc",
            "alloc",
            "free_requested",
            "snapshot"
        ]
    );
    assert!(snap.traces.windows(2).all(|w| w[0].time_us <= w[1].time_us));
    assert_eq!(snap.traces[1].addr, a.ptr().addr());
    assert_eq!(snap.traces[1].size, 1000);
    assert_eq!(TraceAction::FreeCompleted.as_str(), "free_completed");
    assert_eq!(TraceAction::SegmentFree.as_str(), "segment_free");
    assert_eq!(TraceAction::Oom.as_str(), "oom");
}

#[test]
fn rule11_trace_is_a_bounded_ring_buffer() {
    let backend = Arc::new(ManualBackend::new(1 << 40));
    let alloc = CachingAllocator::new(
        Arc::clone(&backend),
        AllocatorConfig::default().with_trace_capacity(4),
    );
    let s0 = backend.default_stream();
    for _ in 0..10 {
        drop(alloc.allocate(1000, &s0).unwrap());
    }
    let traces = alloc.snapshot().traces;
    assert_eq!(traces.len(), 4);
    let actions: Vec<_> = traces.iter().map(|t| t.action).collect();
    assert_eq!(
        actions,
        [
            TraceAction::Alloc,
            TraceAction::FreeRequested,
            TraceAction::FreeCompleted,
            TraceAction::Snapshot
        ]
    );
    // Off by default, as PyTorch's `_record_memory_history`: no entries, not even for a
    // snapshot.
    assert_eq!(AllocatorConfig::default().trace_capacity, 0);
    let (_backend, untraced, [s0, ..]) = setup();
    drop(untraced.allocate(1000, &s0).unwrap());
    assert!(untraced.snapshot().traces.is_empty());
}

#[test]
fn every_hand_out_is_annotated_with_a_fresh_allocation_id() {
    let (backend, alloc, [s0, ..]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    assert_eq!(
        backend.last_annotation(),
        Some((a.ptr(), 1024, a.allocation_id()))
    );
    let id = a.allocation_id();
    drop(a);
    let b = alloc.allocate(1000, &s0).unwrap();
    assert_ne!(b.allocation_id(), id, "reuse is a new allocation");
    assert_eq!(
        backend.last_annotation(),
        Some((b.ptr(), 1024, b.allocation_id()))
    );
    assert_eq!(backend.counters().annotations, 2);
}

#[test]
fn storage_handles_free_on_last_drop() {
    let (_backend, alloc, [s0, ..]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let weak = a.downgrade();
    let a2 = a.clone();
    drop(a);
    assert!(weak.upgrade().is_some());
    assert_eq!(alloc.stats().allocation.aggregate.current, 1);
    drop(a2);
    assert!(weak.upgrade().is_none());
    assert_eq!(alloc.stats().allocation.aggregate.current, 0);
}

#[test]
fn threads_share_one_allocator() {
    let (backend, alloc, _) = setup_with(1 << 40, "");
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let alloc = Arc::clone(&alloc);
            let stream = backend.create_stream().unwrap();
            let other = backend.create_stream().unwrap();
            std::thread::spawn(move || {
                let mut live = Vec::new();
                for i in 0..500u64 {
                    let s = alloc
                        .allocate((i * 7919 + t) % (3 * MIB) + 1, &stream)
                        .unwrap();
                    if i % 5 == 0 {
                        alloc.record_stream(&s, &other);
                    }
                    live.push(s);
                    if live.len() > 8 {
                        live.swap_remove((i % 8) as usize);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    backend.advance_all();
    alloc.process_events().unwrap();
    let st = alloc.stats();
    assert_eq!(st.allocation.aggregate.current, 0);
    assert_eq!(st.pending_free_bytes, 0);
    check_identities(&st);
    alloc.empty_cache().unwrap();
    assert_eq!(backend.raw_bytes_in_use(), 0);
}

#[test]
fn dropping_the_allocator_returns_every_segment() {
    let (backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    drop(alloc.allocate(30 * MIB, &s0).unwrap()); // cached
    alloc.record_stream(&a, &s1);
    drop(a); // pending on s1
    drop(alloc);
    assert_eq!(backend.raw_bytes_in_use(), 0);
    assert_eq!(backend.live_raw_allocations(), 0);
}

#[test]
fn works_over_the_dynamic_backend_and_is_send_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<memreuse_core::Storage<ManualBackend>>();
    assert_send_sync::<memreuse_core::WeakStorage<ManualBackend>>();
    assert_send_sync::<CachingAllocator<memreuse_core::AnyBackend>>();
    let any = Arc::new(memreuse_core::AnyBackend::new(ManualBackend::new(1 << 30)));
    let alloc = CachingAllocator::new(Arc::clone(&any), AllocatorConfig::default());
    let s0 = any.default_stream();
    let s1 = any.create_stream().unwrap();
    let a = alloc.allocate(1000, &s0).unwrap();
    let p = a.ptr();
    alloc.record_stream(&a, &s1);
    drop(a);
    assert_ne!(alloc.allocate(1000, &s0).unwrap().ptr(), p);
    any.downcast_ref::<ManualBackend>().unwrap().advance_all();
    assert_eq!(alloc.allocate(1000, &s0).unwrap().ptr(), p);
}

#[test]
fn stat_arrays_read_as_their_aggregate() {
    let (_backend, alloc, [s0, ..]) = setup();
    let _a = alloc.allocate(12 * MIB, &s0).unwrap();
    let _b = alloc.allocate(1000, &s0).unwrap();
    let st = alloc.stats();
    assert_eq!(st.allocated_bytes.current, 12 * MIB + 1024);
    assert_eq!(
        st.allocated_bytes.current,
        st.allocated_bytes.aggregate.current
    );
    assert_eq!(st.reserved_bytes.peak, 14 * MIB);
}

#[test]
fn stats_carry_fragmentation_per_pool_including_parked_blocks() {
    let (_backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(512, &s0).unwrap();
    let b = alloc.allocate(512, &s0).unwrap();
    let st = alloc.stats();
    // One 2 MiB small segment: a, b, and the free remainder.
    assert_eq!(st.fragmentation.small.free_blocks, 1);
    assert_eq!(st.fragmentation.small.largest_free, 2 * MIB - 1024);
    assert!(st.fragmentation.small.ratio().abs() < f64::EPSILON);
    // Freeing `a` (no stream uses) parks it: it stands for itself (its upper neighbour b is
    // allocated), so the pool holds two free blocks, and the figures are eager merging's.
    drop(a);
    let st = alloc.stats();
    let small = st.fragmentation.small;
    assert_eq!(
        (small.free_blocks, small.total_free, small.largest_free),
        (2, 2 * MIB - 512, 2 * MIB - 1024)
    );
    let expected = 1.0 - (2 * MIB - 1024) as f64 / (2 * MIB - 512) as f64;
    assert!((small.ratio() - expected).abs() < 1e-12);
    assert_eq!(
        st.fragmentation.large,
        allocator::PoolFragmentation::default()
    );
    check_identities(&st);
    // Freeing b merges everything into one free block: no fragmentation left.
    drop(b);
    let st = alloc.stats();
    assert_eq!(
        (
            st.fragmentation.small.free_blocks,
            st.fragmentation.small.largest_free
        ),
        (1, 2 * MIB)
    );
    assert!(st.fragmentation.all.ratio().abs() < f64::EPSILON);
    // A large block: its pool is counted apart; pending-free blocks do not count.
    let big = alloc.allocate(30 * MIB, &s1).unwrap();
    alloc.record_stream(&big, &s0);
    drop(big);
    let st = alloc.stats();
    assert_eq!(
        st.fragmentation.large.total_free, 0,
        "pending free is not free"
    );
    assert_eq!(st.pending_free_bytes, 30 * MIB);
    check_identities(&st);
}
