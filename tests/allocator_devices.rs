//! Streams of another device are refused (issue 12 item 8), and allocation ids stay unique
//! per device across allocators, so race classification holds with several allocators.

use std::sync::Arc;

use memreuse::allocator::{AllocError, AllocatorConfig, CachingAllocator};
use memreuse::mock::{MockConfig, open_mock_world};
use memreuse::{Backend, RaceKind};

#[test]
fn a_stream_of_another_device_is_a_typed_error_and_leaves_the_allocator_usable() {
    let endpoints = open_mock_world(2, MockConfig::with_capacity(64 << 20)).unwrap();
    let (dev0, dev1) = (&endpoints[0].0, &endpoints[1].0);
    let alloc = CachingAllocator::new(Arc::new(dev0.clone()), AllocatorConfig::default());
    let foreign = dev1.default_stream();
    let err = alloc
        .allocate(4096, &foreign)
        .expect_err("foreign stream refused");
    assert!(
        matches!(
            err,
            AllocError::ForeignStream {
                call: "allocate",
                device: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("stream of another device"),
        "{err}"
    );
    let own = dev0.default_stream();
    let t = alloc.allocate(4096, &own).unwrap();
    let err = alloc.try_record_stream(&t, &foreign).expect_err("refused");
    assert!(matches!(
        err,
        AllocError::ForeignStream {
            call: "record_stream",
            ..
        }
    ));
    alloc.record_stream(&t, &foreign); // ignored, counted
    assert_eq!(alloc.stats().record_stream_calls, 2);
    drop(t);
    let s = alloc.stats();
    assert_eq!(
        s.pending_free_bytes, 0,
        "no event on the foreign stream: {s:?}"
    );
    alloc.empty_cache().expect("empty_cache keeps working");
    alloc
        .process_events()
        .expect("process_events keeps working");
    assert_eq!(alloc.stats().reserved_bytes.current, 0);
}

#[test]
fn two_allocators_on_one_device_hand_out_distinct_ids_and_a_planted_reuse_race_is_classified() {
    let endpoints = open_mock_world(1, MockConfig::with_capacity(64 << 20)).unwrap();
    let dev = &endpoints[0].0;
    let a = CachingAllocator::new(Arc::new(dev.clone()), AllocatorConfig::default());
    let b = CachingAllocator::new(Arc::new(dev.clone()), AllocatorConfig::default());
    let (main, side) = (dev.default_stream(), dev.create_stream().unwrap());
    // Each allocator's first hand-out: per-allocator counters alone would collide here.
    let (ta, tb) = (
        a.allocate(4096, &main).unwrap(),
        b.allocate(4096, &main).unwrap(),
    );
    assert_ne!(ta.allocation_id(), tb.allocation_id());
    // Planted reuse race in allocator `a`: used on `side` without record_stream, freed,
    // and the cached block handed out again on `main`.
    dev.memset_zero(ta.ptr(), ta.size(), &side).unwrap();
    let (first_id, addr) = (ta.allocation_id(), ta.ptr());
    drop(ta);
    let again = a.allocate(4096, &main).unwrap();
    assert_eq!(again.ptr(), addr, "the cached block is reused at once");
    assert_ne!(again.allocation_id(), first_id);
    assert_ne!(again.allocation_id(), tb.allocation_id());
    dev.memset_zero(again.ptr(), again.size(), &main).unwrap();
    // Allocator `b`'s block is used on one stream only: no race there.
    dev.memset_zero(tb.ptr(), tb.size(), &main).unwrap();
    dev.synchronize_device().unwrap();
    let races = dev.race_reports().unwrap();
    assert_eq!(races.len(), 1, "{races:?}");
    let race = &races[0];
    assert_eq!(race.kind, RaceKind::Reuse, "{race}");
    assert_eq!(race.earlier.allocation, Some(first_id));
    assert_eq!(race.later.allocation, Some(again.allocation_id()));
}
