//! The CUDA backend's FFI path against the stand-in (`memreuse-cuda-standin`), found like a
//! real install: a directory holding `libcuda.so`, `libcuda.so.1`, `libnccl.so` and
//! `libnccl.so.2`, all links to the one stand-in library, on `LD_LIBRARY_PATH`. The loader
//! reads `LD_LIBRARY_PATH` once, at process start, so each test re-runs this test binary
//! with the variable set (the body runs in the child, marked by `MEMREUSE_CUDA_STANDIN_CHILD`).
//!
//! Where the stand-in library is not built next to this binary (a GPU runner running the
//! copied test binaries), every test prints `skipped:` and passes.

#![allow(clippy::float_cmp, reason = "small integers, exact in f32")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp};
use memreuse_core::store::LaunchEnv;
use memreuse_core::{Backend, BackendError};
use memreuse_cuda::{CudaDevice, device_count, open_cuda_world, open_rank};

const CHILD: &str = "MEMREUSE_CUDA_STANDIN_CHILD";
const STANDIN_FILE: &str = "libmemreuse_cuda_standin.so";

/// The built stand-in next to this test binary (`deps/`, where cargo builds it as a
/// dev-dependency), if any.
fn standin_so() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .map(|d| d.join(STANDIN_FILE))
        .find(|p| p.exists())
}

/// Which library the install directory holds.
enum Install {
    /// The stand-in as built.
    Default,
    /// A copy in which the exported name `from` is renamed `to` (same length).
    Renamed(&'static str, &'static str),
}

fn install_dir(test: &str, install: &Install) -> Option<PathBuf> {
    let so = standin_so()?;
    let dir = std::env::temp_dir().join(format!(
        "memreuse-cuda-standin-{test}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let lib = match install {
        Install::Default => so,
        Install::Renamed(from, to) => {
            assert_eq!(from.len(), to.len());
            let mut bytes = std::fs::read(&so).expect("read the stand-in");
            let (from, to) = (format!("{from}\0"), format!("{to}\0"));
            let mut n = 0;
            let mut i = 0;
            while let Some(at) = bytes[i..]
                .windows(from.len())
                .position(|w| w == from.as_bytes())
            {
                bytes[i + at..i + at + to.len()].copy_from_slice(to.as_bytes());
                i += at + to.len();
                n += 1;
            }
            assert!(n > 0, "{from} not found in the stand-in");
            let copy = dir.join("libmemreuse_cuda_standin_renamed.so");
            std::fs::write(&copy, bytes).expect("write the copy");
            copy
        }
    };
    for name in ["libcuda.so", "libcuda.so.1", "libnccl.so", "libnccl.so.2"] {
        std::os::unix::fs::symlink(&lib, dir.join(name)).expect("symlink");
    }
    Some(dir)
}

/// In the parent: runs `test` in a child with the install on `LD_LIBRARY_PATH` and checks
/// it passed; returns true (the caller returns). In the child: returns false (the caller
/// runs the body).
fn parent(test: &str, install: &Install, env: &[(&str, &str)]) -> bool {
    if std::env::var(CHILD).as_deref() == Ok(test) {
        return false;
    }
    let Some(dir) = install_dir(test, install) else {
        println!("skipped: {STANDIN_FILE} is not built next to this test binary");
        return true;
    };
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        .env("LD_LIBRARY_PATH", &dir)
        .env("MEMREUSE_REQUIRE_DEVICE", "1")
        .envs(env.iter().copied())
        .output()
        .expect("run the child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{test} in the child failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "{test} did not run in the child:\n{text}"
    );
    true
}

fn hook<F: Copy>(name: &str) -> F {
    // SAFETY: the stand-in is loaded (a device was counted first); `F` is the hook's type.
    unsafe {
        *memreuse_cuda::cudarc::driver::sys::culib()
            .get::<F>(name.as_bytes())
            .expect("stand-in hook")
    }
}

/// `memreuse_standin_configure(devices, capacity, deterministic, seed, timeout_ms)`.
fn configure(devices: u32, timeout_ms: u64) {
    device_count().expect("the stand-in loads");
    let f: unsafe extern "C" fn(u32, u64, i32, u64, u64) -> u32 =
        hook("memreuse_standin_configure");
    // SAFETY: plain integers; no handle is in use.
    assert_eq!(unsafe { f(devices, 1 << 30, 0, 0, timeout_ms) }, 0);
}

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
    let rank = open_rank(env, Duration::from_secs(20)).expect("launch");
    assert_eq!(rank.endpoint.communicator.size(), 1);
    drop(rank);
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
