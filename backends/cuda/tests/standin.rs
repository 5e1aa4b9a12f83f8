//! The CUDA backend's FFI path against the stand-in (`memreuse-cuda-standin`), found like a
//! real install: a directory holding `libcuda.so`, `libcuda.so.1`, `libnccl.so` and
//! `libnccl.so.2`, all links to the one stand-in library, on `LD_LIBRARY_PATH`. The loader
//! reads `LD_LIBRARY_PATH` once, at process start, so each test re-runs this test binary
//! with the variable set (the body runs in the child, marked by `MEMREUSE_CUDA_STANDIN_CHILD`).
//!
//! Where the stand-in library is not built next to this binary (a GPU runner running the
//! copied test binaries), every test prints `skipped:` and passes.

#![allow(clippy::float_cmp, reason = "small integers, exact in f32")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::standin::{
    Install, calls, configure, hook, inject_call_failure, launch_one_rank, parent, pending_and_live,
};
use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp};
use memreuse_core::{AllocError, AllocatorConfig, Backend, BackendError, CachingAllocator};
use memreuse_cuda::{CudaDevice, device_count, open_cuda_world};

#[test]
fn the_standin_is_found_like_a_real_install_and_declares_what_it_honours() {
    if parent(
        "the_standin_is_found_like_a_real_install_and_declares_what_it_honours",
        &Install::Default,
        &[],
    ) {
        return;
    }
    assert!(device_count().expect("count") >= 16);
    let d = CudaDevice::open(15).expect("open device 15");
    let c = d.capabilities();
    assert!(c.memory_capacity && c.deterministic_scheduling && c.native_race_detection);
    assert!(c.exact_delays && c.virtual_memory, "{c:?}");
    assert_eq!(d.race_reports().map(|r| r.len()), Some(0));
}

/// The non-blocking init path (`MEMREUSE_NCCL_INIT_TIMEOUT_S`), never run before: through
/// `ncclCommInitRankConfig` (`ncclInProgress`, polled with `ncclCommGetAsyncError`) and a
/// non-blocking finalize (`ncclInProgress` once more) it opens and closes.
#[test]
fn a_launch_with_the_nonblocking_init_runs_collectives_and_closes() {
    if parent(
        "a_launch_with_the_nonblocking_init_runs_collectives_and_closes",
        &Install::Default,
        &[("MEMREUSE_NCCL_INIT_TIMEOUT_S", "20")],
    ) {
        return;
    }
    launch_one_rank();
    assert_eq!(calls(c"ncclCommInitRankConfig"), 1);
    assert_eq!(calls(c"ncclCommFinalize"), 1);
}

/// Bug found by the stand-in: with the init deadline set, an NCCL without
/// `ncclCommInitRankConfig` (older than 2.14) made `open_rank` fail with cudarc's
/// "Missing symbol" panic turned `Unavailable`. The symbol is probed by name now, and the
/// rank takes the documented fallback, the blocking `ncclCommInitRank`.
#[test]
fn an_nccl_without_init_rank_config_takes_the_blocking_init() {
    if parent(
        "an_nccl_without_init_rank_config_takes_the_blocking_init",
        &Install::Renamed("ncclCommInitRankConfig", "ncclCommInitRankConfiX"),
        &[("MEMREUSE_NCCL_INIT_TIMEOUT_S", "20")],
    ) {
        return;
    }
    launch_one_rank();
    assert_eq!(calls(c"ncclCommInitRank"), 1);
}

/// Bug found by the stand-in: with the init deadline set, an NCCL without
/// `ncclCommFinalize` opened a non-blocking communicator whose close panicked (cudarc, at
/// the first call of the missing symbol, inside `Drop`). The symbol is probed by name
/// before the init, and the rank takes the blocking init, which closes without it.
#[test]
fn an_nccl_without_finalize_takes_the_blocking_init_and_closes() {
    if parent(
        "an_nccl_without_finalize_takes_the_blocking_init_and_closes",
        &Install::Renamed("ncclCommFinalize", "ncclCommFinalizX"),
        &[("MEMREUSE_NCCL_INIT_TIMEOUT_S", "20")],
    ) {
        return;
    }
    launch_one_rank();
    assert_eq!(calls(c"ncclCommInitRankConfig"), 0);
    assert_eq!(calls(c"ncclCommInitRank"), 1);
    assert_eq!(calls(c"ncclCommDestroy"), 1);
}

