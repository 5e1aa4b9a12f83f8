//! A world through the stand-ins: every collective, point-to-point in a group, sub-groups,
//! with results checked and zero races.

mod common;

use std::time::Duration;

use common::{serial, standin};
use memreuse_ascend::registry::open_world_with;
use memreuse_ascend::{AscendCommunicator, AscendDevice};
use memreuse_core::comm::{Communicator, DType, ReduceOp};
use memreuse_core::{Backend, BackendOptions, DevicePtr, WorldOptions};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn read(dev: &AscendDevice, p: DevicePtr, n: usize) -> Vec<f32> {
    let mut out = vec![0u8; n * 4];
    dev.copy_device_to_host(&mut out, p, &dev.default_stream())
        .unwrap();
    out.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn options(world_size: usize) -> WorldOptions {
    WorldOptions {
        world_size,
        backend: BackendOptions {
            memory_capacity: Some(64 << 20),
            ..BackendOptions::default()
        },
        timeout: Duration::from_secs(20),
    }
}

fn rank_program(rank: usize, dev: &AscendDevice, comm: &AscendCommunicator) -> Vec<Vec<f32>> {
    let s = dev.create_stream().unwrap();
    let size = comm.size();
    let r = rank as f32;
    let a = dev.malloc(4 * 4 * size as u64).unwrap();
    let b = dev.malloc(4 * 4 * size as u64).unwrap();
    let mut results = Vec::new();
    // all_reduce (sum) of [r, r+1, r+2, r+3].
    dev.copy_host_to_device(a, &f32_bytes(&[r, r + 1.0, r + 2.0, r + 3.0]), &s)
        .unwrap();
    comm.all_reduce(a, 4, DType::F32, ReduceOp::Sum, &s)
        .unwrap();
    dev.synchronize_stream(&s).unwrap();
    results.push(read(dev, a, 4));
    // all_gather of [r].
    dev.copy_host_to_device(a, &f32_bytes(&[r]), &s).unwrap();
    comm.all_gather(a, b, 1, DType::F32, &s).unwrap();
    dev.synchronize_stream(&s).unwrap();
    results.push(read(dev, b, size));
    // reduce_scatter (max) of [r * 10 + j].
    let input: Vec<f32> = (0..size).map(|j| r * 10.0 + j as f32).collect();
    dev.copy_host_to_device(a, &f32_bytes(&input), &s).unwrap();
    comm.reduce_scatter(a, b, 1, DType::F32, ReduceOp::Max, &s)
        .unwrap();
    dev.synchronize_stream(&s).unwrap();
    results.push(read(dev, b, 1));
    // all_to_all: chunk j of rank i -> chunk i of rank j.
    dev.copy_host_to_device(a, &f32_bytes(&input), &s).unwrap();
    comm.all_to_all(a, b, 1, DType::F32, &s).unwrap();
    dev.synchronize_stream(&s).unwrap();
    results.push(read(dev, b, size));
    // broadcast from the last rank.
    dev.copy_host_to_device(a, &f32_bytes(&[r + 100.0]), &s)
        .unwrap();
    comm.broadcast(a, 1, DType::F32, size - 1, &s).unwrap();
    dev.synchronize_stream(&s).unwrap();
    results.push(read(dev, a, 1));
    // A ring of sends and receives as one group.
    dev.copy_host_to_device(a, &f32_bytes(&[r]), &s).unwrap();
    comm.group_start().unwrap();
    comm.send(a, 1, DType::F32, (rank + 1) % size, &s).unwrap();
    comm.recv(b, 1, DType::F32, (rank + size - 1) % size, &s)
        .unwrap();
    comm.group_end().unwrap();
    comm.barrier(&s).unwrap();
    dev.synchronize_stream(&s).unwrap();
    results.push(read(dev, b, 1));
    // A sub-group of the even ranks sums [r].
    if let Some(sub) = comm.new_group(&[0, 2]).unwrap() {
        dev.copy_host_to_device(a, &f32_bytes(&[r]), &s).unwrap();
        sub.all_reduce(a, 1, DType::F32, ReduceOp::Sum, &s).unwrap();
        dev.synchronize_stream(&s).unwrap();
        results.push(read(dev, a, 1));
    }
    assert!(comm.async_error().is_none());
    dev.synchronize_device().unwrap();
    dev.free(a).unwrap();
    dev.free(b).unwrap();
    results
}

#[test]
fn every_collective_through_the_ffi_path() {
    let _g = serial();
    let api = standin(&[]);
    let world = open_world_with(api, &options(3)).unwrap();
    let results: Vec<Vec<Vec<f32>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = world
            .iter()
            .enumerate()
            .map(|(rank, (dev, comm))| scope.spawn(move || rank_program(rank, dev, comm)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (rank, res) in results.iter().enumerate() {
        let r = rank as f32;
        assert_eq!(res[0], vec![3.0, 6.0, 9.0, 12.0], "all_reduce rank {rank}");
        assert_eq!(res[1], vec![0.0, 1.0, 2.0], "all_gather rank {rank}");
        assert_eq!(res[2], vec![20.0 + r], "reduce_scatter rank {rank}");
        assert_eq!(
            res[3],
            vec![r, 10.0 + r, 20.0 + r],
            "all_to_all rank {rank}"
        );
        assert_eq!(res[4], vec![102.0], "broadcast rank {rank}");
        assert_eq!(res[5], vec![((rank + 2) % 3) as f32], "ring rank {rank}");
        if rank % 2 == 0 {
            assert_eq!(res[6], vec![2.0], "sub-group rank {rank}");
        } else {
            assert_eq!(res.len(), 6);
        }
    }
    for (dev, _) in &world {
        assert_eq!(dev.race_reports().unwrap(), Vec::new(), "no races");
    }
}

#[test]
fn ranks_as_processes_share_root_info_through_the_tcp_store() {
    use std::sync::Arc;

    use memreuse_ascend::launch::open_rank_with_store;
    use memreuse_core::store::{StoreOptions, TcpStore};

    let _g = serial();
    let api = standin(&[]);
    common::configure(4, 64 << 20, 20_000);
    let opts = StoreOptions {
        timeout: Duration::from_secs(20),
        ..StoreOptions::default()
    };
    let host = Arc::new(TcpStore::host("127.0.0.1:0".parse().unwrap(), opts).unwrap());
    let addr = host.addr();
    let sums: Vec<(f32, f32)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                let store = if rank == 0 {
                    Arc::clone(&host)
                } else {
                    Arc::new(TcpStore::connect(addr, opts).unwrap())
                };
                scope.spawn(move || {
                    // Each "process" uses the NPU of its LOCAL_RANK (here 2 + rank).
                    let (dev, comm) = open_rank_with_store(api, &store, rank, 2, 2 + rank).unwrap();
                    let s = dev.default_stream();
                    let p = dev.malloc(4).unwrap();
                    dev.copy_host_to_device(p, &f32_bytes(&[rank as f32 + 1.0]), &s)
                        .unwrap();
                    comm.all_reduce(p, 1, DType::F32, ReduceOp::Sum, &s)
                        .unwrap();
                    let world = read(&dev, p, 1)[0];
                    // A sub-group's root info also travels through the store.
                    let sub = comm.new_group(&[1, 0]).unwrap().expect("member");
                    sub.all_reduce(p, 1, DType::F32, ReduceOp::Max, &s).unwrap();
                    let sub_max = read(&dev, p, 1)[0];
                    dev.free(p).unwrap();
                    (world, sub_max)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(sums, vec![(3.0, 3.0), (3.0, 3.0)]);
}

/// `--race-check adaptor` switches the stand-in's own detector off (the runner then judges
/// with its adaptor alone): the devices report no detector and no race list, and the next
/// world without the switch has its detector back.
#[test]
fn the_standin_detector_is_switched_off_on_request() {
    let _g = serial();
    let api = standin(&[]);
    for disable in [true, false] {
        let mut opts = options(2);
        opts.backend.disable_native_race_detection = disable;
        let world = open_world_with(api, &opts).unwrap();
        for (dev, _) in &world {
            assert_eq!(
                dev.capabilities().native_race_detection,
                !disable,
                "disable {disable}"
            );
            assert_eq!(dev.race_reports().is_some(), !disable, "disable {disable}");
        }
    }
}
