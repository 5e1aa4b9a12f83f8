//! The runtime's documented usage rules on the HCCL side, each refused or answered by the
//! stand-in the way HCCL documents, each kept by the backend.

mod common;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{calls, hook, last_root_info_device, serial, set_behaviour, standin};
use memreuse_ascend::registry::open_world_with;
use memreuse_ascend::{AscendCommunicator, AscendDevice};
use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp};
use memreuse_core::{Backend, BackendError, BackendOptions, DevicePtr, WorldOptions};

/// Behaviour bits of the stand-in (`harness.rs`).
const ASYNC_ERROR_UNSUPPORTED: u32 = 1;
const GROUP_UNSUPPORTED: u32 = 2;
const BARRIER_UNSUPPORTED: u32 = 4;

fn world(n: usize, timeout: Duration) -> Vec<(AscendDevice, AscendCommunicator)> {
    let options = WorldOptions {
        world_size: n,
        backend: BackendOptions {
            memory_capacity: Some(16 << 20),
            ..BackendOptions::default()
        },
        timeout,
    };
    open_world_with(standin(&[]), &options).unwrap()
}

fn put(dev: &AscendDevice, p: DevicePtr, v: f32) {
    dev.copy_host_to_device(p, &v.to_le_bytes(), &dev.default_stream())
        .unwrap();
}

fn get(dev: &AscendDevice, p: DevicePtr) -> f32 {
    let mut b = [0u8; 4];
    dev.copy_device_to_host(&mut b, p, &dev.default_stream())
        .unwrap();
    f32::from_le_bytes(b)
}

