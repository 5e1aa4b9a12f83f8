//! Streams, events and host waits: ordering with injected delays, device-side waits,
//! timeouts.

mod common;

use std::time::{Duration, Instant};

use memreuse_core::{Backend, BackendError};
use memreuse_mock::{JointOp, MockCluster, MockConfig, OpDelays};

use common::{device, device_with, micros, read};

#[test]
fn one_stream_runs_in_order_despite_delays() {
    let dev = device_with(|c| {
        c.delays = OpDelays {
            memset: Duration::from_millis(20),
            ..OpDelays::default()
        };
    });
    let s = dev.default_stream();
    let p = dev.malloc(64).unwrap();
    dev.copy_host_to_device(p, &[1; 64], &s).unwrap();
    dev.memset_zero(p, 64, &s).unwrap(); // slow
    dev.copy_host_to_device(p, &[2; 32], &s).unwrap(); // must land after the memset
    assert_eq!(read(&dev, p, 64, &s), [vec![2; 32], vec![0; 32]].concat());
}

#[test]
fn enqueue_is_asynchronous_and_sync_waits() {
    let dev = device();
    let s = dev.default_stream();
    let t0 = Instant::now();
    dev.delay(micros(Duration::from_millis(100)), &s).unwrap();
    let ev = dev.create_event().unwrap();
    dev.record_event(&ev, &s).unwrap();
    // The host is not blocked by the enqueue (a loaded machine may still be slow, so only
    // the query's answer, not a duration, is asserted).
    let _ = dev.query_event(&ev).unwrap();
    dev.synchronize_event(&ev).unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(100));
    assert!(dev.query_event(&ev).unwrap());
}

#[test]
fn unrecorded_event_is_complete() {
    let dev = device();
    let ev = dev.create_event().unwrap();
    assert!(dev.query_event(&ev).unwrap());
    dev.synchronize_event(&ev).unwrap();
    dev.stream_wait_event(&dev.default_stream(), &ev).unwrap();
    dev.synchronize_device().unwrap();
}

#[test]
fn event_wait_orders_work_across_streams() {
    let dev = device();
    let a = dev.default_stream();
    let b = dev.create_stream().unwrap();
    assert_ne!(dev.stream_id(&a), dev.stream_id(&b));
    let p = dev.malloc(128).unwrap();
    // Stream a: a long delay, then the write b must see.
    dev.delay(micros(Duration::from_millis(150)), &a).unwrap();
    dev.copy_host_to_device(p, &[5; 128], &a).unwrap();
    let ev = dev.create_event().unwrap();
    dev.record_event(&ev, &a).unwrap();
    dev.stream_wait_event(&b, &ev).unwrap();
    let q = dev.malloc(128).unwrap();
    dev.copy_device_to_device(q, p, 128, &b).unwrap();
    // Only stream b is read: if b had not waited, it would have copied the fill pattern.
    assert_eq!(read(&dev, q, 128, &b), vec![5; 128]);
    assert!(dev.race_reports().unwrap().is_empty());
}

#[test]
fn host_wait_times_out_instead_of_hanging() {
    let cluster = MockCluster::new(
        2,
        MockConfig {
            sync_timeout: Duration::from_millis(200),
            joint_timeout: Duration::from_secs(30),
            ..MockConfig::with_capacity(1 << 20)
        },
    )
    .unwrap();
    let group = cluster.group().unwrap();
    let dev = &cluster.devices()[0];
    let s = dev.default_stream();
    // Rank 1 never arrives and the joint timeout is long: the stream is stuck.
    group.submit(0, &s, JointOp::new("barrier")).unwrap();
    let err = dev.synchronize_stream(&s).unwrap_err();
    assert!(matches!(err, BackendError::Timeout { .. }), "{err}");
}
