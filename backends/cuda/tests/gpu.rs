//! Tests that need a CUDA GPU (and NCCL for the communicator ones), or the CUDA stand-in
//! (`backends/cuda/standin`) found on `LD_LIBRARY_PATH`. Each checks at run time and prints
//! `skipped: no CUDA device` (or why) instead of failing where there is neither, so a plain
//! `cargo test` passes them trivially; CI's `cuda-standin` stage
//! (`backends/cuda/ci/standin.sh`) runs them against the stand-in and `scripts/gpu-check.sh`
//! on a GPU machine, both with `MEMREUSE_REQUIRE_DEVICE=1`, so a missing device or library
//! fails them there (too few devices for a multi-GPU test still skips).

#![allow(
    clippy::float_cmp,
    reason = "the values are small integers, exact in f32: results must match bit for bit"
)]
#![allow(
    clippy::many_single_char_names,
    reason = "device, stream, buffers and event of one short scenario"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use memreuse_core::comm::{Communicator, DType, ReduceOp};
use memreuse_core::store::LaunchEnv;
use memreuse_core::{AllocatorConfig, Backend, BackendError, CachingAllocator, DevicePtr};
use memreuse_cuda::{CudaDevice, NcclCommunicator, device_count, open_cuda_world, open_rank};

/// Devices visible, or `None` after printing why the test is skipped.
fn gpus(needed: usize) -> Option<usize> {
    match device_count() {
        Ok(0) => {
            memreuse_core::testing::skip_without_device("no CUDA device visible");
            None
        }
        Ok(n) if n >= needed => Some(n),
        Ok(n) => {
            println!("skipped: needs {needed} CUDA device(s), {n} visible");
            None
        }
        Err(e) => {
            // Fails instead with MEMREUSE_REQUIRE_DEVICE=1 (what a GPU runner sets).
            memreuse_core::testing::skip_without_device(&format!("no CUDA device ({e})"));
            None
        }
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn memory_streams_events_and_copies() {
    if gpus(1).is_none() {
        return;
    }
    let d = CudaDevice::open(0).expect("open device 0");
    let info = d.memory_info().expect("memory info");
    assert!(info.total > 0 && info.free <= info.total);
    let s = d.create_stream().expect("stream");
    let other = d.create_stream().expect("stream");
    assert_ne!(d.stream_id(&s), d.stream_id(&other));
    let a = d.malloc(4096).expect("malloc");
    let b = d.malloc(4096).expect("malloc");
    let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    d.copy_host_to_device(a, &data, &s).expect("h2d");
    d.memset_zero(b, 4096, &s).expect("memset");
    let e = d.create_event().expect("event");
    assert!(d.query_event(&e).expect("query unrecorded"));
    d.record_event(&e, &s).expect("record");
    d.stream_wait_event(&other, &e).expect("wait");
    d.copy_device_to_device(b.offset(1024), a, 1024, &other)
        .expect("d2d");
    d.delay(1_000, &other).expect("delay");
    let mut out = vec![0xffu8; 4096];
    d.copy_device_to_host(&mut out, b, &other).expect("d2h");
    assert!(out[..1024].iter().all(|x| *x == 0));
    assert_eq!(&out[1024..2048], &data[..1024]);
    d.synchronize_event(&e).expect("sync event");
    d.synchronize_device().expect("sync device");
    // Ranges outside live allocations are refused before reaching the driver.
    assert!(matches!(
        d.memset_zero(a.offset(4000), 200, &s),
        Err(BackendError::InvalidArgument { .. })
    ));
    assert!(matches!(
        d.free(DevicePtr(a.addr() + 8)),
        Err(BackendError::InvalidArgument { .. })
    ));
    d.free(a).expect("free");
    d.free(b).expect("free");
    assert!(matches!(
        d.free(a),
        Err(BackendError::InvalidArgument { .. })
    ));
}

#[test]
fn delay_holds_back_later_work_on_the_stream() {
    if gpus(1).is_none() {
        return;
    }
    let d = CudaDevice::open(0).expect("open");
    let s = d.create_stream().expect("stream");
    let started = Instant::now();
    d.delay(50_000, &s).expect("delay");
    d.synchronize_stream(&s).expect("sync");
    assert!(started.elapsed() >= Duration::from_millis(45));
}

#[test]
fn the_cuda_device_keeps_the_device_contract() {
    if gpus(1).is_none() {
        return;
    }
    let d = Arc::new(CudaDevice::open(0).expect("open"));
    let total = d.memory_info().expect("info").total;
    let options = memreuse_core::testing::contract::ContractOptions {
        oom_request: Some(total.saturating_mul(4)),
        // The device keeps a table of live allocations and refuses other addresses.
        checks_addresses: true,
        ..Default::default()
    };
    let report = memreuse_core::testing::contract::check_backend(&d, &options);
    println!(
        "contract: passed {:?}, skipped {:?}",
        report.passed, report.skipped
    );
    report.assert_passed();
}

#[test]
fn out_of_memory_is_the_typed_oom_error() {
    if gpus(1).is_none() {
        return;
    }
    let d = CudaDevice::open(0).expect("open");
    let total = d.memory_info().expect("info").total;
    match d.malloc(total.saturating_mul(4)) {
        Err(e) => assert!(e.is_out_of_memory(), "{e:?}"),
        Ok(p) => {
            d.free(p).expect("free");
            panic!("allocated 4x the device");
        }
    }
}

#[test]
fn the_caching_allocator_runs_on_cuda() {
    if gpus(1).is_none() {
        return;
    }
    let d = Arc::new(CudaDevice::open(0).expect("open"));
    let alloc = CachingAllocator::new(Arc::clone(&d), AllocatorConfig::default());
    let s = d.default_stream();
    let x = alloc.allocate(1 << 20, &s).expect("allocate");
    d.copy_host_to_device(x.ptr(), &bytes(&[1.5; 16]), &s)
        .expect("h2d");
    let mut out = vec![0u8; 64];
    d.copy_device_to_host(&mut out, x.ptr(), &s).expect("d2h");
    assert_eq!(f32s(&out), vec![1.5; 16]);
    drop(x);
    let y = alloc.allocate(1 << 20, &s).expect("reuse");
    drop(y);
}

/// The virtual-memory interface on the device (`cuMemAddressReserve` .. `cuMemAddressFree`):
/// declared where the device supports it, the contract kit's `virtual_memory` check, one
/// access over two adjacent mappings, unmapped pages refused, misuse refused, `cuMemCreate`
/// beyond the device is the typed OOM, and an allocator with `expandable_segments:True`.
#[test]
fn virtual_memory_on_the_device() {
    if gpus(1).is_none() {
        return;
    }
    let d = Arc::new(CudaDevice::open(0).expect("open"));
    if !d.capabilities().virtual_memory {
        let e = d.vm_reserve(2 << 20).expect_err("not declared");
        assert!(matches!(e, BackendError::Unsupported { .. }), "{e:?}");
        // Fails instead with MEMREUSE_REQUIRE_DEVICE=1: every GPU a runner has supports it.
        memreuse_core::testing::skip_without_device(&format!("no virtual memory: {e}"));
        return;
    }
    let g = d.vm_granularity().expect("granularity");
    println!("virtual memory: granularity {g} bytes");
    assert!(g.is_power_of_two());
    let total = d.memory_info().expect("info").total;
    let options = memreuse_core::testing::contract::ContractOptions {
        oom_request: Some(total.saturating_mul(4)),
        checks_addresses: true,
        ..Default::default()
    };
    let report = memreuse_core::testing::contract::check_backend(&d, &options);
    report.assert_passed();
    assert!(report.passed.contains(&"virtual_memory"), "{report:?}");

    let base = d.vm_reserve(8 * g).expect("reserve");
    let (a, b) = (
        d.vm_create_physical(g).expect("create"),
        d.vm_create_physical(g).expect("create"),
    );
    d.vm_map(base, a).expect("map a");
    d.vm_map(base.offset(g), b).expect("map b");
    let s = d.create_stream().expect("stream");
    let across = base.offset(g - 512);
    let data: Vec<u8> = (0..1024u32).map(|i| (i % 253) as u8).collect();
    d.copy_host_to_device(across, &data, &s)
        .expect("h2d over two mappings");
    d.copy_device_to_device(base.offset(2 * g - 1024), across, 1024, &s)
        .expect("d2d");
    let mut out = vec![0u8; 1024];
    d.copy_device_to_host(&mut out, base.offset(2 * g - 1024), &s)
        .expect("d2h");
    assert_eq!(out, data);
    d.memset_zero(across, 1024, &s)
        .expect("memset over two mappings");
    d.copy_device_to_host(&mut out, across, &s).expect("d2h");
    assert!(out.iter().all(|x| *x == 0));
    for (what, r) in [
        ("unmapped page", d.memset_zero(base.offset(2 * g), 64, &s)),
        (
            "past the mapping",
            d.memset_zero(base.offset(2 * g - 32), 64, &s),
        ),
        ("part of a mapping", d.vm_unmap(base, g / 2)),
        ("mapped handle", d.vm_release_physical(a)),
        ("range with mappings", d.vm_release(base)),
    ] {
        assert!(
            matches!(r, Err(BackendError::InvalidArgument { .. })),
            "{what}: {r:?}"
        );
    }
    let too_much = total.saturating_mul(4).next_multiple_of(g);
    match d.vm_create_physical(too_much) {
        Err(e) => assert!(e.is_out_of_memory(), "{e:?}"),
        Ok(h) => {
            d.vm_release_physical(h).expect("release");
            panic!("created 4x the device");
        }
    }
    d.synchronize_stream(&s).expect("sync");
    d.vm_unmap(base, g).expect("unmap a");
    d.vm_unmap(base.offset(g), g).expect("unmap b");
    assert!(matches!(
        d.memset_zero(base, 64, &s),
        Err(BackendError::InvalidArgument { .. })
    ));
    d.vm_release_physical(a).expect("release a");
    d.vm_release_physical(b).expect("release b");
    d.vm_release(base).expect("release range");

    let config = AllocatorConfig::parse("expandable_segments:True").expect("config");
    let alloc = CachingAllocator::try_new(Arc::clone(&d), config).expect("expandable allocator");
    let x = alloc.allocate(3 << 20, &s).expect("allocate");
    d.copy_host_to_device(x.ptr(), &bytes(&[2.5; 16]), &s)
        .expect("h2d");
    let mut out = vec![0u8; 64];
    d.copy_device_to_host(&mut out, x.ptr(), &s).expect("d2h");
    assert_eq!(f32s(&out), vec![2.5; 16]);
    drop(x);
    alloc.empty_cache().expect("empty_cache");
}

/// Runs `f(rank, comm)` on one thread per rank of an in-process world. Each thread owns
/// and drops its rank (`ncclCommDestroy` may wait for the other ranks' destroys).
fn per_rank(world: usize, f: impl Fn(usize, &NcclCommunicator) + Sync) {
    let ranks = match open_cuda_world(world) {
        Ok(r) => r,
        Err(e @ BackendError::Unavailable { .. }) => {
            memreuse_core::testing::skip_without_device(&e.to_string());
            return;
        }
        Err(e) => panic!("open world: {e}"),
    };
    std::thread::scope(|scope| {
        for (rank, (device, comm)) in ranks.into_iter().enumerate() {
            let f = &f;
            scope.spawn(move || {
                f(rank, &comm);
                drop(comm);
                drop(device);
            });
        }
    });
}

#[test]
fn collectives_across_every_visible_gpu() {
    let Some(n) = gpus(1) else { return };
    per_rank(n, |rank, comm| {
        let d = comm.device();
        let s = d.create_stream().expect("stream");
        let count = 8usize;
        let buf = d.malloc((count * n * 4) as u64).expect("malloc");
        let out = d.malloc((count * n * 4) as u64).expect("malloc");
        let mine: Vec<f32> = (0..count * n).map(|i| (rank * 1000 + i) as f32).collect();
        d.copy_host_to_device(buf, &bytes(&mine), &s).expect("h2d");
        comm.all_to_all(buf, out, count, DType::F32, &s)
            .expect("all_to_all");
        let mut got = vec![0u8; count * n * 4];
        d.copy_device_to_host(&mut got, out, &s).expect("d2h");
        let got = f32s(&got);
        for src in 0..n {
            for i in 0..count {
                assert_eq!(got[src * count + i], (src * 1000 + rank * count + i) as f32);
            }
        }
        comm.all_reduce(buf, count, DType::F32, ReduceOp::Sum, &s)
            .expect("all_reduce");
        comm.barrier(&s).expect("barrier");
        let mut sum = vec![0u8; count * 4];
        d.copy_device_to_host(&mut sum, buf, &s).expect("d2h");
        let expected: Vec<f32> = (0..count)
            .map(|i| (0..n).map(|r| (r * 1000 + i) as f32).sum())
            .collect();
        assert_eq!(f32s(&sum), expected);
        let sub = comm.new_group(&[0]).expect("new_group");
        assert_eq!(sub.is_some(), rank == 0);
        if let Some(sub) = sub {
            sub.broadcast(buf, count, DType::F32, 0, &s)
                .expect("broadcast");
        }
        d.synchronize_device().expect("sync");
        d.free(buf).expect("free");
        d.free(out).expect("free");
    });
}

#[test]
fn a_single_process_launch_through_the_store() {
    if gpus(1).is_none() {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let vars = [
        ("RANK", "0".to_owned()),
        ("WORLD_SIZE", "1".to_owned()),
        ("LOCAL_RANK", "0".to_owned()),
        ("MASTER_ADDR", "127.0.0.1".to_owned()),
        ("MASTER_PORT", port.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let env = LaunchEnv::from_map(&vars).expect("variables");
    match open_rank(env, Duration::from_secs(30)) {
        Ok(rank) => {
            assert!(rank.store.is_host());
            assert_eq!(rank.endpoint.communicator.size(), 1);
        }
        Err(memreuse_cuda::LaunchError::Backend(e @ BackendError::Unavailable { .. })) => {
            memreuse_core::testing::skip_without_device(&e.to_string());
        }
        Err(e) => panic!("launch: {e}"),
    }
}

/// The communicator contract kit on NCCL (GPU only). NCCL has no per-op timeout: a rank
/// that never arrives waits until the kit gives up and aborts the communicators, so the
/// two timeout checks are reported, not asserted; the matching, sub-group, point-to-point
/// and batch checks must pass.
#[test]
fn nccl_keeps_the_communicator_contract() {
    let Some(n) = gpus(2) else { return };
    let n = n.min(4);
    let open = |world: usize,
                _timeout: Duration|
     -> Result<
        Vec<memreuse_core::testing::comm_contract::Rank<CudaDevice>>,
        BackendError,
    > {
        Ok(open_cuda_world(world)?
            .into_iter()
            .map(|(d, c)| (d, Box::new(c) as Box<dyn Communicator<CudaDevice>>))
            .collect())
    };
    let options = memreuse_core::testing::comm_contract::CommContractOptions {
        world_size: n,
        timeout: Duration::from_secs(2),
        grouping: true,
    };
    let report = memreuse_core::testing::comm_contract::check_communicator(&open, &options);
    println!("communicator contract on {n} GPUs: {report:#?}");
    for check in [
        "collective_order",
        "subgroups",
        "p2p_pairing",
        "group_batches",
    ] {
        assert!(report.passed.contains(&check), "{check}: {report:#?}");
    }
}
