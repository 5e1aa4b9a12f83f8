//! The Vulkan communicator: data of every collective and of point-to-point, NCCL matching,
//! a member that never arrives, abort, and gated streams that never block other streams.
//!
//! Every call is non-blocking (it closes a gate and returns), so one thread can issue the
//! operation for every rank in turn.

mod common;

use std::time::{Duration, Instant};

use common::{f32_bytes, f32_values};
use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp};
use memreuse_core::{Backend, BackendError, DevicePtr};
use memreuse_vulkan::{VulkanCommunicator, VulkanDevice};

const LONG: Duration = Duration::from_secs(60);

type Rank = (VulkanDevice, VulkanCommunicator);

fn upload(rank: &Rank, values: &[f32]) -> DevicePtr {
    let d = &rank.0;
    let p = d.malloc(4096).unwrap();
    d.copy_host_to_device(p, &f32_bytes(values), &d.default_stream())
        .unwrap();
    p
}

fn download(rank: &Rank, p: DevicePtr, n: usize) -> Vec<f32> {
    let mut out = vec![0u8; n * 4];
    rank.0
        .copy_device_to_host(&mut out, p, &rank.0.default_stream())
        .unwrap();
    f32_values(&out)
}

/// Polls `async_error` until it reports something (at most `limit`).
fn wait_error(c: &VulkanCommunicator, limit: Duration) -> CommError {
    let start = Instant::now();
    loop {
        if let Some(e) = c.async_error() {
            return e;
        }
        assert!(
            start.elapsed() < limit,
            "no asynchronous error after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn every_collective_moves_the_data_nccl_moves() {
    let Some(w) = common::world(3, LONG) else {
        return;
    };
    // all_reduce (sum) in place.
    let bufs: Vec<_> = (0..3)
        .map(|r| upload(&w[r], &[r as f32, 1.0, 10.0 * r as f32]))
        .collect();
    for (r, rank) in w.iter().enumerate() {
        let s = rank.0.default_stream();
        rank.1
            .all_reduce(bufs[r], 3, DType::F32, ReduceOp::Sum, &s)
            .unwrap();
    }
    for (r, rank) in w.iter().enumerate() {
        assert_eq!(
            download(rank, bufs[r], 3),
            [3.0, 3.0, 30.0],
            "all_reduce rank {r}"
        );
    }
    // all_gather, reduce_scatter (max), all_to_all, broadcast from rank 2.
    let ins: Vec<_> = (0..3)
        .map(|r| upload(&w[r], &[r as f32, 0.5 + r as f32]))
        .collect();
    let outs: Vec<_> = (0..3).map(|r| upload(&w[r], &[0.0; 6])).collect();
    for (r, rank) in w.iter().enumerate() {
        let s = rank.0.default_stream();
        rank.1
            .all_gather(ins[r], outs[r], 2, DType::F32, &s)
            .unwrap();
    }
    for (r, rank) in w.iter().enumerate() {
        assert_eq!(
            download(rank, outs[r], 6),
            [0.0, 0.5, 1.0, 1.5, 2.0, 2.5],
            "all_gather {r}"
        );
    }
    let rs_in: Vec<_> = (0..3)
        .map(|r| {
            upload(
                &w[r],
                &[r as f32, -(r as f32), 5.0, 1.0, 2.0, 3.0 * r as f32],
            )
        })
        .collect();
    let rs_out: Vec<_> = (0..3).map(|r| upload(&w[r], &[0.0; 2])).collect();
    for (r, rank) in w.iter().enumerate() {
        let s = rank.0.default_stream();
        let op = ReduceOp::Max;
        rank.1
            .reduce_scatter(rs_in[r], rs_out[r], 2, DType::F32, op, &s)
            .unwrap();
    }
    let expected = [[2.0, 0.0], [5.0, 1.0], [2.0, 6.0]];
    for (r, rank) in w.iter().enumerate() {
        assert_eq!(
            download(rank, rs_out[r], 2),
            expected[r],
            "reduce_scatter {r}"
        );
    }
    let a2a_in: Vec<_> = (0..3)
        .map(|r| {
            upload(
                &w[r],
                &[
                    10.0 * r as f32,
                    10.0 * r as f32 + 1.0,
                    10.0 * r as f32 + 2.0,
                ],
            )
        })
        .collect();
    let a2a_out: Vec<_> = (0..3).map(|r| upload(&w[r], &[0.0; 3])).collect();
    for (r, rank) in w.iter().enumerate() {
        let s = rank.0.default_stream();
        rank.1
            .all_to_all(a2a_in[r], a2a_out[r], 1, DType::F32, &s)
            .unwrap();
    }
    for (j, rank) in w.iter().enumerate() {
        let j = j as f32;
        assert_eq!(
            download(rank, a2a_out[j as usize], 3),
            [j, 10.0 + j, 20.0 + j],
            "all_to_all"
        );
    }
    let bc: Vec<_> = (0..3).map(|r| upload(&w[r], &[r as f32; 2])).collect();
    for (r, rank) in w.iter().enumerate() {
        rank.1
            .broadcast(bc[r], 2, DType::F32, 2, &rank.0.default_stream())
            .unwrap();
    }
    for (r, rank) in w.iter().enumerate() {
        assert_eq!(download(rank, bc[r], 2), [2.0, 2.0], "broadcast {r}");
    }
    for rank in &w {
        rank.1.barrier(&rank.0.default_stream()).unwrap();
    }
    for (r, rank) in w.iter().enumerate() {
        rank.0.synchronize_device().unwrap();
        assert!(rank.1.async_error().is_none());
        for p in [
            bufs[r], ins[r], outs[r], rs_in[r], rs_out[r], a2a_in[r], a2a_out[r], bc[r],
        ] {
            rank.0.free(p).unwrap();
        }
    }
}

#[test]
fn grouped_sends_and_receives_in_both_directions_complete_and_ungrouped_ones_match_in_order() {
    let Some(w) = common::world(2, LONG) else {
        return;
    };
    let send: Vec<_> = (0..2)
        .map(|r| upload(&w[r], &[r as f32 + 1.0; 4]))
        .collect();
    let recv: Vec<_> = (0..2).map(|r| upload(&w[r], &[0.0; 4])).collect();
    // Both ranks send first, then receive: only a group makes this complete.
    for (r, rank) in w.iter().enumerate() {
        let s = rank.0.default_stream();
        rank.1.group_start().unwrap();
        rank.1.send(send[r], 4, DType::F32, 1 - r, &s).unwrap();
        rank.1.recv(recv[r], 4, DType::F32, 1 - r, &s).unwrap();
        rank.1.group_end().unwrap();
    }
    assert_eq!(download(&w[0], recv[0], 4), [2.0; 4]);
    assert_eq!(download(&w[1], recv[1], 4), [1.0; 4]);
    // Two ungrouped transfers 0 -> 1 match the receives in issue order.
    let second = upload(&w[0], &[9.0; 4]);
    let s0 = w[0].0.default_stream();
    w[0].1.send(send[0], 4, DType::F32, 1, &s0).unwrap();
    w[0].1.send(second, 4, DType::F32, 1, &s0).unwrap();
    let s1 = w[1].0.default_stream();
    let other = upload(&w[1], &[0.0; 4]);
    w[1].1.recv(recv[1], 4, DType::F32, 0, &s1).unwrap();
    w[1].1.recv(other, 4, DType::F32, 0, &s1).unwrap();
    assert_eq!(download(&w[1], recv[1], 4), [1.0; 4]);
    assert_eq!(download(&w[1], other, 4), [9.0; 4]);
}

#[test]
fn a_member_that_never_arrives_is_a_timeout_and_the_others_streams_are_released() {
    let Some(w) = common::world(3, Duration::from_millis(200)) else {
        return;
    };
    let bufs: Vec<_> = (0..2).map(|r| upload(&w[r], &[1.0; 4])).collect();
    for r in 0..2 {
        let s = w[r].0.default_stream();
        w[r].1
            .all_reduce(bufs[r], 4, DType::F32, ReduceOp::Sum, &s)
            .unwrap();
    }
    match wait_error(&w[0].1, LONG) {
        CommError::Backend(BackendError::Timeout { what, .. }) => {
            assert!(what.contains("ranks [2] never issued it"), "{what}");
        }
        other => panic!("expected a timeout, got {other}"),
    }
    // The gates of ranks 0 and 1 opened without the data moving: a wait that covers the
    // dropped collective reports the timeout (sticky, as the mock), nothing hangs.
    for r in 0..2 {
        let stream = w[r].0.default_stream();
        match w[r].0.synchronize_stream(&stream) {
            Err(BackendError::Timeout { what, .. }) => {
                assert!(what.contains("ranks [2]"), "{what}");
            }
            other => panic!("expected the timeout from the wait, got {other:?}"),
        }
        let mut out = [0u8; 16];
        assert!(
            w[r].0
                .copy_device_to_host(&mut out, bufs[r], &stream)
                .is_err()
        );
    }
    let late = w[2].1.all_reduce(
        bufs[0],
        4,
        DType::F32,
        ReduceOp::Sum,
        &w[2].0.default_stream(),
    );
    assert!(matches!(late, Err(CommError::Aborted { .. })), "{late:?}");
}

#[test]
fn abort_releases_every_gate_and_refuses_later_calls() {
    let Some(w) = common::world(2, LONG) else {
        return;
    };
    let p = upload(&w[0], &[3.0; 4]);
    let s = w[0].0.default_stream();
    w[0].1
        .all_reduce(p, 4, DType::F32, ReduceOp::Sum, &s)
        .unwrap();
    let after = w[0].0.create_event().unwrap();
    w[0].0.record_event(&after, &s).unwrap();
    assert!(
        !w[0].0.query_event(&after).unwrap(),
        "held until rank 1 arrives"
    );
    w[1].1.abort();
    match w[0].0.synchronize_event(&after) {
        Err(BackendError::Device { code_name, .. }) => assert_eq!(code_name, "VULKAN_COMM_ABORTED"),
        other => panic!("expected the abort from the wait, got {other:?}"),
    }
    assert!(
        w[0].0.query_event(&after).is_err(),
        "the gate opened, failed"
    );
    assert!(matches!(
        w[0].1.async_error(),
        Some(CommError::Aborted { .. })
    ));
    let again = w[0].1.barrier(&s);
    assert!(matches!(again, Err(CommError::Aborted { .. })), "{again:?}");
}

#[test]
fn a_count_that_differs_across_members_is_an_error_on_every_member() {
    let Some(w) = common::world(2, LONG) else {
        return;
    };
    let bufs: Vec<_> = (0..2).map(|r| upload(&w[r], &[1.0; 8])).collect();
    for (r, count) in [(0, 4), (1, 8)] {
        let s = w[r].0.default_stream();
        w[r].1
            .all_reduce(bufs[r], count, DType::F32, ReduceOp::Sum, &s)
            .unwrap();
    }
    for rank in &w {
        match wait_error(&rank.1, LONG) {
            CommError::InvalidArgument { reason, .. } => {
                assert!(
                    reason.contains("rank 1 issued all_reduce(sum)(8 f32 elements)"),
                    "{reason}"
                );
            }
            other => panic!("expected a mismatch, got {other}"),
        }
        let waited = rank.0.synchronize_device();
        assert!(
            waited.is_err(),
            "the dropped all_reduce is reported by the wait"
        );
    }
}

#[test]
fn a_held_stream_never_blocks_the_other_streams_of_its_device() {
    // Rank 0's stream `held` waits at an all_reduce rank 1 has not issued. Stream `waiting`
    // waits for an event behind that gate, stream `free` is independent: `free` must
    // complete (a submitted wait for the unsubmitted value would stall lavapipe's only
    // queue), `waiting` must not.
    let Some(w) = common::world(2, LONG) else {
        return;
    };
    let dev = &w[0].0;
    let (held, waiting, free) = (
        dev.create_stream().unwrap(),
        dev.create_stream().unwrap(),
        dev.create_stream().unwrap(),
    );
    let src = upload(&w[0], &[1.0; 4]);
    let dst = upload(&w[0], &[0.0; 4]);
    let other = upload(&w[0], &[5.0; 4]);
    dev.synchronize_device().unwrap();
    w[0].1
        .all_reduce(src, 4, DType::F32, ReduceOp::Sum, &held)
        .unwrap();
    let done = dev.create_event().unwrap();
    dev.record_event(&done, &held).unwrap();
    dev.stream_wait_event(&waiting, &done).unwrap();
    dev.copy_device_to_device(dst, src, 16, &waiting).unwrap();
    let waiting_end = dev.create_event().unwrap();
    dev.record_event(&waiting_end, &waiting).unwrap();
    dev.memset_zero(other, 16, &free).unwrap();
    dev.synchronize_stream(&free).unwrap();
    assert!(
        !dev.query_event(&waiting_end).unwrap(),
        "`waiting` is behind the gate"
    );
    let mut out = [1u8; 16];
    dev.copy_device_to_host(&mut out, other, &free).unwrap();
    assert_eq!(out, [0; 16]);
    let p1 = upload(&w[1], &[2.0; 4]);
    w[1].1
        .all_reduce(p1, 4, DType::F32, ReduceOp::Sum, &w[1].0.default_stream())
        .unwrap();
    dev.synchronize_event(&waiting_end).unwrap();
    let mut got = [0u8; 16];
    dev.copy_device_to_host(&mut got, dst, &waiting).unwrap();
    assert_eq!(
        f32_values(&got),
        [3.0; 4],
        "`waiting` copied the reduced values"
    );
}

#[test]
fn sub_groups_match_their_own_members() {
    let Some(w) = common::world(3, LONG) else {
        return;
    };
    let subs: Vec<_> = w.iter().map(|r| r.1.new_group(&[2, 0]).unwrap()).collect();
    assert!(subs[1].is_none());
    let bufs: Vec<_> = [0, 2]
        .iter()
        .map(|&r| upload(&w[r], &[r as f32 + 1.0; 2]))
        .collect();
    for (i, &r) in [0usize, 2].iter().enumerate() {
        let sub = subs[r].as_ref().unwrap();
        assert_eq!((sub.rank(), sub.size()), (usize::from(r != 2), 2));
        sub.all_reduce(
            bufs[i],
            2,
            DType::F32,
            ReduceOp::Sum,
            &w[r].0.default_stream(),
        )
        .unwrap();
    }
    assert_eq!(download(&w[0], bufs[0], 2), [4.0; 2]);
    assert_eq!(download(&w[2], bufs[1], 2), [4.0; 2]);
}

#[test]
fn a_dropped_world_releases_its_devices_and_proxy_threads() {
    let Some(w) = common::world(2, LONG) else {
        return;
    };
    let raws: Vec<_> = w.iter().map(|r| std::sync::Arc::clone(r.0.raw())).collect();
    let sub: Vec<_> = w.iter().map(|r| r.1.new_group(&[0, 1]).unwrap()).collect();
    let bufs: Vec<_> = w.iter().map(|rank| upload(rank, &[1.0; 2])).collect();
    for (r, rank) in w.iter().enumerate() {
        let s = rank.0.default_stream();
        rank.1
            .all_reduce(bufs[r], 2, DType::F32, ReduceOp::Sum, &s)
            .unwrap();
        sub[r].as_ref().unwrap().barrier(&s).unwrap();
        rank.0.delay(100, &s).unwrap();
    }
    for (r, rank) in w.iter().enumerate() {
        rank.0.synchronize_device().unwrap();
        rank.0.free(bufs[r]).unwrap();
    }
    drop(sub);
    drop(w);
    // The proxies exit once every member is gone; each held the devices of its group.
    let start = Instant::now();
    while raws.iter().any(|r| std::sync::Arc::strong_count(r) > 1) {
        assert!(
            start.elapsed() < LONG,
            "a proxy or delay thread still holds a device"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
