//! Joint ops across devices: sum all-reduce on real data (2 and 4 ranks, one host thread
//! per rank), timeouts of a missing rank, mismatched ops, races through collectives.

mod common;

use std::time::Duration;

use memreuse_core::{Backend, BackendError, DevicePtr, RaceKind};
use memreuse_mock::{
    JointGroup, JointMemory, JointOp, MemAccess, MockCluster, MockConfig, MockDevice,
};

use common::{to_bytes, to_f32};

/// Sum of region 0 of every rank, written to region 1 of every rank.
fn sum_all_reduce(mem: &mut JointMemory<'_>) -> Result<(), BackendError> {
    let mut acc = vec![0f32; mem.bytes(0, 0)?.len() / 4];
    for r in 0..mem.ranks() {
        for (a, x) in acc.iter_mut().zip(to_f32(mem.bytes(r, 0)?)) {
            *a += x;
        }
    }
    let out = to_bytes(&acc);
    for r in 0..mem.ranks() {
        mem.bytes_mut(r, 1)?.copy_from_slice(&out);
    }
    Ok(())
}

fn all_reduce_op(send: DevicePtr, recv: DevicePtr, bytes: u64) -> JointOp {
    JointOp::new("all_reduce")
        .access(MemAccess::read(send, bytes))
        .access(MemAccess::write(recv, bytes))
        .body(sum_all_reduce)
}

/// Every rank, on its own thread: upload, all-reduce, download, check.
fn run_all_reduce(cluster: &MockCluster, n_elems: usize) {
    let group = cluster.group().unwrap();
    let n = group.size();
    let bytes = (n_elems * 4) as u64;
    std::thread::scope(|scope| {
        for (rank, dev) in cluster.devices().iter().enumerate() {
            let group = group.clone();
            scope.spawn(move || {
                let s = dev.create_stream().unwrap();
                let send = dev.malloc(bytes).unwrap();
                let recv = dev.malloc(bytes).unwrap();
                let mine: Vec<f32> = (0..n_elems).map(|i| (i * (rank + 1)) as f32).collect();
                dev.copy_host_to_device(send, &to_bytes(&mine), &s).unwrap();
                // Two collectives in a row: matched by position.
                for _ in 0..2 {
                    group
                        .submit(rank, &s, all_reduce_op(send, recv, bytes))
                        .unwrap();
                }
                let mut out = vec![0u8; bytes as usize];
                dev.copy_device_to_host(&mut out, recv, &s).unwrap();
                let factor: usize = (1..=n).sum();
                let want: Vec<f32> = (0..n_elems).map(|i| (i * factor) as f32).collect();
                assert_eq!(to_f32(&out), want, "rank {rank}");
                assert_eq!(dev.race_reports().unwrap(), vec![], "rank {rank}");
            });
        }
    });
}

#[test]
fn sum_all_reduce_on_two_devices() {
    let cluster = MockCluster::new(2, MockConfig::with_capacity(1 << 20)).unwrap();
    run_all_reduce(&cluster, 1000);
}

#[test]
fn sum_all_reduce_on_four_devices_with_slow_collectives() {
    let mut config = MockConfig::with_capacity(1 << 20);
    config.delays.joint = Duration::from_millis(10);
    let cluster = MockCluster::new(4, config).unwrap();
    run_all_reduce(&cluster, 257);
}

#[test]
fn sum_all_reduce_in_deterministic_mode() {
    let cluster = MockCluster::new(4, MockConfig::with_capacity(1 << 20).deterministic(3)).unwrap();
    run_all_reduce(&cluster, 64);
}

#[test]
fn devices_have_distinct_addresses_and_indices() {
    let cluster = MockCluster::new(
        2,
        MockConfig {
            first_device_index: 4,
            ..MockConfig::with_capacity(1 << 20)
        },
    )
    .unwrap();
    let [a, b] = cluster.devices() else {
        unreachable!()
    };
    assert_eq!((a.device_index(), b.device_index()), (4, 5));
    let pa = a.malloc(64).unwrap();
    let pb = b.malloc(64).unwrap();
    assert_ne!(pa, pb);
    // A pointer of device a is not valid on device b.
    assert!(b.memset_zero(pa, 64, &b.default_stream()).is_err());
}

