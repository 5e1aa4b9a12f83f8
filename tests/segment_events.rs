//! Segment events (docs/segment-events.md): who is told what, in which order, and what a
//! failing or panicking subscriber leaves behind.

use std::sync::{Arc, Mutex};

use memreuse::Backend;
use memreuse::allocator::{
    AllocatorConfig, CachingAllocator, MemPoolId, MemPoolOptions, SegmentEvent, SegmentEventKind,
    SegmentSubscriber, TraceAction,
};
use memreuse::mock::{MockConfig, MockDevice};
use memreuse::observe::ViewerSnapshot;

const MIB: u64 = 1 << 20;

fn device(capacity: u64) -> MockDevice {
    MockDevice::new(MockConfig::with_capacity(capacity)).expect("mock device")
}

fn allocator(dev: &MockDevice, conf: &str) -> Arc<CachingAllocator<MockDevice>> {
    let config = AllocatorConfig::parse(conf)
        .expect("configuration")
        .with_trace_capacity(4096);
    CachingAllocator::try_new(Arc::new(dev.clone()), config).expect("allocator")
}

type Log = Arc<Mutex<Vec<SegmentEvent>>>;

fn recorder(log: &Log) -> Arc<SegmentSubscriber> {
    let log = Arc::clone(log);
    Arc::new(move |e: &SegmentEvent| {
        log.lock().unwrap().push(*e);
        Ok(())
    })
}

fn kinds(log: &Log) -> Vec<SegmentEventKind> {
    log.lock().unwrap().iter().map(|e| e.kind).collect()
}

#[test]
fn a_segment_obtained_and_given_back_is_told_with_its_stream_address_size_and_pool() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev, "");
    let log = Log::default();
    alloc.subscribe_segment_events(recorder(&log));
    let s = dev.create_stream().unwrap();
    let t = alloc.allocate(4 * MIB, &s).unwrap();
    {
        let l = log.lock().unwrap();
        assert_eq!(l.len(), 1, "{l:?}");
        let e = l[0];
        assert_eq!(e.kind, SegmentEventKind::SegmentAlloc);
        assert_eq!((e.addr, e.size), (t.ptr().addr(), 20 * MIB));
        assert_eq!(e.stream, dev.stream_id(&s));
        assert_eq!(e.pool, MemPoolId::DEFAULT);
    }
    drop(t);
    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "a block freed into the cache is no segment event"
    );
    alloc.empty_cache().unwrap();
    let l = log.lock().unwrap().clone();
    assert_eq!(
        kinds(&log),
        [
            SegmentEventKind::SegmentAlloc,
            SegmentEventKind::SegmentFree
        ]
    );
    assert_eq!(
        (l[1].addr, l[1].size, l[1].stream),
        (l[0].addr, l[0].size, l[0].stream)
    );
}

#[test]
fn a_pools_segments_carry_its_id() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev, "");
    let log = Log::default();
    alloc.subscribe_segment_events(recorder(&log));
    let s = dev.default_stream();
    let pool = alloc.create_pool(MemPoolOptions::default());
    drop(pool.allocate(4096, &s).unwrap());
    let id = pool.id();
    drop(pool);
    let l = log.lock().unwrap().clone();
    assert_eq!(
        kinds(&log),
        [
            SegmentEventKind::SegmentAlloc,
            SegmentEventKind::SegmentFree
        ]
    );
    assert!(l.iter().all(|e| e.pool == id), "{l:?}");
}

