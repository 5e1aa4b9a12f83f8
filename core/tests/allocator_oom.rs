//! docs/design.md §3 rule 6: the malloc chain, callbacks, observers and the
//! out-of-memory error.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{MIB, check_identities, setup, setup_traced_with, setup_with, within};
use memreuse_core::allocator::{DEFAULT_TRACE_CAPACITY, TraceAction};
use memreuse_core::testing::ManualBackend;
use memreuse_core::{AllocError, BackendError, OomInfo, Storage};
use parking_lot::Mutex;

#[test]
fn oom_error_carries_the_numbers_and_observers_run_without_the_lock() {
    within(20, || {
        let (backend, alloc, [s0, ..]) = setup_traced_with(16 * MIB, "", DEFAULT_TRACE_CAPACITY);
        let held = alloc.allocate(12 * MIB, &s0).unwrap();
        let seen: Arc<Mutex<Vec<(OomInfo, u64)>>> = Arc::default();
        let (seen2, weak) = (Arc::clone(&seen), Arc::downgrade(&alloc));
        alloc.add_oom_observer(Arc::new(move |info: &OomInfo| {
            // Reading stats inside the observer deadlocks if the allocator lock is held.
            let reserved = weak
                .upgrade()
                .unwrap()
                .stats()
                .reserved_bytes
                .aggregate
                .current;
            seen2.lock().push((*info, reserved));
        }));
        let Err(AllocError::OutOfMemory(oom)) = alloc.allocate(12 * MIB, &s0) else {
            panic!("expected out of memory");
        };
        assert_eq!(oom.requested, 12 * MIB);
        assert_eq!(oom.device_total, 16 * MIB);
        assert_eq!(oom.device_free, 4 * MIB);
        assert_eq!(oom.allocated, 12 * MIB);
        assert_eq!(oom.reserved_unallocated, 0);
        assert_eq!(oom.limit, None);
        let msg = oom.to_string();
        assert!(msg.contains("Tried to allocate 12.00 MiB"), "{msg}");
        assert!(
            msg.contains("total capacity of 16.00 MiB of which 4.00 MiB is free"),
            "{msg}"
        );
        assert!(msg.contains("12.00 MiB is allocated by memreuse"), "{msg}");
        let seen = seen.lock().clone();
        assert_eq!(seen.len(), 1, "observer called once");
        let (info, reserved) = seen[0];
        assert_eq!(
            (info.requested, info.device_free, info.device_total),
            (12 * MIB, 4 * MIB, 16 * MIB)
        );
        assert_eq!(
            (info.allocated, info.reserved, reserved),
            (12 * MIB, 12 * MIB, 12 * MIB)
        );
        let st = alloc.stats();
        assert_eq!(st.num_ooms, 1);
        assert_eq!(
            st.num_alloc_retries, 1,
            "the last step retried after releasing the cache"
        );
        check_identities(&st);
        let last = *alloc
            .snapshot()
            .traces
            .iter()
            .rev()
            .find(|t| t.action == TraceAction::Oom)
            .unwrap();
        assert_eq!((last.size, last.device_free), (12 * MIB, Some(4 * MIB)));
        // Still serves requests after frees.
        drop(held);
        let again = alloc.allocate(12 * MIB, &s0).unwrap();
        assert_eq!(again.size(), 12 * MIB);
        assert_eq!(backend.raw_bytes_in_use(), 12 * MIB);
    });
}