#[test]
fn missing_rank_times_out_with_an_error() {
    let cluster = MockCluster::new(2, MockConfig::with_capacity(1 << 20)).unwrap();
    let group = cluster.group().unwrap();
    let dev0 = &cluster.devices()[0];
    let s = dev0.default_stream();
    let p = dev0.malloc(64).unwrap();
    group
        .submit(
            0,
            &s,
            all_reduce_op(p, p, 64).timeout(Duration::from_millis(100)),
        )
        .unwrap();
    let ev = dev0.create_event().unwrap();
    dev0.record_event(&ev, &s).unwrap();
    let err = dev0.synchronize_event(&ev).unwrap_err();
    assert!(matches!(err, BackendError::Timeout { .. }), "{err}");
    assert!(
        err.to_string().contains("[1]"),
        "names the missing rank: {err}"
    );
    assert!(dev0.query_event(&ev).is_err());
    assert_eq!(dev0.last_error(), Some(err.clone()));
    // The error is sticky until taken; then the device works again.
    assert_eq!(dev0.take_last_error(), Some(err));
    dev0.copy_host_to_device(p, &[1; 64], &s).unwrap();
    let mut out = [0u8; 64];
    dev0.copy_device_to_host(&mut out, p, &s).unwrap();
    assert_eq!(out, [1; 64]);

    // Rank 1 arriving late finds the op failed, too (the communicator is broken).
    let dev1 = &cluster.devices()[1];
    let q = dev1.malloc(64).unwrap();
    group
        .submit(1, &dev1.default_stream(), all_reduce_op(q, q, 64))
        .unwrap();
    assert!(dev1.synchronize_device().is_err());
}

#[test]
fn mismatched_ops_fail_on_every_rank() {
    let cluster = MockCluster::new(2, MockConfig::with_capacity(1 << 20)).unwrap();
    let group = JointGroup::new(cluster.devices()).unwrap();
    let devs: Vec<&MockDevice> = cluster.devices().iter().collect();
    group
        .submit(0, &devs[0].default_stream(), JointOp::new("all_reduce"))
        .unwrap();
    group
        .submit(1, &devs[1].default_stream(), JointOp::new("broadcast"))
        .unwrap();
    for d in devs {
        let err = d.synchronize_device().unwrap_err();
        assert!(matches!(err, BackendError::InvalidArgument { .. }), "{err}");
    }
}

#[test]
fn bad_submissions_are_refused() {
    let cluster = MockCluster::new(2, MockConfig::with_capacity(1 << 20)).unwrap();
    let group = cluster.group().unwrap();
    let d0 = &cluster.devices()[0];
    let d1 = &cluster.devices()[1];
    let p = d0.malloc(64).unwrap();
    // Wrong rank, stream of another device, range outside memory.
    assert!(
        group
            .submit(2, &d0.default_stream(), JointOp::new("x"))
            .is_err()
    );
    assert!(
        group
            .submit(0, &d1.default_stream(), JointOp::new("x"))
            .is_err()
    );
    let op = JointOp::new("x").access(MemAccess::write(p, 65));
    assert!(group.submit(0, &d0.default_stream(), op).is_err());
    let other = MockDevice::new(MockConfig::with_capacity(1024)).unwrap();
    assert!(JointGroup::new(&[d0.clone(), other]).is_err());
    // Refused submissions did not consume a position: a matched pair still works.
    group
        .submit(0, &d0.default_stream(), JointOp::new("barrier"))
        .unwrap();
    group
        .submit(1, &d1.default_stream(), JointOp::new("barrier"))
        .unwrap();
    d0.synchronize_device().unwrap();
    d1.synchronize_device().unwrap();
}

