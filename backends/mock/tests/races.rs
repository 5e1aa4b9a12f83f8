//! The happens-before race detector: planted bugs are caught and classified, correct
//! patterns are not flagged, history stays bounded.

mod common;

use memreuse_core::{AccessKind, AllocationId, Backend, RaceKind};
use memreuse_mock::{HOST_STREAM, MemAccess};

use common::device;

#[test]
fn reuse_by_another_stream_without_record_stream_is_a_reuse_race() {
    let dev = device();
    let a = dev.default_stream();
    let b = dev.create_stream().unwrap();
    let seg = dev.malloc(4096).unwrap();
    let x = seg.offset(1024);
    // The allocator hands [x, x+512) out as allocation 1, used by stream a.
    dev.annotate_allocation(x, 512, AllocationId(1));
    dev.set_op_label("grad bucket");
    dev.memset_zero(x, 512, &a).unwrap();
    // It is freed without record_stream and handed out again as allocation 2 to b.
    dev.annotate_allocation(x, 512, AllocationId(2));
    dev.set_op_label("next tensor");
    dev.copy_host_to_device(x.offset(256), &[1; 512], &b)
        .unwrap();

    let reports = dev.race_reports().unwrap();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let race = &reports[0];
    assert_eq!(race.kind, RaceKind::Reuse);
    assert_eq!(race.range, x.addr() + 256..x.addr() + 512);
    assert_eq!(race.earlier.op, "memset_zero [grad bucket]");
    assert_eq!(race.earlier.stream, dev.stream_id(&a));
    assert_eq!(race.earlier.kind, AccessKind::Write);
    assert_eq!(race.earlier.allocation, Some(AllocationId(1)));
    assert_eq!(race.later.op, "copy_host_to_device [next tensor]");
    assert_eq!(race.later.stream, dev.stream_id(&b));
    assert_eq!(race.later.allocation, Some(AllocationId(2)));
    assert!(race.to_string().contains("reuse race"));
}

#[test]
fn unsynchronized_read_is_a_schedule_race() {
    let dev = device();
    let a = dev.default_stream();
    let b = dev.create_stream().unwrap();
    let p = dev.malloc(1024).unwrap();
    let q = dev.malloc(1024).unwrap();
    dev.annotate_allocation(p, 1024, AllocationId(7));
    dev.copy_host_to_device(p, &[3; 1024], &a).unwrap();
    dev.copy_device_to_device(q, p, 1024, &b).unwrap(); // reads p, no wait
    let reports = dev.race_reports().unwrap();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let race = &reports[0];
    assert_eq!(race.kind, RaceKind::Schedule);
    assert_eq!(race.range, p.addr()..p.addr() + 1024);
    assert_eq!(
        (race.earlier.kind, race.later.kind),
        (AccessKind::Write, AccessKind::Read)
    );
    assert_eq!(race.later.op, "copy_device_to_device");
    // Concurrent reads are fine.
    dev.copy_device_to_device(q, p, 1024, &a).unwrap();
    assert_eq!(
        dev.race_reports().unwrap().len(),
        2,
        "the write to q on a races with b's write to q"
    );
}

#[test]
fn correct_patterns_are_not_flagged() {
    let dev = device();
    let a = dev.default_stream();
    let b = dev.create_stream().unwrap();
    let p = dev.malloc(4096).unwrap();
    dev.annotate_allocation(p, 4096, AllocationId(1));

    // Same-stream reuse.
    dev.memset_zero(p, 4096, &a).unwrap();
    dev.annotate_allocation(p, 4096, AllocationId(2));
    dev.copy_host_to_device(p, &[1; 4096], &a).unwrap();

    // Event record + stream_wait_event.
    let ev = dev.create_event().unwrap();
    dev.record_event(&ev, &a).unwrap();
    dev.stream_wait_event(&b, &ev).unwrap();
    dev.memset_zero(p, 4096, &b).unwrap();

    // Host synchronize between the accesses.
    dev.synchronize_stream(&b).unwrap();
    dev.memset_zero(p, 4096, &a).unwrap();
    dev.synchronize_device().unwrap();
    dev.memset_zero(p, 2048, &b).unwrap();

    // query_event returning true.
    let ev2 = dev.create_event().unwrap();
    dev.record_event(&ev2, &b).unwrap();
    while !dev.query_event(&ev2).unwrap() {
        std::thread::yield_now();
    }
    dev.memset_zero(p, 2048, &a).unwrap();

    // synchronize_event, then the blocking device->host copy.
    dev.record_event(&ev2, &a).unwrap();
    dev.synchronize_event(&ev2).unwrap();
    dev.memset_zero(p, 512, &b).unwrap();
    let mut out = [0u8; 512];
    dev.copy_device_to_host(&mut out, p, &b).unwrap();
    dev.memset_zero(p, 512, &a).unwrap();

    // Reads on two streams do not conflict.
    let q = dev.malloc(4096).unwrap();
    dev.synchronize_device().unwrap();
    dev.copy_device_to_device(q, p, 1024, &a).unwrap();
    dev.copy_device_to_device(q.offset(1024), p, 1024, &b)
        .unwrap();

    // Freeing after synchronizing is not a race.
    dev.synchronize_device().unwrap();
    dev.free(q).unwrap();
    dev.free(p).unwrap();
    assert_eq!(dev.race_reports().unwrap(), vec![]);
    assert_eq!(dev.race_count(), 0);
}

