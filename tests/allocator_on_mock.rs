//! The allocator rules on the strict mock device, with its race detector as the judge:
//! where a rule protects memory, a planted violation of the rule would be a reuse race, so
//! "no race" here means the rule held on a device that really runs streams concurrently.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use memreuse::allocator::{AllocError, AllocatorConfig, CachingAllocator, EraseOutcome, Storage};
use memreuse::mock::{MockConfig, MockDevice, OpDelays};
use memreuse::{Backend, RaceKind, WorkId};

fn device(capacity: u64) -> MockDevice {
    MockDevice::new(MockConfig::with_capacity(capacity)).expect("mock device")
}

fn allocator(dev: &MockDevice) -> Arc<CachingAllocator<MockDevice>> {
    CachingAllocator::new(Arc::new(dev.clone()), AllocatorConfig::default())
}

fn write(dev: &MockDevice, t: &Storage<MockDevice>, stream: &<MockDevice as Backend>::Stream) {
    dev.memset_zero(t.ptr(), t.size(), stream).expect("memset");
}

#[test]
fn rule_1_a_free_block_is_reused_only_by_its_own_stream() {
    let dev = device(64 << 20);
    let alloc = allocator(&dev);
    let (a, b) = (dev.default_stream(), dev.create_stream().unwrap());
    let t = alloc.allocate(4096, &a).unwrap();
    let addr = t.ptr();
    write(&dev, &t, &a);
    drop(t);
    let other = alloc.allocate(4096, &b).unwrap();
    assert_ne!(
        other.ptr(),
        addr,
        "another stream must not get the cached block"
    );
    write(&dev, &other, &b);
    let same = alloc.allocate(4096, &a).unwrap();
    assert_eq!(same.ptr(), addr, "its own stream reuses it at once");
    write(&dev, &same, &a);
    assert!(
        dev.race_reports().unwrap().is_empty(),
        "{:?}",
        dev.race_reports()
    );
}

#[test]
fn rules_2_and_3_record_stream_keeps_a_block_pending_until_its_event_completes() {
    // A slow side stream makes the window real: its memset takes 30 ms.
    let config = MockConfig {
        delays: OpDelays {
            memset: std::time::Duration::from_millis(30),
            ..OpDelays::default()
        },
        ..MockConfig::with_capacity(64 << 20)
    };
    let dev = MockDevice::new(config).unwrap();
    let alloc = allocator(&dev);
    let (a, side) = (dev.default_stream(), dev.create_stream().unwrap());
    let t = alloc.allocate(1 << 20, &a).unwrap();
    let addr = t.ptr();
    write(&dev, &t, &side); // used on another stream...
    alloc.record_stream(&t, &side); // ...and declared
    alloc.record_stream(&t, &a); // own stream: no-op (rule 2)
    drop(t);
    assert_eq!(alloc.stats().pending_free_bytes, 1 << 20);
    let u = alloc.allocate(1 << 20, &a).unwrap();
    assert_ne!(
        u.ptr(),
        addr,
        "pending: not handed out before the side stream passed the event"
    );
    write(&dev, &u, &a);
    drop(u);
    dev.synchronize_device().unwrap();
    alloc.process_events().unwrap();
    assert_eq!(alloc.stats().pending_free_bytes, 0);
    let v = alloc.allocate(1 << 20, &a).unwrap();
    write(&dev, &v, &a);
    assert!(
        dev.race_reports().unwrap().is_empty(),
        "{:?}",
        dev.race_reports()
    );
    assert_eq!(
        alloc.stats().reuse_events_created,
        1,
        "one event for the one used stream"
    );
}

#[test]
fn without_record_stream_the_detector_reports_the_reuse_race_the_rule_prevents() {
    // The same program minus record_stream: the allocator hands the block straight back
    // and the mock must call it a reuse race (proving the previous test can fail).
    let config = MockConfig {
        delays: OpDelays {
            memset: std::time::Duration::from_millis(30),
            ..OpDelays::default()
        },
        ..MockConfig::with_capacity(64 << 20)
    };
    let dev = MockDevice::new(config).unwrap();
    let alloc = allocator(&dev);
    let (a, side) = (dev.default_stream(), dev.create_stream().unwrap());
    let t = alloc.allocate(1 << 20, &a).unwrap();
    write(&dev, &t, &side);
    drop(t);
    let u = alloc.allocate(1 << 20, &a).unwrap();
    write(&dev, &u, &a);
    let races = dev.race_reports().unwrap();
    assert_eq!(races.len(), 1, "{races:?}");
    assert_eq!(races[0].kind, RaceKind::Reuse);
    dev.synchronize_device().unwrap();
}

#[test]
fn rule_4_erase_stream_removes_only_that_works_use_and_only_from_the_blocks_stream() {
    let dev = device(64 << 20);
    let alloc = allocator(&dev);
    let (a, comm, other) = (
        dev.default_stream(),
        dev.create_stream().unwrap(),
        dev.create_stream().unwrap(),
    );
    let t = alloc.allocate(4096, &a).unwrap();
    let (w1, w2) = (WorkId::fresh(), WorkId::fresh());
    alloc.record_stream_for_work(&t, &comm, w1);
    alloc.record_stream_for_work(&t, &comm, w2);
    assert_eq!(
        alloc.erase_stream(&t, &comm, w1, &other),
        EraseOutcome::NotCurrentStream
    );
    assert_eq!(alloc.erase_stream(&t, &comm, w1, &a), EraseOutcome::Erased);
    drop(t);
    assert!(
        alloc.stats().pending_free_bytes > 0,
        "w2 still holds a use of comm"
    );
    dev.synchronize_device().unwrap();
    alloc.process_events().unwrap();
    assert_eq!(alloc.stats().pending_free_bytes, 0);
}

#[test]
fn oom_on_a_capacity_limited_mock_carries_the_numbers_calls_observers_and_recovers() {
    // Requests above 10 MiB get segments of their own size (rounded to 2 MiB), as in PyTorch.
    let dev = device(24 << 20);
    let alloc = allocator(&dev);
    let s = dev.default_stream();
    let seen = Arc::new(AtomicUsize::new(0));
    let seen_in = Arc::clone(&seen);
    let alloc_in = Arc::downgrade(&alloc);
    alloc.add_oom_observer(Arc::new(move |info| {
        // Runs without the allocator lock: reading stats from here must not deadlock.
        let stats = alloc_in.upgrade().map(|a| a.stats().reserved_bytes.current);
        assert_eq!(stats, Some(info.reserved));
        seen_in.fetch_add(1, Ordering::SeqCst);
    }));
    let keep = alloc.allocate(12 << 20, &s).unwrap();
    let err = alloc
        .allocate(14 << 20, &s)
        .expect_err("does not fit next to the first");
    let AllocError::OutOfMemory(oom) = &err else {
        panic!("expected OutOfMemory, got {err}")
    };
    assert_eq!(oom.requested, 14 << 20);
    assert_eq!(oom.device_total, 24 << 20);
    assert_eq!(oom.allocated, 12 << 20);
    assert_eq!(oom.device_free, 12 << 20);
    let msg = err.to_string();
    assert!(msg.contains("out of memory"), "{msg}");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_eq!(alloc.stats().num_ooms, 1);
    drop(keep);
    // The cached 12 MiB segment is too small: the retry chain releases it and succeeds.
    let again = alloc.allocate(14 << 20, &s).expect("served after the free");
    write(&dev, &again, &s);
    assert!(dev.race_reports().unwrap().is_empty());
}