/// A collective whose count differs across ranks hangs real NCCL; the stand-in reports it
/// from `ncclCommGetAsyncError` once the timeout passed, and the backend surfaces it.
#[test]
fn a_mismatched_collective_is_an_async_error_of_every_rank() {
    if parent(
        "a_mismatched_collective_is_an_async_error_of_every_rank",
        &Install::Default,
        &[],
    ) {
        return;
    }
    configure(16, 200);
    let ranks = open_cuda_world(2).expect("world");
    std::thread::scope(|scope| {
        for (rank, (d, comm)) in ranks.into_iter().enumerate() {
            scope.spawn(move || {
                let s = d.create_stream().expect("stream");
                let buf = d.malloc(64).expect("malloc");
                let count = if rank == 0 { 4 } else { 8 };
                comm.all_reduce(buf, count, DType::F32, ReduceOp::Sum, &s)
                    .expect("enqueued");
                let start = Instant::now();
                let e = loop {
                    if let Some(e) = comm.async_error() {
                        break e;
                    }
                    assert!(start.elapsed() < Duration::from_secs(30), "no async error");
                    std::thread::sleep(Duration::from_millis(10));
                };
                assert!(e.to_string().contains("ncclInvalidUsage"), "{e}");
                comm.abort();
                let _ = d.synchronize_stream(&s);
                let _ = d.free(buf);
            });
        }
    });
}

/// Calls on an aborted communicator fail (the backend refuses them before NCCL).
#[test]
fn calls_on_an_aborted_communicator_fail() {
    if parent(
        "calls_on_an_aborted_communicator_fail",
        &Install::Default,
        &[],
    ) {
        return;
    }
    let mut ranks = open_cuda_world(1).expect("world");
    let (d, comm) = ranks.pop().expect("one rank");
    let s = d.create_stream().expect("stream");
    let buf = d.malloc(16).expect("malloc");
    comm.abort();
    let r = comm.all_reduce(buf, 4, DType::F32, ReduceOp::Sum, &s);
    assert!(matches!(r, Err(CommError::Aborted { .. })), "{r:?}");
    drop(comm);
    d.free(buf).expect("free");
}

/// A driver that reports virtual memory but lacks one cuMem* symbol: no capability, and
/// the reason names the symbol (cudarc would panic at its first call).
#[test]
fn a_driver_without_cumemmap_has_no_virtual_memory() {
    if parent(
        "a_driver_without_cumemmap_has_no_virtual_memory",
        &Install::Renamed("cuMemMap", "cuMemMaq"),
        &[],
    ) {
        return;
    }
    let d = CudaDevice::open(0).expect("open");
    assert!(!d.capabilities().virtual_memory);
    let e = d.vm_reserve(2 << 20).expect_err("no virtual memory");
    assert!(
        matches!(&e, BackendError::Unsupported { reason, .. } if reason.contains("cuMemMap")),
        "{e:?}"
    );
}

/// Bug found by the stand-in: an NCCL without `ncclCommSplit` made `new_group` panic
/// (cudarc, at the first call of the missing symbol). It is probed by name now, and
/// sub-groups come from a fresh unique id instead: same results, and the backend says so.
#[test]
fn an_nccl_without_split_takes_fresh_ids_for_sub_groups() {
    if parent(
        "an_nccl_without_split_takes_fresh_ids_for_sub_groups",
        &Install::Renamed("ncclCommSplit", "ncclCommSpliT"),
        &[],
    ) {
        return;
    }
    let ranks = open_cuda_world(3).expect("world");
    std::thread::scope(|scope| {
        for (rank, (d, comm)) in ranks.into_iter().enumerate() {
            scope.spawn(move || {
                assert!(!comm.splits_natively());
                let sub = comm.new_group(&[2, 0]).expect("new_group");
                assert_eq!(sub.is_some(), rank != 1);
                if let Some(sub) = sub {
                    assert_eq!((sub.rank(), sub.size()), (usize::from(rank == 0), 2));
                    let s = d.create_stream().expect("stream");
                    let buf = d.malloc(8).expect("malloc");
                    let mine: Vec<u8> = [rank as f32, 1.0]
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect();
                    d.copy_host_to_device(buf, &mine, &s).expect("h2d");
                    sub.all_reduce(buf, 2, DType::F32, ReduceOp::Sum, &s)
                        .expect("all_reduce");
                    let mut out = vec![0u8; 8];
                    d.copy_device_to_host(&mut out, buf, &s).expect("d2h");
                    assert_eq!(out[..4], 2.0f32.to_le_bytes());
                    drop(sub);
                    d.free(buf).expect("free");
                }
                drop(comm);
                drop(d);
            });
        }
    });
}

