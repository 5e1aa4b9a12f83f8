//! Helpers shared by the allocator tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use memreuse_core::allocator::{AllocatorStats, BlockState, CachingAllocator, Snapshot};
use memreuse_core::testing::{ManualBackend, ManualStream};
use memreuse_core::{AllocatorConfig, Backend};

pub const MIB: u64 = 1 << 20;

pub type Alloc = Arc<CachingAllocator<ManualBackend>>;

/// A manual device of `capacity` bytes, an allocator with `conf`, and two extra streams.
pub fn setup_with(capacity: u64, conf: &str) -> (Arc<ManualBackend>, Alloc, [ManualStream; 3]) {
    setup_traced_with(capacity, conf, 0)
}

/// As [`setup_with`], with a trace ring buffer of `trace_capacity` entries (tracing is off
/// by default, as in PyTorch).
pub fn setup_traced_with(
    capacity: u64,
    conf: &str,
    trace_capacity: usize,
) -> (Arc<ManualBackend>, Alloc, [ManualStream; 3]) {
    let backend = Arc::new(ManualBackend::new(capacity));
    let config = AllocatorConfig::parse(conf)
        .expect("test config parses")
        .with_trace_capacity(trace_capacity);
    let alloc = CachingAllocator::new(Arc::clone(&backend), config);
    let s0 = backend.default_stream();
    let s1 = backend.create_stream().unwrap();
    let s2 = backend.create_stream().unwrap();
    (backend, alloc, [s0, s1, s2])
}

pub fn setup() -> (Arc<ManualBackend>, Alloc, [ManualStream; 3]) {
    setup_with(1 << 40, "")
}

/// The identities documented in `allocator::stats`.
pub fn check_identities(s: &AllocatorStats) {
    let agg = |f: &memreuse_core::allocator::StatArray| f.aggregate.current;
    assert_eq!(
        agg(&s.reserved_bytes),
        agg(&s.allocated_bytes) + s.cached_free_bytes + s.pending_free_bytes + s.quarantined_bytes,
        "reserved = allocated + cached free + pending free + quarantined: {s:#?}"
    );
    assert_eq!(
        agg(&s.active_bytes),
        agg(&s.allocated_bytes) + s.pending_free_bytes + s.quarantined_bytes
    );
    assert!(agg(&s.inactive_split_bytes) <= s.cached_free_bytes);
    let frag = &s.fragmentation;
    assert_eq!(
        frag.all.total_free, s.cached_free_bytes,
        "fragmentation covers exactly the cached free bytes"
    );
    assert_eq!(
        frag.all.total_free,
        frag.small.total_free + frag.large.total_free
    );
    assert_eq!(
        frag.all.free_blocks,
        frag.small.free_blocks + frag.large.free_blocks
    );
    assert_eq!(
        frag.all.largest_free,
        frag.small.largest_free.max(frag.large.largest_free)
    );
    assert!((0.0..1.0).contains(&frag.all.ratio()));
    for f in [
        &s.allocation,
        &s.segment,
        &s.active,
        &s.inactive_split,
        &s.allocated_bytes,
        &s.reserved_bytes,
        &s.active_bytes,
        &s.inactive_split_bytes,
        &s.requested_bytes,
    ] {
        assert_eq!(
            f.aggregate.current,
            f.small_pool.current + f.large_pool.current
        );
        assert!(f.aggregate.peak >= f.aggregate.current);
        assert_eq!(
            f.aggregate.allocated - f.aggregate.freed,
            f.aggregate.current
        );
    }
}

/// Checks that each segment's blocks tile it exactly, and returns the state of the block at
/// `addr`, if any.
pub fn block_state(snap: &Snapshot, addr: u64) -> Option<BlockState> {
    check_tiling(snap);
    snap.segments
        .iter()
        .flat_map(|s| &s.blocks)
        .find(|b| b.address == addr)
        .map(|b| b.state)
}

pub fn check_tiling(snap: &Snapshot) {
    for seg in &snap.segments {
        let mut at = seg.address;
        for b in &seg.blocks {
            assert_eq!(b.address, at, "blocks must tile the segment: {seg:#?}");
            at += b.size;
        }
        assert_eq!(
            at,
            seg.address + seg.total_size,
            "blocks must cover the segment: {seg:#?}"
        );
    }
}

/// Runs `f` on another thread and fails (instead of hanging) if it does not finish in time,
/// e.g. because of a deadlock.
pub fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("operation deadlocked or panicked")
}

/// A manual device of `capacity` bytes with virtual memory, an allocator opened with
/// `CachingAllocator::try_new` and `expandable_segments:True{extra}` plus tracing, and two
/// streams.
pub fn setup_expandable(
    capacity: u64,
    extra: &str,
) -> (Arc<ManualBackend>, Alloc, [ManualStream; 2]) {
    let backend = Arc::new(ManualBackend::new(capacity));
    let config = AllocatorConfig::parse(&format!("expandable_segments:True{extra}"))
        .expect("test config parses")
        .with_trace_capacity(memreuse_core::allocator::DEFAULT_TRACE_CAPACITY);
    let alloc = CachingAllocator::try_new(Arc::clone(&backend), config).unwrap();
    let s0 = backend.default_stream();
    let s1 = backend.create_stream().unwrap();
    (backend, alloc, [s0, s1])
}

/// An expandable allocator is consistent with its device: reserved bytes equal the mapped
/// bytes, allocated <= reserved, no segment counted (PyTorch counts none for expandable
/// ones), no raw malloc, the stats identities and the snapshot's tiling.
pub fn check_expandable(backend: &ManualBackend, alloc: &Alloc) {
    let s = alloc.stats();
    check_identities(&s);
    assert_eq!(
        s.reserved_bytes.current,
        backend.physical_bytes(),
        "reserved = mapped"
    );
    assert!(s.allocated_bytes.current <= s.reserved_bytes.current);
    assert_eq!(
        s.segment.current, 0,
        "PyTorch counts no segment for expandable ones"
    );
    assert_eq!(
        backend.raw_bytes_in_use(),
        backend.physical_bytes(),
        "no raw malloc"
    );
    check_tiling(&alloc.snapshot());
}