#[test]
fn waiting_on_an_earlier_recording_is_not_enough() {
    let dev = device();
    let a = dev.default_stream();
    let b = dev.create_stream().unwrap();
    let p = dev.malloc(256).unwrap();
    let ev = dev.create_event().unwrap();
    dev.record_event(&ev, &a).unwrap();
    dev.memset_zero(p, 256, &a).unwrap(); // after the recording
    dev.stream_wait_event(&b, &ev).unwrap();
    dev.memset_zero(p, 256, &b).unwrap();
    assert_eq!(dev.race_reports().unwrap().len(), 1);
}

#[test]
fn free_while_in_use_is_reported() {
    let dev = device();
    let a = dev.default_stream();
    let p = dev.malloc(256).unwrap();
    dev.memset_zero(p, 256, &a).unwrap();
    dev.free(p).unwrap();
    let reports = dev.race_reports().unwrap();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert_eq!(reports[0].kind, RaceKind::Reuse);
    assert_eq!(reports[0].later.op, "free");
    assert_eq!(reports[0].later.stream, HOST_STREAM);
}

#[test]
fn identical_races_are_reported_once() {
    let dev = device();
    let a = dev.default_stream();
    let b = dev.create_stream().unwrap();
    let p = dev.malloc(256).unwrap();
    for _ in 0..50 {
        dev.memset_zero(p, 256, &a).unwrap();
        dev.memset_zero(p, 256, &b).unwrap();
    }
    let reports = dev.race_reports().unwrap();
    // (a then b) and (b then a) with the same ops, streams and range.
    assert_eq!(reports.len(), 2, "{reports:#?}");
    assert_eq!(dev.race_count(), 2);
}

#[test]
fn custom_op_accesses_are_checked() {
    let dev = device();
    let a = dev.default_stream();
    let b = dev.create_stream().unwrap();
    let p = dev.malloc(64).unwrap();
    dev.enqueue_custom(&a, "scale", &[MemAccess::write(p, 64)], |mem| {
        mem.bytes_mut(0, 0)?.fill(4);
        Ok(())
    })
    .unwrap();
    let mut out = [0u8; 64];
    dev.copy_device_to_host(&mut out, p, &a).unwrap();
    assert_eq!(out, [4; 64]);
    dev.enqueue_custom(&b, "peek", &[MemAccess::read(p, 1)], |_| Ok(()))
        .unwrap();
    assert!(
        dev.race_reports().unwrap().is_empty(),
        "the host observed the write"
    );
    dev.enqueue_custom(&a, "scale", &[MemAccess::write(p, 64)], |_| Ok(()))
        .unwrap();
    let reports = dev.race_reports().unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(
        (reports[0].earlier.op.as_str(), reports[0].later.op.as_str()),
        ("peek", "scale")
    );
}

#[test]
fn history_stays_bounded_over_thousands_of_ops() {
    let dev = device();
    let streams: Vec<_> = (0..4).map(|_| dev.create_stream().unwrap()).collect();
    let seg = dev.malloc(1 << 16).unwrap();
    let ev = dev.create_event().unwrap();
    for i in 0..5000u64 {
        let s = &streams[((i / 64) % 4) as usize];
        let off = (i % 64) * 1024;
        dev.annotate_allocation(seg.offset(off), 1024, AllocationId(i + 1));
        dev.memset_zero(seg.offset(off), 1024, s).unwrap();
        // Everyone joins up now and then, as a training step's end does.
        if i % 200 == 199 {
            for s in &streams {
                dev.record_event(&ev, s).unwrap();
                dev.synchronize_event(&ev).unwrap();
            }
        }
    }
    dev.synchronize_device().unwrap();
    assert_eq!(dev.history_len(), 0);
    assert!(
        dev.race_count() > 0,
        "4 streams touching the same blocks unsynchronized"
    );
}

#[test]
fn race_detection_off_records_nothing_but_still_validates() {
    // The benchmark-only switch: the same planted reuse race goes unreported, and nothing
    // else changes (ranges are still validated, data still moves).
    let dev = common::device_with(|c| c.race_detection = false);
    let a = dev.default_stream();
    let b = dev.create_stream().unwrap();
    let x = dev.malloc(4096).unwrap();
    dev.annotate_allocation(x, 512, AllocationId(1));
    dev.memset_zero(x, 512, &a).unwrap();
    dev.annotate_allocation(x, 512, AllocationId(2));
    dev.copy_host_to_device(x, &[1; 512], &b).unwrap();
    assert!(dev.copy_host_to_device(x, &[1; 8192], &b).is_err());
    dev.synchronize_device().unwrap();
    dev.copy_host_to_device(x, &[2; 4], &b).unwrap();
    assert_eq!(common::read(&dev, x, 4, &b), [2; 4]);
    assert!(
        dev.race_reports().is_none(),
        "a detector-less device says so"
    );
}