/// The stand-in's own symbols are looked up where the driver was found, never elsewhere.
#[test]
fn the_install_directory_is_what_the_backend_loads() {
    if parent(
        "the_install_directory_is_what_the_backend_loads",
        &Install::Default,
        &[],
    ) {
        return;
    }
    let dir = std::env::var("LD_LIBRARY_PATH").expect("set by the parent");
    assert!(Path::new(&dir).join("libcuda.so").exists());
    let calls: unsafe extern "C" fn(*const std::ffi::c_char) -> u64 =
        hook("memreuse_standin_calls");
    device_count().expect("count");
    // SAFETY: a NUL-terminated name.
    assert!(unsafe { calls(c"cuInit".as_ptr()) } >= 1);
}

/// Bug found by the stand-in (`oom-pressure` failed on cuda): a communicator allocated its
/// barrier buffer with `cuMemAlloc` at creation, outside the allocator, so a device the
/// allocator fills to its capacity ran out of memory. The buffer now comes at the first
/// barrier.
#[test]
fn a_communicator_takes_no_device_memory_until_its_first_barrier() {
    if parent(
        "a_communicator_takes_no_device_memory_until_its_first_barrier",
        &Install::Default,
        &[],
    ) {
        return;
    }
    let mut ranks = open_cuda_world(1).expect("world");
    let (d, comm) = ranks.pop().expect("one rank");
    let info = d.memory_info().expect("info");
    assert_eq!(info.free, info.total, "the communicator took device memory");
    let s = d.create_stream().expect("stream");
    comm.barrier(&s).expect("barrier");
    d.synchronize_stream(&s).expect("sync");
    assert!(d.memory_info().expect("info").free < info.total);
    drop(comm);
    assert_eq!(d.memory_info().expect("info").free, info.total);
}

/// An NCCL of version 2.28+ whose library lacks `ncclAlltoAll`: `all_to_all` takes
/// grouped send/recv (the symbol is probed by name; cudarc would panic at its first call).
#[test]
fn an_nccl_without_alltoall_takes_grouped_send_recv() {
    if parent(
        "an_nccl_without_alltoall_takes_grouped_send_recv",
        &Install::Renamed("ncclAlltoAll", "ncclAlltoAlX"),
        &[],
    ) {
        return;
    }
    let ranks = open_cuda_world(2).expect("world");
    std::thread::scope(|scope| {
        for (rank, (d, comm)) in ranks.into_iter().enumerate() {
            scope.spawn(move || {
                assert!(!comm.uses_native_all_to_all());
                let s = d.create_stream().expect("stream");
                let (a, b) = (d.malloc(16).expect("malloc"), d.malloc(16).expect("malloc"));
                let mine: Vec<u8> = [rank as f32 * 10.0, rank as f32 * 10.0 + 1.0]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect();
                let mine = [mine.clone(), mine].concat();
                d.copy_host_to_device(a, &mine, &s).expect("h2d");
                comm.all_to_all(a, b, 2, DType::F32, &s)
                    .expect("all_to_all");
                let mut out = vec![0u8; 16];
                d.copy_device_to_host(&mut out, b, &s).expect("d2h");
                let got: Vec<f32> = out
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                assert_eq!(got, vec![0.0, 1.0, 10.0, 11.0]);
                drop(comm);
                d.free(a).expect("free");
                d.free(b).expect("free");
            });
        }
    });
}

/// An out-of-memory of `cuMemAlloc_v2` (injected on the device) is `OutOfMemory` naming
/// the call; the allocator frees its cache and retries; nothing leaks.
#[test]
fn an_oom_at_cumemalloc_is_out_of_memory_and_the_allocator_retries() {
    if parent(
        "an_oom_at_cumemalloc_is_out_of_memory_and_the_allocator_retries",
        &Install::Default,
        &[],
    ) {
        return;
    }
    configure(1, 0);
    let d = Arc::new(CudaDevice::open(0).expect("open"));
    let inject: unsafe extern "C" fn(i32, u64) -> u32 = hook("memreuse_standin_inject_malloc_oom");
    // SAFETY: plain integers.
    assert_eq!(unsafe { inject(0, 1) }, 0);
    let e = d.malloc(1 << 20).expect_err("injected out of memory");
    assert!(e.is_out_of_memory(), "{e:?}");
    assert!(e.to_string().contains("cuMemAlloc"), "{e}");
    let alloc = CachingAllocator::new(Arc::clone(&d), AllocatorConfig::default());
    let s = d.default_stream();
    drop(alloc.allocate(8 << 20, &s).expect("allocate"));
    // SAFETY: plain integers.
    assert_eq!(unsafe { inject(0, 1) }, 0);
    let retries = alloc.stats().num_alloc_retries;
    let held = alloc
        .allocate(32 << 20, &s)
        .expect("retried after freeing the cache");
    assert!(
        alloc.stats().num_alloc_retries > retries,
        "{:?}",
        alloc.stats()
    );
    drop(held);
    alloc.empty_cache().expect("empty_cache");
    assert_eq!(pending_and_live().1, 0, "cuMemAlloc allocations leaked");
    let info = d.memory_info().expect("info");
    assert_eq!(info.free, info.total);
}