#[test]
fn expandable_segments_tell_reserve_map_unmap_and_unreserve_and_the_trace_records_the_reserve() {
    use SegmentEventKind::{Map, Reserve, Unmap, Unreserve};
    let dev = device(1 << 30);
    let alloc = allocator(&dev, "expandable_segments:True");
    let log = Log::default();
    alloc.subscribe_segment_events(recorder(&log));
    let s = dev.default_stream();
    drop(alloc.allocate(30 * MIB, &s).unwrap());
    alloc.empty_cache().unwrap();
    let k = kinds(&log);
    assert_eq!(k.first(), Some(&Reserve), "{k:?}");
    assert_eq!(k.last(), Some(&Unreserve), "{k:?}");
    assert!(k.contains(&Map) && k.contains(&Unmap), "{k:?}");
    let l = log.lock().unwrap().clone();
    let mapped: u64 = l.iter().filter(|e| e.kind == Map).map(|e| e.size).sum();
    let unmapped: u64 = l.iter().filter(|e| e.kind == Unmap).map(|e| e.size).sum();
    assert_eq!(mapped, unmapped, "every mapped page unmapped");
    assert!(mapped >= 30 * MIB);
    let reserve = l[0];
    assert_eq!(
        (l.last().unwrap().addr, l.last().unwrap().size),
        (reserve.addr, reserve.size)
    );
    let snap = alloc.snapshot();
    let traced: Vec<_> = snap
        .traces
        .iter()
        .filter(|t| t.action == TraceAction::SegmentReserve)
        .collect();
    assert_eq!(traced.len(), 1);
    assert_eq!(
        (traced[0].addr, traced[0].size),
        (reserve.addr, reserve.size)
    );
    assert_eq!(TraceAction::SegmentReserve.as_str(), "segment_reserve");
    let json = ViewerSnapshot::from_snapshot(0, &snap)
        .unwrap()
        .to_json()
        .unwrap();
    assert!(
        json.contains("segment_map"),
        "the viewer keeps PyTorch's actions"
    );
    assert!(
        !json.contains("segment_reserve"),
        "and leaves out memreuse's own"
    );
}

#[test]
fn a_failing_or_panicking_subscriber_is_recorded_and_the_others_still_hear_every_event() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev, "");
    let failing = alloc.subscribe_segment_events(Arc::new(|e: &SegmentEvent| {
        Err(format!("cannot register {:#x}", e.addr).into())
    }));
    let panicking = alloc.subscribe_segment_events(Arc::new(|e: &SegmentEvent| {
        assert!(
            e.kind != SegmentEventKind::SegmentFree,
            "subscriber panics on free"
        );
        Ok(())
    }));
    let log = Log::default();
    alloc.subscribe_segment_events(recorder(&log));
    let s = dev.default_stream();
    let t = alloc
        .allocate(4 * MIB, &s)
        .expect("the allocation itself succeeds");
    let addr = t.ptr().addr();
    drop(t);
    alloc.empty_cache().expect("empty_cache succeeds");
    assert_eq!(
        kinds(&log),
        [
            SegmentEventKind::SegmentAlloc,
            SegmentEventKind::SegmentFree
        ]
    );
    let (failures, total) = alloc.take_segment_event_failures();
    assert_eq!(total, 3, "{failures:?}");
    assert_eq!(failures.len(), 3);
    assert_eq!(failures[0].subscriber, failing);
    assert_eq!(failures[0].event.kind, SegmentEventKind::SegmentAlloc);
    assert!(!failures[0].panicked);
    assert_eq!(failures[0].reason, format!("cannot register {addr:#x}"));
    let p = failures
        .iter()
        .find(|f| f.subscriber == panicking)
        .expect("the panic");
    assert!(
        p.panicked && p.reason.contains("subscriber panics on free"),
        "{p:?}"
    );
    assert_eq!(p.event.kind, SegmentEventKind::SegmentFree);
    assert!(
        alloc.take_segment_event_failures().0.is_empty(),
        "taken once"
    );
    // Nothing is poisoned: the allocator keeps serving and reporting.
    let t = alloc.allocate(4 * MIB, &s).unwrap();
    let st = alloc.stats();
    assert_eq!(st.num_device_alloc, 2);
    drop(t);
    assert_eq!(
        alloc.take_segment_event_failures().1,
        1,
        "the new segment's alloc failed again"
    );
    alloc.unsubscribe_segment_events(failing);
    alloc.unsubscribe_segment_events(panicking);
    alloc.empty_cache().unwrap();
    assert_eq!(
        alloc.take_segment_event_failures().1,
        0,
        "gone with its subscribers"
    );
    assert_eq!(kinds(&log).len(), 4);
}