#[test]
fn collective_races_are_detected_and_collectives_order_work() {
    let cluster = MockCluster::new(2, MockConfig::with_capacity(1 << 20)).unwrap();
    let group = cluster.group().unwrap();
    let [d0, d1] = cluster.devices() else {
        unreachable!()
    };
    let (c0, c1) = (d0.create_stream().unwrap(), d1.create_stream().unwrap());
    let (p0, p1) = (d0.malloc(64).unwrap(), d1.malloc(64).unwrap());
    d0.annotate_allocation(p0, 64, memreuse_core::AllocationId(100));
    d0.set_op_label("bucket 0");
    group.submit(0, &c0, all_reduce_op(p0, p0, 64)).unwrap();
    group.submit(1, &c1, all_reduce_op(p1, p1, 64)).unwrap();
    // Ordered after the collective on its own stream: no race.
    d0.memset_zero(p0, 64, &c0).unwrap();
    assert!(d0.race_reports().unwrap().is_empty());
    // The memory is reused by the compute stream without waiting for the comm stream.
    d0.annotate_allocation(p0, 64, memreuse_core::AllocationId(101));
    d0.set_op_label("");
    d0.memset_zero(p0, 32, &d0.default_stream()).unwrap();
    let reports = d0.race_reports().unwrap();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert_eq!(reports[0].kind, RaceKind::Reuse);
    assert_eq!(reports[0].earlier.op, "memset_zero [bucket 0]");
    assert!(d1.race_reports().unwrap().is_empty());
    d0.synchronize_device().unwrap();
    d1.synchronize_device().unwrap();
}

#[test]
fn injected_collective_failure_fails_every_rank_and_later_ops_run() {
    let cluster = MockCluster::new(2, MockConfig::with_capacity(1 << 20)).unwrap();
    let group = cluster.group().unwrap();
    group.inject_failure(1);
    let bufs: Vec<DevicePtr> = cluster
        .devices()
        .iter()
        .map(|d| d.malloc(8).unwrap())
        .collect();
    for round in 0..3 {
        for (rank, dev) in cluster.devices().iter().enumerate() {
            let p = bufs[rank];
            dev.copy_host_to_device(p, &to_bytes(&[1.0, 2.0]), &dev.default_stream())
                .unwrap();
            let k = group
                .submit(rank, &dev.default_stream(), all_reduce_op(p, p, 8))
                .unwrap();
            assert_eq!(k, round);
        }
        for (rank, dev) in cluster.devices().iter().enumerate() {
            let r = dev.synchronize_device();
            if round == 1 {
                assert!(matches!(r, Err(BackendError::Injected { .. })), "{r:?}");
                assert!(dev.take_last_error().is_some());
            } else {
                r.unwrap();
                let mut out = [0u8; 8];
                dev.copy_device_to_host(&mut out, bufs[rank], &dev.default_stream())
                    .unwrap();
                assert_eq!(to_f32(&out), vec![2.0, 4.0]);
            }
        }
    }
}

#[test]
fn collectives_order_work_transitively_across_devices() {
    let cluster = MockCluster::new(2, MockConfig::with_capacity(1 << 20)).unwrap();
    let [d0, d1] = cluster.devices() else {
        unreachable!()
    };
    let g01 = JointGroup::new(&[d0.clone(), d1.clone()]).unwrap();
    let g10 = JointGroup::new(&[d1.clone(), d0.clone()]).unwrap();
    let (a0, b0) = (d0.default_stream(), d0.create_stream().unwrap());
    let x1 = d1.default_stream();
    let p = d0.malloc(64).unwrap();
    d0.memset_zero(p, 64, &a0).unwrap();
    // a0 -> (collective 1) -> x1 -> (collective 2) -> b0: b0 is ordered after a0's write.
    g01.submit(0, &a0, JointOp::new("barrier")).unwrap();
    g01.submit(1, &x1, JointOp::new("barrier")).unwrap();
    g10.submit(0, &x1, JointOp::new("barrier")).unwrap();
    g10.submit(1, &b0, JointOp::new("barrier")).unwrap();
    d0.memset_zero(p, 64, &b0).unwrap();
    assert_eq!(d0.race_reports().unwrap(), vec![]);
    // Without the collectives the same write races (with both earlier writes).
    let c0 = d0.create_stream().unwrap();
    d0.memset_zero(p, 64, &c0).unwrap();
    assert_eq!(d0.race_reports().unwrap().len(), 2);
    d0.synchronize_device().unwrap();
    d1.synchronize_device().unwrap();
}