/// Bug found by the stand-in's fault injection: `cuMemMap`'s `CUDA_ERROR_OUT_OF_MEMORY`
/// was a `Device` error, so the expandable allocator gave up instead of freeing its cache
/// and retrying as it does for `cuMemCreate`. Now it retries; any other `cuMemMap` error
/// fails the allocation with the call named. Either way the allocator keeps no half-made
/// segment (the physical memory is released) and the next allocation maps.
#[test]
fn a_failing_cumemmap_leaves_the_expandable_allocator_consistent() {
    if parent(
        "a_failing_cumemmap_leaves_the_expandable_allocator_consistent",
        &Install::Default,
        &[],
    ) {
        return;
    }
    configure(1, 0);
    let d = Arc::new(CudaDevice::open(0).expect("open"));
    let config = AllocatorConfig::parse("expandable_segments:True").expect("config");
    let alloc = CachingAllocator::try_new(Arc::clone(&d), config).expect("expandable");
    let s = d.default_stream();
    // CUDA_ERROR_OUT_OF_MEMORY (2): retried.
    inject_call_failure(c"cuMemMap", 1, 2);
    let retries = alloc.stats().num_alloc_retries;
    let first = alloc.allocate(4 << 20, &s).expect("retried");
    assert!(
        alloc.stats().num_alloc_retries > retries,
        "{:?}",
        alloc.stats()
    );
    assert_eq!(
        pending_and_live().0,
        0,
        "the injected failure was not reached"
    );
    // CUDA_ERROR_INVALID_VALUE (1): the allocation fails, naming the call.
    inject_call_failure(c"cuMemMap", 1, 1);
    let e = alloc.allocate(64 << 20, &s).expect_err("cuMemMap failed");
    assert!(
        matches!(&e, AllocError::Backend(BackendError::Device { call, code_name, .. })
            if *call == "cuMemMap" && code_name.contains("CUDA_ERROR_INVALID_VALUE")),
        "{e:?}"
    );
    let second = alloc
        .allocate(64 << 20, &s)
        .expect("the next allocation maps");
    d.memset_zero(second.ptr(), 64 << 20, &s).expect("memset");
    d.synchronize_stream(&s).expect("sync");
    drop((first, second));
    alloc.empty_cache().expect("empty_cache");
    let info = d.memory_info().expect("info");
    assert_eq!(info.free, info.total, "physical memory leaked");
}

/// An error NCCL reports on its own (`ncclRemoteError` from `ncclCommGetAsyncError`) is
/// the communicator's async error, typed and named; after `abort` it is no longer
/// reported, calls fail as aborted and the device keeps working. A refused collective
/// (injected `ncclUnhandledCudaError`) is a typed error and the next one runs.
#[test]
fn nccl_errors_are_typed_and_the_communicator_stays_consistent() {
    if parent(
        "nccl_errors_are_typed_and_the_communicator_stays_consistent",
        &Install::Default,
        &[],
    ) {
        return;
    }
    configure(16, 0);
    let mut ranks = open_cuda_world(1).expect("world");
    let (d, comm) = ranks.pop().expect("one rank");
    let s = d.create_stream().expect("stream");
    let buf = d.malloc(16).expect("malloc");
    d.copy_host_to_device(buf, &[0u8; 16], &s).expect("h2d");
    inject_call_failure(c"ncclAllReduce", 1, 1);
    let r = comm.all_reduce(buf, 4, DType::F32, ReduceOp::Sum, &s);
    assert!(
        matches!(&r, Err(CommError::Backend(BackendError::Device { call, code_name, .. }))
            if *call == "ncclAllReduce" && code_name.contains("ncclUnhandledCudaError")),
        "{r:?}"
    );
    comm.all_reduce(buf, 4, DType::F32, ReduceOp::Sum, &s)
        .expect("the next collective runs");
    d.synchronize_stream(&s).expect("sync");
    assert!(comm.async_error().is_none());
    let set: unsafe extern "C" fn(usize, u32) -> u32 =
        hook("memreuse_standin_set_comm_async_error");
    // SAFETY: plain integers (0: every live communicator; 6: ncclRemoteError).
    assert_eq!(unsafe { set(0, 6) }, 0);
    let e = comm.async_error().expect("the async error is reported");
    assert!(
        matches!(&e, CommError::Backend(BackendError::Device { code_name, .. })
            if code_name.contains("ncclRemoteError")),
        "{e:?}"
    );
    comm.abort();
    assert!(
        comm.async_error().is_none(),
        "an aborted communicator reports nothing"
    );
    let r = comm.all_reduce(buf, 4, DType::F32, ReduceOp::Sum, &s);
    assert!(matches!(r, Err(CommError::Aborted { .. })), "{r:?}");
    drop(comm);
    d.memset_zero(buf, 16, &s).expect("the device still works");
    d.synchronize_stream(&s).expect("sync");
    d.free(buf).expect("free");
}