#[test]
fn a_subscriber_may_call_the_allocator_and_its_events_come_after() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev, "");
    let log = Log::default();
    alloc.subscribe_segment_events(recorder(&log));
    let inner = Arc::downgrade(&alloc);
    let s = dev.default_stream();
    let s2 = s;
    let kept = Arc::new(Mutex::new(Vec::new()));
    let kept2 = Arc::clone(&kept);
    alloc.subscribe_segment_events(Arc::new(move |e: &SegmentEvent| {
        if e.kind == SegmentEventKind::SegmentAlloc && e.size == 20 * MIB {
            let a = inner.upgrade().expect("alive");
            kept2.lock().unwrap().push(a.allocate(64 * MIB, &s2)?);
        }
        Ok(())
    }));
    let t = alloc.allocate(4 * MIB, &s).unwrap();
    let l = log.lock().unwrap().clone();
    assert_eq!(l.len(), 2, "{l:?}");
    assert_eq!(
        (l[0].size, l[1].size),
        (20 * MIB, 64 * MIB),
        "the outer event first"
    );
    drop(t);
    kept.lock().unwrap().clear();
    assert_eq!(alloc.take_segment_event_failures().1, 0);
}

#[test]
fn events_from_several_threads_arrive_in_the_order_they_happened() {
    let dev = device(1 << 30);
    let alloc = allocator(&dev, "");
    let log = Log::default();
    alloc.subscribe_segment_events(recorder(&log));
    let threads: Vec<_> = (0..4u64)
        .map(|i| {
            let a = Arc::clone(&alloc);
            let s = dev.default_stream();
            std::thread::spawn(move || {
                for round in 0..25u64 {
                    let t = a.allocate((12 + i * 3 + round % 5) * MIB, &s).unwrap();
                    drop(t);
                    a.empty_cache().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let seen: Vec<(bool, u64, u64)> = log
        .lock()
        .unwrap()
        .iter()
        .map(|e| (e.kind == SegmentEventKind::SegmentAlloc, e.addr, e.size))
        .collect();
    let traced: Vec<(bool, u64, u64)> = alloc
        .snapshot()
        .traces
        .iter()
        .filter(|t| {
            matches!(
                t.action,
                TraceAction::SegmentAlloc | TraceAction::SegmentFree
            )
        })
        .map(|t| (t.action == TraceAction::SegmentAlloc, t.addr, t.size))
        .collect();
    // A thread may reuse a block another cached before its empty_cache: fewer than 200
    // segments are possible, so the trace is the reference.
    assert!(!seen.is_empty());
    assert_eq!(seen, traced, "the subscriber saw the trace's order");
}

#[test]
fn subscribing_changes_no_figure_and_unsubscribing_stops_the_events() {
    let run = |subscribe: bool| {
        let dev = device(256 * MIB);
        let alloc = allocator(&dev, "expandable_segments:True");
        let log = Log::default();
        let id = subscribe.then(|| alloc.subscribe_segment_events(recorder(&log)));
        let s = dev.default_stream();
        let a = alloc.allocate(30 * MIB, &s).unwrap();
        let b = alloc.allocate(4096, &s).unwrap();
        drop(a);
        alloc.empty_cache().unwrap();
        drop(b);
        if let Some(id) = id {
            alloc.unsubscribe_segment_events(id);
        }
        let before = log.lock().unwrap().len();
        alloc.empty_cache().unwrap();
        assert_eq!(
            log.lock().unwrap().len(),
            before,
            "no event after unsubscribing"
        );
        let actions: Vec<_> = alloc
            .snapshot()
            .traces
            .iter()
            .map(|t| (t.action, t.size))
            .collect();
        (format!("{:?}", alloc.stats()), actions, before)
    };
    let (without, trace_without, _) = run(false);
    let (with, trace_with, events) = run(true);
    assert_eq!(without, with, "the statistics are the same");
    assert_eq!(trace_without, trace_with, "and so is the trace");
    assert!(events > 0);
}