/// A ring of sends and receives in one group, then a barrier; returns what each rank got.
fn ring_then_barrier(world: &[(AscendDevice, AscendCommunicator)]) -> Vec<f32> {
    let n = world.len();
    std::thread::scope(|scope| {
        let handles: Vec<_> = world
            .iter()
            .enumerate()
            .map(|(rank, (dev, comm))| {
                scope.spawn(move || {
                    let s = dev.default_stream();
                    let (a, b) = (dev.malloc(4).unwrap(), dev.malloc(4).unwrap());
                    put(dev, a, rank as f32);
                    comm.group_start().unwrap();
                    comm.send(a, 1, DType::F32, (rank + 1) % n, &s).unwrap();
                    comm.recv(b, 1, DType::F32, (rank + n - 1) % n, &s).unwrap();
                    comm.group_end().unwrap();
                    comm.barrier(&s).unwrap();
                    dev.synchronize_stream(&s).unwrap();
                    let got = get(dev, b);
                    dev.free(a).unwrap();
                    dev.free(b).unwrap();
                    got
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rule 3: on a part whose `HcclGroupStart` and `HcclBarrier` answer `HCCL_E_NOT_SUPPORT`,
/// grouped point-to-point runs ungrouped in a deadlock-free order (a ring issued send
/// first would hang) and the barrier is a one-element all_reduce.
#[test]
fn grouped_point_to_point_and_barrier_work_where_the_part_does_not_support_them() {
    let _g = serial();
    let world = world(3, Duration::from_secs(20));
    let prev = set_behaviour(GROUP_UNSUPPORTED | BARRIER_UNSUPPORTED);
    let got = ring_then_barrier(&world);
    set_behaviour(prev);
    let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
    assert_eq!(bits, [2.0f32, 0.0, 1.0].map(f32::to_bits));
    for (dev, comm) in &world {
        assert!(comm.groups_emulated() && comm.barrier_emulated());
        assert_eq!(dev.race_reports().unwrap(), Vec::new());
    }
}

/// Rule 4: `abort` destroys the communicator from the aborting thread, which makes its
/// pending operations exit: the stream reports the runtime's task abort (107022) instead
/// of waiting for a peer that never comes.
#[test]
fn abort_makes_pending_operations_exit() {
    let _g = serial();
    let world = world(2, Duration::from_secs(30));
    let (dev, comm) = &world[0];
    let s = dev.default_stream();
    let p = dev.malloc(4).unwrap();
    // Rank 1 never joins this all_reduce.
    comm.all_reduce(p, 1, DType::F32, ReduceOp::Sum, &s)
        .unwrap();
    comm.abort();
    let e = dev.synchronize_stream(&s).unwrap_err();
    match &e {
        BackendError::Device { code, .. } => assert_eq!(*code, 107_022, "{e}"),
        other => panic!("expected ACL_ERROR_RT_DEVICE_TASK_ABORT, got {other:?}"),
    }
    assert!(matches!(comm.barrier(&s), Err(CommError::Aborted { .. })));
}

/// Rule 4: `HcclCommDestroy` answers `HCCL_E_AGAIN` on a busy communicator; it is retried,
/// and the handle is gone afterwards (not leaked).
#[test]
fn a_busy_communicator_is_destroyed_after_hccl_e_again() {
    let _g = serial();
    let mut world = world(2, Duration::from_secs(20));
    let api = world[0].0.api();
    let (dev, comm) = world.remove(0);
    let raw = comm.raw();
    let busy: unsafe extern "C" fn(*mut c_void, i32) -> i32 =
        hook("memreuse_standin_set_comm_busy");
    // SAFETY: live comm handle.
    assert_eq!(unsafe { busy(raw, 3) }, 0);
    let destroys = calls("HcclCommDestroy");
    drop(comm);
    assert_eq!(calls("HcclCommDestroy") - destroys, 4);
    dev.bind().unwrap();
    let mut code = 0;
    // SAFETY: the stand-in checks the handle; a destroyed one is HCCL_E_PARA.
    let status = unsafe { (api.HcclGetCommAsyncError)(raw, &raw mut code) };
    assert_eq!(status, 1);
}

/// Rule 5: where `HcclGetCommAsyncError` is unsupported (Ascend 950), its answer is "no
/// information", not an error on every watchdog poll, and it is not asked again.
#[test]
fn an_unsupported_async_error_query_is_no_information() {
    let _g = serial();
    let world = world(2, Duration::from_secs(20));
    let prev = set_behaviour(ASYNC_ERROR_UNSUPPORTED);
    let before = calls("HcclGetCommAsyncError");
    let (_, comm) = &world[0];
    let answers: Vec<bool> = (0..3).map(|_| comm.async_error().is_none()).collect();
    set_behaviour(prev);
    assert_eq!(answers, vec![true; 3]);
    assert_eq!(calls("HcclGetCommAsyncError") - before, 1);
}

/// Rule 6: an in-process sub-group takes its root info from its rank 0 (the first listed
/// member), whichever member asks first.
#[test]
fn a_subgroup_root_info_comes_from_its_rank_0() {
    let _g = serial();
    let world = world(3, Duration::from_secs(20));
    let asked = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for (rank, (dev, comm)) in world.iter().enumerate() {
            let asked = &asked;
            scope.spawn(move || {
                if rank == 2 {
                    // Rank 2 is the sub-group's rank 0 and asks last.
                    while !asked.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    std::thread::sleep(Duration::from_millis(100));
                } else if rank == 0 {
                    asked.store(true, Ordering::Release);
                }
                let sub = comm.new_group(&[2, 0]).unwrap();
                if let Some(sub) = sub {
                    let s = dev.default_stream();
                    let p = dev.malloc(4).unwrap();
                    put(dev, p, rank as f32);
                    sub.all_reduce(p, 1, DType::F32, ReduceOp::Sum, &s).unwrap();
                    assert_eq!(get(dev, p).to_bits(), 2.0f32.to_bits());
                    dev.free(p).unwrap();
                }
            });
        }
    });
    assert_eq!(last_root_info_device(), world[2].0.device_id());
}

/// Rule 4: `abort` does not wait behind a call in flight: a call stuck inside HCCL on
/// another thread is made to exit by the abort's `HcclCommDestroy` (the stand-in answers
/// `HCCL_E_INTERNAL` then; `HCCL_E_TIMEOUT` had the call waited out the joint timeout).
#[test]
fn abort_interrupts_a_call_stuck_inside_hccl() {
    let _g = serial();
    let world = world(2, Duration::from_secs(10));
    let (dev, comm) = &world[0];
    let raw = comm.raw();
    let stuck: unsafe extern "C" fn(*mut c_void, i32) -> i32 =
        hook("memreuse_standin_set_stuck_calls");
    let blocked: unsafe extern "C" fn(*mut c_void) -> i32 = hook("memreuse_standin_blocked_calls");
    // SAFETY: live comm handle.
    assert_eq!(unsafe { stuck(raw, 1) }, 0);
    let result = std::thread::scope(|scope| {
        let call = scope.spawn(|| {
            let p = dev.malloc(4).unwrap();
            comm.all_reduce(p, 1, DType::F32, ReduceOp::Sum, &dev.default_stream())
        });
        // SAFETY: live comm handle (destroyed only by the abort below).
        while unsafe { blocked(raw) } != 1 {
            std::thread::yield_now();
        }
        comm.abort();
        call.join().unwrap()
    });
    match result {
        Err(CommError::Backend(BackendError::Device { code, .. })) => assert_eq!(code, 4),
        other => panic!("expected the stuck call to exit with HCCL_E_INTERNAL, got {other:?}"),
    }
}