/// `ncclCommAbort` while a collective waits for a peer that never comes: the waiting work
/// fails (a typed error from the stream, not a hang), the communicator refuses calls, and
/// the device, its memory and new streams keep working.
#[test]
fn an_abort_mid_collective_fails_the_pending_work_and_the_device_keeps_working() {
    if parent(
        "an_abort_mid_collective_fails_the_pending_work_and_the_device_keeps_working",
        &Install::Default,
        &[],
    ) {
        return;
    }
    configure(16, 60_000);
    let mut ranks = open_cuda_world(2).expect("world");
    let (d1, c1) = ranks.pop().expect("rank 1");
    let (d0, c0) = ranks.pop().expect("rank 0");
    let s = d0.create_stream().expect("stream");
    let buf = d0.malloc(64).expect("malloc");
    c0.all_reduce(buf, 4, DType::F32, ReduceOp::Sum, &s)
        .expect("enqueued; rank 1 never joins");
    c0.abort();
    let r = d0.synchronize_stream(&s);
    assert!(
        matches!(&r, Err(BackendError::Device { code_name, .. }) if code_name.contains("LAUNCH_FAILED")),
        "{r:?}"
    );
    let r = c0.all_reduce(buf, 4, DType::F32, ReduceOp::Sum, &s);
    assert!(matches!(r, Err(CommError::Aborted { .. })), "{r:?}");
    c1.abort();
    drop((c0, c1));
    let fresh = d0.create_stream().expect("a new stream");
    d0.memset_zero(buf, 64, &fresh).expect("memset");
    d0.synchronize_stream(&fresh).expect("sync");
    d0.free(buf).expect("free");
    drop(d1);
}

/// Every element type through the backend and the stand-in's NCCL: the contract kit's
/// per-type checks (data movement in all twelve types; every reduction the backend accepts
/// equal to core's reference arithmetic, every other one refused at enqueue), and the
/// backend's own refusals naming type, operator and backend.
#[test]
fn every_element_type_moves_and_reduces_like_the_reference() {
    if parent(
        "every_element_type_moves_and_reduces_like_the_reference",
        &Install::Default,
        &[],
    ) {
        return;
    }
    configure(16, 500);
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
        world_size: 4,
        timeout: Duration::from_secs(1),
        grouping: true,
    };
    let report = memreuse_core::testing::comm_contract::check_communicator(&open, &options);
    println!("{report:#?}");
    for check in ["element_types_move", "element_types_reduce"] {
        assert!(report.passed.contains(&check), "{check}: {report:#?}");
    }
    let mut ranks = open_cuda_world(1).expect("world");
    let (d, comm) = ranks.pop().expect("one rank");
    let s = d.create_stream().expect("stream");
    let buf = d.malloc(16).expect("malloc");
    for (dtype, op) in [
        (DType::I32, ReduceOp::Avg),
        (DType::F8E4M3, ReduceOp::Sum),
        (DType::F8E5M2, ReduceOp::Max),
    ] {
        assert!(!comm.reduces(dtype, op));
        let e = comm
            .all_reduce(buf, 4, dtype, op, &s)
            .expect_err("refused before NCCL");
        let text = e.to_string();
        assert!(
            matches!(e, CommError::InvalidArgument { .. })
                && text.contains(dtype.name())
                && text.contains(op.name())
                && text.contains("cuda"),
            "{text}"
        );
    }
    assert!(comm.reduces(DType::BF16, ReduceOp::Avg));
    drop(comm);
    d.free(buf).expect("free");
}
