//! The allocator's slow path stays linear with many pending frees (issue 27 item 3): the
//! OOM culprits are not walked on every cache miss, only when an out-of-memory is reported
//! or the malloc chain is about to synchronize the streams that hold them.
//!
//! One test per binary: the count of culprit walks is process-wide.

mod common;

use common::{MIB, setup_with};
use memreuse_core::AllocError;
use memreuse_core::allocator::{UseOwner, culprit_holds_visited};
use memreuse_core::testing::ManualBackend;

/// Pending frees held behind one busy stream.
const PENDING: u64 = 100_000;
/// Cache misses served by new segments while they are pending.
const MISSES: u64 = 10;

#[test]
fn many_pending_frees_cost_no_culprit_walk_per_miss_and_one_at_the_oom() {
    let (backend, alloc, [s0, s1, _]) = setup_with(1 << 30, "");
    // The comm stream stays busy: every event recorded on it is outstanding.
    backend.enqueue_work(&s1).unwrap();
    let blocks: Vec<_> = (0..PENDING)
        .map(|_| alloc.allocate(512, &s0).unwrap())
        .collect();
    for b in &blocks {
        alloc.record_stream(b, &s1);
    }
    drop(blocks);
    assert_eq!(alloc.stats().pending_free_bytes, PENDING * 512);

    let before = culprit_holds_visited();
    let live: Vec<_> = (0..MISSES)
        .map(|_| alloc.allocate(30 * MIB, &s0).unwrap())
        .collect();
    assert_eq!(
        alloc.stats().num_device_alloc,
        25 + MISSES,
        "each 30 MiB request missed the cache and got a new segment"
    );
    assert_eq!(
        culprit_holds_visited() - before,
        0,
        "a miss served by a new segment walks no pending free"
    );

    // 1 GiB device, 350 MiB reserved: 800 MiB cannot fit even after the cache is released.
    let before = culprit_holds_visited();
    let oom = match alloc.allocate(800 * MIB, &s0) {
        Err(AllocError::OutOfMemory(oom)) => oom,
        other => panic!("expected out of memory, got {:?}", other.map(|s| s.size())),
    };
    assert_eq!(
        culprit_holds_visited() - before,
        PENDING,
        "the out-of-memory walks each pending free once (before the chain synchronizes them)"
    );
    let p = &oom.culprits.pending;
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(
        (p[0].owner, p[0].blocks, p[0].bytes),
        (UseOwner::User, PENDING, PENDING * 512)
    );
    drop(live);
    assert!(ManualBackend::is_idle(&backend, &s1));
}

/// The loop measured under callgrind (issue 27 item 3; not a check, so ignored):
/// 20,000 frees pending behind a busy stream, 2,000 cache misses served by new segments,
/// then 50 out-of-memory errors, each after 2,000 fresh pending frees.
///
/// `valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
///   target/debug/deps/oom_slow_path-HASH --ignored --exact callgrind_loop`
#[test]
#[ignore = "a measurement, run by hand under callgrind"]
fn callgrind_loop() {
    let (backend, alloc, [s0, s1, _]) = setup_with(1 << 40, "");
    let pend = |n: usize| {
        backend.enqueue_work(&s1).unwrap();
        let blocks: Vec<_> = (0..n).map(|_| alloc.allocate(512, &s0).unwrap()).collect();
        for b in &blocks {
            alloc.record_stream(b, &s1);
        }
    };
    pend(20_000);
    let live: Vec<_> = (0..2_000)
        .map(|_| alloc.allocate(30 * MIB, &s0).unwrap())
        .collect();
    for _ in 0..50 {
        pend(2_000);
        assert!(alloc.allocate((1 << 40) - (1 << 30), &s0).is_err());
    }
    drop(live);
}