#[test]
fn free_memory_callback_dropping_a_storage_lets_the_allocation_succeed() {
    within(20, || {
        let (backend, alloc, [s0, ..]) = setup_with(16 * MIB, "");
        let stash: Arc<Mutex<Option<Storage<ManualBackend>>>> =
            Arc::new(Mutex::new(Some(alloc.allocate(12 * MIB, &s0).unwrap())));
        let p = stash.lock().as_ref().unwrap().ptr();
        let calls = Arc::new(AtomicUsize::new(0));
        let (stash2, calls2) = (Arc::clone(&stash), Arc::clone(&calls));
        let id = alloc.add_free_memory_callback(Arc::new(move || {
            calls2.fetch_add(1, Ordering::SeqCst);
            // Dropping re-enters the allocator's free: deadlocks if the lock is held.
            let taken = stash2.lock().take();
            taken.is_some()
        }));
        let got = alloc
            .allocate(12 * MIB, &s0)
            .expect("callback freed enough");
        assert_eq!(got.ptr(), p, "the freed block was reused, not new memory");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(backend.counters().raw_mallocs, 1);
        assert_eq!(alloc.stats().num_ooms, 0);
        // Once removed, the callback is not called any more.
        alloc.remove_free_memory_callback(id);
        assert!(alloc.allocate(12 * MIB, &s0).is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn cached_blocks_of_other_streams_are_released_and_retried() {
    let (backend, alloc, [s0, s1, _]) = setup_with(24 * MIB, "");
    drop(alloc.allocate(12 * MIB, &s0).unwrap());
    let b = alloc
        .allocate(16 * MIB, &s1)
        .expect("s0's cached segment is released");
    assert_eq!(b.size(), 16 * MIB);
    let st = alloc.stats();
    assert_eq!(
        (
            st.num_alloc_retries,
            st.num_sync_all_streams,
            st.num_device_free
        ),
        (1, 1, 1)
    );
    assert_eq!(backend.raw_bytes_in_use(), 16 * MIB);
    check_identities(&st);
}

#[test]
fn pending_blocks_are_synchronized_before_giving_up() {
    let (backend, alloc, [s0, s1, _]) = setup_with(16 * MIB, "");
    let a = alloc.allocate(12 * MIB, &s0).unwrap();
    alloc.record_stream(&a, &s1);
    drop(a);
    assert!(!backend.is_idle(&s1));
    let b = alloc
        .allocate(12 * MIB, &s0)
        .expect("retry synchronizes the pending event");
    assert_eq!(b.size(), 12 * MIB);
    assert!(backend.is_idle(&s1), "the host waited for s1");
    assert_eq!(backend.counters().synchronize_event_calls, 1);
    assert_eq!(alloc.stats().num_sync_all_streams, 1);
}

#[test]
fn oversize_cached_blocks_are_released_first() {
    let (backend, alloc, [s0, ..]) = setup_with(40 * MIB, "max_split_size_mb:20");
    drop(alloc.allocate(30 * MIB, &s0).unwrap());
    let b = alloc
        .allocate(8 * MIB, &s0)
        .expect("the oversize block is released");
    assert_eq!(b.size(), 8 * MIB);
    let st = alloc.stats();
    assert_eq!(
        (
            st.num_alloc_retries,
            st.num_sync_all_streams,
            st.num_device_free
        ),
        (0, 0, 1)
    );
    // The old 30 MiB segment is gone; the new 20 MiB one is itself oversize (>= 20 MiB).
    assert_eq!(
        (st.oversize_segments.current, st.oversize_segments.freed),
        (1, 1)
    );
    assert_eq!(backend.raw_bytes_in_use(), 20 * MIB);
}

#[test]
fn per_process_fraction_limits_reserved_memory() {
    let (_backend, alloc, [s0, ..]) = setup_with(40 * MIB, "per_process_memory_fraction:0.5");
    let _a = alloc.allocate(12 * MIB, &s0).unwrap();
    let Err(AllocError::OutOfMemory(oom)) = alloc.allocate(12 * MIB, &s0) else {
        panic!("the limit is 20 MiB");
    };
    assert_eq!(oom.limit, Some(20 * MIB));
    assert_eq!(
        oom.device_free,
        28 * MIB,
        "the device itself still had room"
    );
    assert!(oom.to_string().contains("limited to 20.00 MiB"));
}

#[test]
fn garbage_collection_releases_old_cached_blocks_without_synchronizing() {
    let conf = "per_process_memory_fraction:0.5,garbage_collection_threshold:0.5";
    let (backend, alloc, [s0, ..]) = setup_with(80 * MIB, conf);
    let a = alloc.allocate(12 * MIB, &s0).unwrap();
    let b = alloc.allocate(14 * MIB, &s0).unwrap();
    drop((a, b)); // 26 MiB cached > 0.5 x 40 MiB
    let c = alloc.allocate(16 * MIB, &s0).unwrap();
    assert_eq!(c.size(), 16 * MIB);
    let st = alloc.stats();
    assert_eq!(st.num_device_free, 2, "both cached segments collected");
    assert_eq!((st.num_alloc_retries, st.num_sync_all_streams), (0, 0));
    assert_eq!(backend.raw_bytes_in_use(), 16 * MIB);
}

#[test]
fn backend_errors_other_than_oom_are_returned_and_leave_the_allocator_usable() {
    let (backend, alloc, [s0, ..]) = setup();
    backend.fail_nth_malloc(1);
    match alloc.allocate(1000, &s0) {
        Err(AllocError::Backend(BackendError::Injected { .. })) => {}
        other => panic!("expected the injected backend error, got {other:?}"),
    }
    let st = alloc.stats();
    assert_eq!((st.num_ooms, st.segment.aggregate.current), (0, 0));
    check_identities(&st);
    let a = alloc.allocate(1000, &s0).expect("next request succeeds");
    assert_eq!(a.size(), 1024);
}

#[test]
fn lazy_reclaim_skips_event_processing_on_a_hit() {
    for (conf, expect_reuse) in [("", true), ("lazy_reclaim:True", false)] {
        let (backend, alloc, [s0, s1, _]) = setup_with(1 << 40, conf);
        let keep = alloc.allocate(1000, &s0).unwrap(); // keeps the segment split
        let a = alloc.allocate(1000, &s0).unwrap();
        let p = a.ptr();
        alloc.record_stream(&a, &s1);
        drop(a);
        backend.advance(&s1);
        let b = alloc.allocate(1000, &s0).unwrap();
        assert_eq!(b.ptr() == p, expect_reuse, "conf `{conf}`");
        drop(keep);
    }
    // On a miss, lazy reclaim processes events before asking the device.
    let (backend, alloc, [s0, s1, _]) = setup_with(1 << 40, "lazy_reclaim:1");
    let a = alloc.allocate(12 * MIB, &s0).unwrap(); // a whole segment: no remainder to hit
    let p = a.ptr();
    alloc.record_stream(&a, &s1);
    drop(a);
    backend.advance(&s1);
    assert_eq!(alloc.allocate(12 * MIB, &s0).unwrap().ptr(), p);
    assert_eq!(backend.counters().raw_mallocs, 1);
}

#[test]
fn huge_requests_fail_cleanly() {
    let (_backend, alloc, [s0, ..]) = setup();
    assert!(matches!(
        alloc.allocate(u64::MAX, &s0),
        Err(AllocError::OutOfMemory(_))
    ));
    assert!(matches!(
        alloc.allocate(u64::MAX - 600, &s0),
        Err(AllocError::OutOfMemory(_))
    ));
    check_identities(&alloc.stats());
    assert_eq!(alloc.allocate(1, &s0).unwrap().size(), 512);
}

#[test]
fn oom_from_fragmentation_reports_it_per_pool() {
    within(20, || {
        let (_backend, alloc, [s0, ..]) = setup_with(24 * MIB, "");
        // Four 4 MiB blocks carved from one 20 MiB segment (requests under 10 MiB get a
        // 20 MiB segment, as in PyTorch), then every other one freed: 12 MiB free in the
        // cache, but no block of more than 4 MiB.
        let blocks: Vec<_> = (0..4)
            .map(|_| alloc.allocate(4 * MIB, &s0).unwrap())
            .collect();
        let mut blocks = blocks.into_iter();
        let (a, b, c, d) = (
            blocks.next().unwrap(),
            blocks.next().unwrap(),
            blocks.next().unwrap(),
            blocks.next().unwrap(),
        );
        drop(a);
        drop(c);
        let before = alloc.stats().fragmentation.large;
        assert_eq!(
            (before.total_free, before.largest_free, before.free_blocks),
            (12 * MIB, 4 * MIB, 3)
        );
        let Err(AllocError::OutOfMemory(oom)) = alloc.allocate(8 * MIB, &s0) else {
            panic!("expected out of memory");
        };
        assert!(
            oom.fragmented(),
            "12 MiB cached, largest block 4 MiB: {oom}"
        );
        assert_eq!(oom.fragmentation.large, before);
        assert_eq!(oom.fragmentation.small.total_free, 0);
        assert!((oom.fragmentation_ratio() - 2.0 / 3.0).abs() < 1e-9);
        let msg = oom.to_string();
        assert!(
            msg.contains(
                "Fragmentation of the cached free memory: 0.67 (small pool 0.00, large pool 0.67"
            ),
            "{msg}"
        );
        assert!(
            msg.contains("largest cached free block is only 4.00 MiB"),
            "{msg}"
        );
        // Nothing was lost: the figures still add up and freeing the rest coalesces.
        check_identities(&alloc.stats());
        drop((b, d));
        let st = alloc.stats();
        assert_eq!(
            (
                st.fragmentation.large.free_blocks,
                st.fragmentation.large.largest_free
            ),
            (1, 20 * MIB)
        );
        check_identities(&st);
    });
}