/// Point-to-point as a two-rank joint op: rank 0 (sender) region 0 -> rank 1 region 0.
fn p2p(name: &str, access: MemAccess, timeout: Duration) -> JointOp {
    JointOp::new(name)
        .access(access)
        .timeout(timeout)
        .body(|mem: &mut JointMemory<'_>| {
            let data = mem.bytes(0, 0)?.to_vec();
            mem.bytes_mut(1, 0)?.copy_from_slice(&data);
            Ok(())
        })
}

/// Ring shift over 3 ranks: every rank sends to the next and receives from the previous,
/// both on one stream. `batched`: each rank issues its send and recv as one batch.
fn ring(batched: bool) -> Vec<Result<Vec<u8>, BackendError>> {
    let cluster = MockCluster::new(3, MockConfig::with_capacity(1 << 20)).unwrap();
    let devs = cluster.devices();
    // Pair group (r -> r+1): rank 0 is the sender.
    let pairs: Vec<JointGroup> = (0..3)
        .map(|r| JointGroup::new(&[devs[r].clone(), devs[(r + 1) % 3].clone()]).unwrap())
        .collect();
    let timeout = Duration::from_millis(300);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|r| {
                let (dev, pairs) = (&devs[r], &pairs);
                scope.spawn(move || {
                    let s = dev.default_stream();
                    let send = dev.malloc(8).unwrap();
                    let recv = dev.malloc(8).unwrap();
                    dev.copy_host_to_device(send, &[r as u8; 8], &s).unwrap();
                    let send_op = p2p("p2p", MemAccess::read(send, 8), timeout);
                    let recv_op = p2p("p2p", MemAccess::write(recv, 8), timeout);
                    let next = &pairs[r];
                    let prev = &pairs[(r + 2) % 3];
                    if batched {
                        JointGroup::submit_batch(&s, vec![(next, 0, send_op), (prev, 1, recv_op)])
                            .unwrap();
                    } else {
                        next.submit(0, &s, send_op).unwrap();
                        prev.submit(1, &s, recv_op).unwrap();
                    }
                    let mut out = vec![0u8; 8];
                    dev.copy_device_to_host(&mut out, recv, &s).map(|()| out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn batched_ring_exchange_completes() {
    let got = ring(true);
    for (r, out) in got.into_iter().enumerate() {
        assert_eq!(out.unwrap(), vec![((r + 2) % 3) as u8; 8], "rank {r}");
    }
}

#[test]
fn unbatched_ring_exchange_deadlocks_into_timeouts() {
    // Every rank's stream starts with its send, whose receiver is stuck in its own send:
    // NCCL would hang; the mock fails the first send to time out, which breaks the cycle,
    // so later exchanges may still complete (with correct data).
    let got = ring(false);
    let timeouts = got
        .iter()
        .filter(|r| matches!(r, Err(BackendError::Timeout { .. })))
        .count();
    assert!(timeouts >= 1, "{got:?}");
    for (r, out) in got.into_iter().enumerate() {
        match out {
            Ok(data) => assert_eq!(data, vec![((r + 2) % 3) as u8; 8], "rank {r}"),
            Err(e) => assert!(matches!(e, BackendError::Timeout { .. }), "{e}"),
        }
    }
}

#[test]
fn aborted_group_fails_pending_and_later_ops() {
    let cluster = MockCluster::new(2, MockConfig::with_capacity(1 << 20)).unwrap();
    let group = cluster.group().unwrap();
    let d0 = &cluster.devices()[0];
    let s = d0.default_stream();
    // Rank 1 never comes; without the abort this would wait for the 60 s default timeout.
    group.submit(0, &s, JointOp::new("all_reduce")).unwrap();
    group.abort("process group dropped");
    let err = d0.synchronize_stream(&s).unwrap_err();
    assert!(err.to_string().contains("aborted"), "{err}");
    d0.take_last_error();
    group.submit(0, &s, JointOp::new("all_reduce")).unwrap();
    assert!(d0.synchronize_stream(&s).is_err());
}
