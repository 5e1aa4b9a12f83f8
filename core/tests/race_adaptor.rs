//! The race-checking adaptor over a backend without a detector (`ManualBackend`): planted
//! bugs are caught, correct patterns are not flagged.

use std::sync::Arc;

use memreuse_core::race::{HOST_STREAM, RaceChecker};
use memreuse_core::testing::ManualBackend;
use memreuse_core::{AllocationId, AllocatorConfig, Backend, CachingAllocator, RaceKind};

const MIB: u64 = 1 << 20;

fn checked() -> RaceChecker<ManualBackend> {
    RaceChecker::standalone(ManualBackend::new(64 * MIB))
}

fn kinds(b: &RaceChecker<ManualBackend>) -> Vec<RaceKind> {
    b.race_reports()
        .expect("the adaptor always has reports")
        .iter()
        .map(|r| r.kind)
        .collect()
}

#[test]
fn the_wrapped_backend_has_no_detector_the_adaptor_has_one() {
    let b = checked();
    assert!(b.inner().race_reports().is_none());
    assert_eq!(b.race_reports(), Some(Vec::new()));
    assert!(b.capabilities().native_race_detection);
}

#[test]
fn a_missing_event_wait_is_a_schedule_race() {
    let b = checked();
    let s0 = b.default_stream();
    let s1 = b.create_stream().unwrap();
    let p = b.malloc(4096).unwrap();
    b.annotate_allocation(p, 4096, AllocationId(1));
    b.memset_zero(p, 4096, &s0).unwrap();
    // Reads on another stream without waiting for the write.
    let mut out = [0u8; 64];
    b.copy_device_to_host(&mut out, p, &s1).unwrap();
    let reports = b.race_reports().unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    let r = &reports[0];
    assert_eq!(r.kind, RaceKind::Schedule);
    assert_eq!(r.range, p.addr()..p.addr() + 64);
    assert!(r.earlier.op.starts_with("memset_zero"), "{r}");
    assert!(r.later.op.starts_with("copy_device_to_host"), "{r}");
    assert_eq!(r.earlier.stream, b.stream_id(&s0));
    assert_eq!(r.later.stream, b.stream_id(&s1));
}

#[test]
fn an_event_wait_orders_the_streams() {
    let b = checked();
    let s0 = b.default_stream();
    let s1 = b.create_stream().unwrap();
    let p = b.malloc(4096).unwrap();
    b.memset_zero(p, 4096, &s0).unwrap();
    let ev = b.create_event().unwrap();
    b.record_event(&ev, &s0).unwrap();
    b.stream_wait_event(&s1, &ev).unwrap();
    b.copy_device_to_device(p, p.offset(2048), 1024, &s1)
        .unwrap();
    // A host sync orders the free after everything.
    b.synchronize_device().unwrap();
    b.free(p).unwrap();
    assert_eq!(kinds(&b), Vec::new());
}

#[test]
fn an_event_recorded_before_the_write_does_not_order_it() {
    let b = checked();
    let s0 = b.default_stream();
    let s1 = b.create_stream().unwrap();
    let p = b.malloc(4096).unwrap();
    let ev = b.create_event().unwrap();
    b.record_event(&ev, &s0).unwrap();
    b.memset_zero(p, 4096, &s0).unwrap();
    b.stream_wait_event(&s1, &ev).unwrap();
    b.memset_zero(p, 16, &s1).unwrap();
    assert_eq!(kinds(&b), vec![RaceKind::Schedule]);
}

#[test]
fn reuse_on_another_stream_without_record_stream_is_a_reuse_race() {
    let b = Arc::new(checked());
    let alloc = CachingAllocator::new(Arc::clone(&b), AllocatorConfig::default());
    let s0 = b.default_stream();
    let s1 = b.create_stream().unwrap();
    let first = alloc.allocate(MIB, &s0).unwrap();
    let ptr = first.ptr();
    // Used on s1, but the allocator is not told (no record_stream).
    b.memset_zero(ptr, MIB, &s1).unwrap();
    drop(first);
    let second = alloc.allocate(MIB, &s0).unwrap();
    assert_eq!(second.ptr(), ptr, "the cached block is handed out again");
    b.memset_zero(second.ptr(), MIB, &s0).unwrap();
    let reports = b.race_reports().unwrap();
    assert_eq!(kinds(&b), vec![RaceKind::Reuse], "{reports:?}");
    assert_ne!(reports[0].earlier.allocation, reports[0].later.allocation);
}

#[test]
fn record_stream_makes_the_same_reuse_safe() {
    let b = Arc::new(checked());
    let alloc = CachingAllocator::new(Arc::clone(&b), AllocatorConfig::default());
    let s0 = b.default_stream();
    let s1 = b.create_stream().unwrap();
    let first = alloc.allocate(MIB, &s0).unwrap();
    let ptr = first.ptr();
    b.memset_zero(ptr, MIB, &s1).unwrap();
    alloc.record_stream(&first, &s1);
    drop(first);
    // s1 finishes; the allocator's event query observes it before handing the block out.
    b.inner().advance_all();
    let second = alloc.allocate(MIB, &s0).unwrap();
    b.memset_zero(second.ptr(), MIB, &s0).unwrap();
    assert_eq!(kinds(&b), Vec::new());
}

#[test]
fn a_raw_free_before_the_host_observed_completion_races_with_the_host() {
    let b = checked();
    let s0 = b.default_stream();
    let p = b.malloc(4096).unwrap();
    b.memset_zero(p, 4096, &s0).unwrap();
    b.free(p).unwrap();
    let reports = b.race_reports().unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].kind, RaceKind::Reuse);
    assert_eq!(reports[0].later.stream, HOST_STREAM);
    assert_eq!(b.race_count(), 1);
}

#[test]
fn a_query_that_answered_complete_orders_later_host_decisions() {
    let b = checked();
    let s0 = b.default_stream();
    let p = b.malloc(4096).unwrap();
    b.memset_zero(p, 4096, &s0).unwrap();
    let ev = b.create_event().unwrap();
    b.record_event(&ev, &s0).unwrap();
    assert!(
        !b.query_event(&ev).unwrap(),
        "the manual stream has not advanced"
    );
    b.inner().advance(&s0);
    assert!(b.query_event(&ev).unwrap());
    b.free(p).unwrap();
    assert_eq!(kinds(&b), Vec::new());
}

#[test]
fn refused_calls_are_not_recorded() {
    let b = checked();
    let s0 = b.default_stream();
    let p = b.malloc(4096).unwrap();
    assert!(b.memset_zero(p, 8192, &s0).is_err());
    b.free(p).unwrap();
    assert_eq!(kinds(&b), Vec::new());
}
