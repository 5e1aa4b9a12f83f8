//! The Chrome-trace timeline: valid JSON, matched begin/end pairs, monotonic counters.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use memreuse_core::allocator::{
    AllocatorConfig, CachingAllocator, DEFAULT_TRACE_CAPACITY, trace_clock_us,
};
use memreuse_core::observe::{MemorySample, Timeline};
use memreuse_core::process_group::{CommKind, WorkSpan};
use memreuse_core::testing::ManualBackend;
use memreuse_core::{Backend, WorkId};
use serde_json::Value;

/// Checks the rules every timeline must satisfy; returns (spans by category, counters).
fn validate(text: &str) -> (HashMap<String, usize>, usize) {
    let v: Value = serde_json::from_str(text).expect("valid JSON");
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let mut open: HashMap<(String, String), f64> = HashMap::new();
    let mut spans: HashMap<String, usize> = HashMap::new();
    let mut last_counter: HashMap<String, f64> = HashMap::new();
    let mut counters = 0;
    let mut last_ts = f64::MIN;
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        if ph == "M" {
            continue;
        }
        let ts = e["ts"].as_f64().expect("ts");
        assert!(ts >= last_ts, "events sorted by ts");
        last_ts = ts;
        match ph {
            "b" => {
                let k = (
                    e["cat"].as_str().unwrap().to_owned(),
                    e["id"].as_str().unwrap().to_owned(),
                );
                assert!(open.insert(k, ts).is_none(), "one begin per id");
            }
            "e" => {
                let k = (
                    e["cat"].as_str().unwrap().to_owned(),
                    e["id"].as_str().unwrap().to_owned(),
                );
                let begin = open.remove(&k).expect("end matches a begin");
                assert!(ts >= begin);
                *spans.entry(k.0).or_default() += 1;
            }
            "C" => {
                let name = e["name"].as_str().unwrap().to_owned();
                let prev = last_counter.insert(name, ts).unwrap_or(f64::MIN);
                assert!(ts >= prev, "counter timestamps monotonic");
                counters += 1;
            }
            "i" => {}
            other => panic!("unexpected phase {other}"),
        }
    }
    assert!(open.is_empty(), "unmatched begins: {open:?}");
    (spans, counters)
}

#[test]
fn timeline_has_stream_tracks_pending_free_and_collective_spans_and_counters() {
    let backend = Arc::new(ManualBackend::new(1 << 40));
    let config = AllocatorConfig::default().with_trace_capacity(DEFAULT_TRACE_CAPACITY);
    let alloc = CachingAllocator::new(Arc::clone(&backend), config);
    let s0 = backend.default_stream();
    let s1 = backend.create_stream().unwrap();
    let mut samples = Vec::new();
    let mut sample = |alloc: &CachingAllocator<ManualBackend>| {
        let s = alloc.stats();
        samples.push(MemorySample {
            time_us: trace_clock_us(),
            allocated: s.allocated_bytes.current,
            reserved: s.reserved_bytes.current,
        });
    };
    let a = alloc.allocate(4096, &s0).unwrap();
    sample(&alloc);
    let b = alloc.allocate(8 << 20, &s1).unwrap();
    sample(&alloc);
    backend.enqueue_work(&s1).unwrap();
    alloc.record_stream(&a, &s1);
    let start = trace_clock_us();
    drop(a);
    sample(&alloc);
    std::thread::sleep(Duration::from_millis(2));
    backend.advance_all();
    alloc.process_events().unwrap();
    sample(&alloc);
    drop(b);
    let _still_pending = {
        let c = alloc.allocate(1000, &s0).unwrap();
        backend.enqueue_work(&s1).unwrap();
        alloc.record_stream(&c, &s1);
        drop(c);
        std::thread::sleep(Duration::from_millis(1));
        alloc.allocate(10, &s0).unwrap()
    };
    sample(&alloc);
    let end = trace_clock_us();
    let spans = [WorkSpan {
        id: WorkId(9),
        op: "all_reduce",
        kind: CommKind::Collective,
        start_us: start,
        end_us: end,
        failed: false,
    }];
    let snap = alloc.snapshot();
    let mut t = Timeline::new("rank 0", 0);
    t.add_trace(&snap.traces);
    t.add_work_spans(backend.stream_id(&s1), &spans);
    t.add_memory_samples(&samples);
    let text = t.to_json();
    let (spans, counters) = validate(&text);
    assert_eq!(spans.get("collective"), Some(&1));
    // At least the record_stream'd free that completed and the one still pending (an
    // immediate free whose two trace entries straddle a microsecond tick adds a 1 us span).
    assert!(
        spans.get("pending_free").copied().unwrap_or(0) >= 2,
        "one completed, one closed at the end: {spans:?}"
    );
    assert_eq!(counters, 2 * samples.len());
    let v: Value = serde_json::from_str(&text).unwrap();
    let unfinished = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "b" && e["args"]["unfinished"] == true)
        .count();
    assert_eq!(
        unfinished, 1,
        "the block still pending is closed at the end"
    );
    let names: Vec<&str> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("comm stream")),
        "{names:?}"
    );
    assert!(
        names.iter().filter(|n| n.starts_with("stream")).count() >= 1,
        "{names:?}"
    );
    backend.advance_all();
}
