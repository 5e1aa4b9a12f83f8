//! The public communicator pieces other communicators reuse (`collective`, `PairGroups`):
//! the region layouts their docs promise, and refusals as errors rather than panics.

mod common;

use memreuse_core::comm::{DType, ReduceOp};
use memreuse_core::{Backend, BackendError, DevicePtr};
use memreuse_mock::{
    JointGroup, JointOp, MemAccess, MockCluster, MockConfig, MockDevice, PairGroups, collective,
};

use common::{to_bytes, to_f32};

fn cluster(n: usize) -> MockCluster {
    MockCluster::new(n, MockConfig::with_capacity(1 << 20)).unwrap()
}

/// Allocates and fills `values` on `dev`.
fn upload(dev: &MockDevice, values: &[f32]) -> DevicePtr {
    let p = dev.malloc((values.len() * 4) as u64).unwrap();
    dev.copy_host_to_device(p, &to_bytes(values), &dev.default_stream())
        .unwrap();
    p
}

fn download(dev: &MockDevice, p: DevicePtr, n: usize) -> Vec<f32> {
    let mut out = vec![0u8; n * 4];
    dev.copy_device_to_host(&mut out, p, &dev.default_stream())
        .unwrap();
    to_f32(&out)
}

#[test]
fn all_reduce_writes_each_ranks_last_region_in_or_out_of_place() {
    let cluster = cluster(2);
    let [d0, d1] = cluster.devices() else {
        unreachable!()
    };
    let group = cluster.group().unwrap();
    // Rank 0 in place (one region), rank 1 out of place (input, then output).
    let a = upload(d0, &[1.0, 2.0, 3.0]);
    let b = upload(d1, &[4.0, 5.0, 6.0]);
    let b_out = d1.malloc(12).unwrap();
    let op0 = JointOp::new("all_reduce")
        .access(MemAccess::write(a, 12))
        .body(move |m| collective::all_reduce_typed(m, DType::F32, ReduceOp::Prod));
    let op1 = JointOp::new("all_reduce")
        .access(MemAccess::read(b, 12))
        .access(MemAccess::write(b_out, 12))
        .body(move |m| collective::all_reduce_typed(m, DType::F32, ReduceOp::Prod));
    group.submit(0, &d0.default_stream(), op0).unwrap();
    group.submit(1, &d1.default_stream(), op1).unwrap();
    assert_eq!(download(d0, a, 3), [4.0, 10.0, 18.0]);
    assert_eq!(download(d1, b_out, 3), [4.0, 10.0, 18.0]);
    assert_eq!(download(d1, b, 3), [4.0, 5.0, 6.0], "input untouched");
}

#[test]
fn lengths_that_disagree_across_ranks_are_an_error_not_a_panic() {
    let cluster = cluster(2);
    let [d0, d1] = cluster.devices() else {
        unreachable!()
    };
    let group = cluster.group().unwrap();
    let a = upload(d0, &[1.0, 2.0]);
    let b = upload(d1, &[1.0, 2.0, 3.0]);
    for (rank, dev, p, n) in [(0, d0, a, 8), (1, d1, b, 12)] {
        let op = JointOp::new("broadcast")
            .access(MemAccess::write(p, n))
            .body(|m| collective::broadcast(m, 0));
        group.submit(rank, &dev.default_stream(), op).unwrap();
    }
    for dev in [d0, d1] {
        let err = dev.synchronize_device().unwrap_err();
        assert!(matches!(err, BackendError::InvalidArgument { .. }), "{err}");
    }
}

#[test]
fn pair_groups_are_per_ordered_pair_and_shared() {
    let cluster = cluster(3);
    let pairs = PairGroups::new(cluster.devices());
    let g01 = pairs.get(0, 1).unwrap();
    assert_eq!(g01.size(), 2);
    // Sender is rank 0 of the pair group, receiver rank 1.
    assert_eq!(
        g01.device(0).unwrap().device_index(),
        cluster.devices()[0].device_index()
    );
    assert_eq!(
        g01.device(1).unwrap().device_index(),
        cluster.devices()[1].device_index()
    );
    // The same group for the same ordered pair (both ends must submit into one order),
    // another one for the other direction.
    assert_eq!(
        format!("{:?}", pairs.get(0, 1).unwrap()),
        format!("{g01:?}")
    );
    assert_ne!(
        format!("{:?}", pairs.get(1, 0).unwrap()),
        format!("{g01:?}")
    );
    for (s, r) in [(0, 0), (0, 3), (3, 0)] {
        let err = pairs.get(s, r).unwrap_err();
        assert!(matches!(err, BackendError::InvalidArgument { .. }), "{err}");
    }
}

#[test]
fn send_recv_over_a_pair_group_copies_sender_to_receiver() {
    let cluster = cluster(2);
    let [d0, d1] = cluster.devices() else {
        unreachable!()
    };
    let pairs = PairGroups::new(cluster.devices());
    // 1 -> 0: the receiver is communicator rank 0 but pair rank 1.
    let group: JointGroup = pairs.get(1, 0).unwrap();
    let src = upload(d1, &[7.0, 8.0]);
    let dst = d0.malloc(8).unwrap();
    let send = JointOp::new("send/recv")
        .access(MemAccess::read(src, 8))
        .body(collective::send_recv);
    let recv = JointOp::new("send/recv")
        .access(MemAccess::write(dst, 8))
        .body(collective::send_recv);
    group.submit(0, &d1.default_stream(), send).unwrap();
    group.submit(1, &d0.default_stream(), recv).unwrap();
    assert_eq!(download(d0, dst, 2), [7.0, 8.0]);
}
