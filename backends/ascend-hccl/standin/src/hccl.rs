//! The HCCL symbols (`hccl.h`): root-info rendezvous in process, collectives as joint ops of
//! the mock. The ops' bodies are the mock communicator's own ([`memreuse_mock::collective`]:
//! core's reference arithmetic per element type, in rank order), so results are
//! bit-identical to the mock backend's.
//!
//! # Safety (all functions)
//! Pointers are as HCCL documents them: out-pointers valid for one write (null is
//! refused), `rootInfo` valid for 4108 bytes.

#![allow(non_snake_case, clippy::missing_safety_doc)]
// The CANN 8.0-8.3 variant keeps the group and barrier code but exports none of it.
#![cfg_attr(feature = "cann80", allow(dead_code))]

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Instant;

use memreuse_core::DevicePtr;
use memreuse_core::comm::{DType, ReduceOp};
use memreuse_mock::{
    JointGroup, JointOp, MemAccess, MockDevice, MockStream, PairGroups, collective,
};
use parking_lot::{Condvar, Mutex};

use crate::{
    CommMember, CommShared, Handle, comm_of, current, guard, hccl_code, hcode, insert_handle,
    joint_timeout, remove_handle, stream_of, write_out,
};

const ROOT_INFO_BYTES: usize = 4108;

/// A communicator being formed: who arrived, and the result once complete.
struct Pending {
    n: usize,
    devices: Vec<Option<MockDevice>>,
    shared: Option<Arc<CommShared>>,
    taken: usize,
}

static RENDEZVOUS: Mutex<Option<HashMap<Vec<u8>, Pending>>> = Mutex::new(None);
static RENDEZVOUS_CV: Condvar = Condvar::new();
static ROOT_SEQ: AtomicU64 = AtomicU64::new(1);
/// The current device of the thread that made the last root info (-1: none yet).
static LAST_ROOT_DEVICE: AtomicI32 = AtomicI32::new(-1);

/// Behaviour profile bits (chosen at run time: `MEMREUSE_STANDIN_BEHAVIOUR` or the
/// `memreuse_standin_set_behaviour` hook): answers of a part that lacks a feature.
pub(crate) mod behaviour {
    /// `HcclGetCommAsyncError` answers `HCCL_E_NOT_SUPPORT` (Ascend 950).
    pub const ASYNC_ERROR_UNSUPPORTED: u32 = 1;
    /// `HcclGroupStart` answers `HCCL_E_NOT_SUPPORT` (Atlas 910, 310P).
    pub const GROUP_UNSUPPORTED: u32 = 2;
    /// `HcclBarrier` answers `HCCL_E_NOT_SUPPORT` (Atlas inference parts).
    pub const BARRIER_UNSUPPORTED: u32 = 4;
    /// `aclrtReserveMemAddress` and `aclrtMallocPhysical` answer
    /// `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` (a part or driver without virtual memory
    /// management, which still exports the symbols).
    pub const VM_UNSUPPORTED: u32 = 8;
    /// The names the environment variable accepts, with their bits.
    pub const NAMES: [(&str, u32); 4] = [
        ("async-error-unsupported", ASYNC_ERROR_UNSUPPORTED),
        ("group-unsupported", GROUP_UNSUPPORTED),
        ("barrier-unsupported", BARRIER_UNSUPPORTED),
        ("vm-unsupported", VM_UNSUPPORTED),
    ];
}

/// The active behaviour bits.
pub(crate) static BEHAVIOUR: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub(crate) fn behaves(bit: u32) -> bool {
    BEHAVIOUR.load(Ordering::Relaxed) & bit != 0
}

/// The device of the thread that made the last root info.
pub(crate) fn last_root_device() -> i32 {
    LAST_ROOT_DEVICE.load(Ordering::Relaxed)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn HcclGetRootInfo(root_info: *mut [u8; ROOT_INFO_BYTES]) -> i32 {
    guard("HcclGetRootInfo", hcode::E_INTERNAL, || {
        if root_info.is_null() {
            return Err(hcode::E_PTR);
        }
        let mut bytes = [0u8; ROOT_INFO_BYTES];
        let tag = format!(
            "memreuse-standin root {} pid {} t {:?}",
            ROOT_SEQ.fetch_add(1, Ordering::Relaxed),
            std::process::id(),
            std::time::SystemTime::now()
        );
        let n = tag.len().min(ROOT_INFO_BYTES);
        bytes[..n].copy_from_slice(&tag.as_bytes()[..n]);
        let device = current().map_or(-1, |(i, _)| i as i32);
        LAST_ROOT_DEVICE.store(device, Ordering::Relaxed);
        // SAFETY: not null (checked), valid for a write of 4108 bytes (contract).
        unsafe { root_info.write(bytes) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn HcclCommInitRootInfo(
    n_ranks: u32,
    root_info: *const [u8; ROOT_INFO_BYTES],
    rank: u32,
    comm: *mut *mut c_void,
) -> i32 {
    guard("HcclCommInitRootInfo", hcode::E_INTERNAL, || {
        if root_info.is_null() || comm.is_null() {
            return Err(hcode::E_PTR);
        }
        let (n, rank) = (n_ranks as usize, rank as usize);
        if n == 0 || rank >= n {
            return Err(hcode::E_PARA);
        }
        let (_, device) = current().map_err(|_| hcode::E_RUNTIME)?;
        // SAFETY: not null (checked), valid for reads of 4108 bytes (contract).
        let key = unsafe { root_info.read() }.to_vec();
        let member = rendezvous(&key, n, rank, device)?;
        let handle = insert_handle(Handle::Comm(Arc::new(member)));
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { write_out(comm, handle as *mut c_void, hcode::E_PTR) }
    })
}

fn rendezvous(key: &[u8], n: usize, rank: usize, device: MockDevice) -> Result<CommMember, i32> {
    let deadline = Instant::now() + joint_timeout();
    let mut table = RENDEZVOUS.lock();
    let map = table.get_or_insert_with(HashMap::new);
    let p = map.entry(key.to_vec()).or_insert_with(|| Pending {
        n,
        devices: vec![None; n],
        shared: None,
        taken: 0,
    });
    if p.n != n || p.devices[rank].is_some() {
        return Err(hcode::E_PARA);
    }
    p.devices[rank] = Some(device);
    if p.devices.iter().all(Option::is_some) {
        let devices: Vec<MockDevice> = p.devices.iter().flatten().cloned().collect();
        let collectives = JointGroup::new(&devices).map_err(|e| hccl_code(&e))?;
        let pairs = PairGroups::new(&devices);
        p.shared = Some(Arc::new(CommShared {
            devices,
            collectives,
            pairs,
            async_error: AtomicI32::new(0),
            busy_destroys: AtomicI32::new(0),
        }));
        RENDEZVOUS_CV.notify_all();
    }
    loop {
        let map = table.get_or_insert_with(HashMap::new);
        let Some(p) = map.get_mut(key) else {
            return Err(hcode::E_INTERNAL);
        };
        if let Some(shared) = p.shared.clone() {
            p.taken += 1;
            if p.taken == p.n {
                map.remove(key);
            }
            return Ok(CommMember {
                shared,
                rank,
                stuck_calls: AtomicI32::new(0),
                blocked: AtomicI32::new(0),
                destroyed: std::sync::atomic::AtomicBool::new(false),
            });
        }
        if RENDEZVOUS_CV.wait_until(&mut table, deadline).timed_out() {
            if let Some(p) = table.as_mut().and_then(|m| m.get_mut(key)) {
                p.devices[rank] = None;
            }
            return Err(hcode::E_TIMEOUT);
        }
    }
}

/// `HcclCommDestroy`: `HCCL_E_AGAIN` on a busy communicator (the handle stays valid);
/// otherwise the handle goes, and the operations that involve this rank and have not run
/// yet (its collectives, its sends and receives) fail on every member involved (their
/// streams report `ACL_ERROR_RT_DEVICE_TASK_ABORT`) instead of waiting: "makes running
/// operations exit". Point-to-point between other ranks carries on.
#[unsafe(no_mangle)]
unsafe extern "C" fn HcclCommDestroy(comm: *mut c_void) -> i32 {
    guard("HcclCommDestroy", hcode::E_INTERNAL, || {
        let c = comm_of(comm)?;
        let busy = c
            .shared
            .busy_destroys
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then(|| n - 1)
            });
        if busy.is_ok() {
            return Err(hcode::E_AGAIN);
        }
        let reason = format!("HcclCommDestroy by rank {}", c.rank);
        c.shared.collectives.abort(&reason);
        // Only this rank's point-to-point: other pairs of the communicator carry on.
        for peer in (0..c.shared.devices.len()).filter(|&p| p != c.rank) {
            for (sender, receiver) in [(c.rank, peer), (peer, c.rank)] {
                if let Ok(g) = c.shared.pairs.get(sender, receiver) {
                    g.abort(&reason);
                }
            }
        }
        remove_handle(comm as usize);
        c.destroyed.store(true, Ordering::Release);
        drop(STUCK.lock());
        UNSTUCK.notify_all();
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn HcclGetCommAsyncError(comm: *mut c_void, async_error: *mut i32) -> i32 {
    guard("HcclGetCommAsyncError", hcode::E_INTERNAL, || {
        let c = comm_of(comm)?;
        if behaves(behaviour::ASYNC_ERROR_UNSUPPORTED) {
            return Err(hcode::E_NOT_SUPPORT);
        }
        let e = c.shared.async_error.load(Ordering::Relaxed);
        // SAFETY: null or valid for a write (contract); null is refused.
        unsafe { write_out(async_error, e, hcode::E_PTR) }
    })
}

/// Element size of an `HcclDataType`, `None` for values outside the enum.
pub(crate) fn elem_size(dtype: i32) -> Option<u64> {
    Some(match dtype {
        0 | 7 | 14..=17 => 1,
        1 | 3 | 8 | 11 => 2,
        2 | 4 | 9 => 4,
        5 | 6 | 10 => 8,
        12 => 16,
        _ => return None,
    })
}

/// The element type and operator of a reduction (`HcclAllReduce`, `HcclReduceScatter`),
/// reduced by the mock's typed bodies with core's reference arithmetic.
///
/// Types: the ones CANN documents for HCCL's reductions, INT8, INT32, INT64, FP16, FP32 and
/// BFP16 (INT16 too, but memreuse has no 16-bit integer type, so it is refused like the
/// rest). The documentation does not say every operator works on every one of them; this
/// stand-in takes the strictest reading that still lets a backend test each: all four
/// operators on the six types, `HCCL_E_NOT_SUPPORT` for any other type value of the enum,
/// and `HCCL_E_PARA` for values outside the enums.
fn reduction(dtype: i32, op: i32) -> Result<(DType, ReduceOp), i32> {
    let op = match op {
        0 => ReduceOp::Sum,
        1 => ReduceOp::Prod,
        2 => ReduceOp::Max,
        3 => ReduceOp::Min,
        _ => return Err(hcode::E_PARA),
    };
    let dtype = match dtype {
        0 => DType::I8,
        2 => DType::I32,
        3 => DType::F16,
        4 => DType::F32,
        5 => DType::I64,
        11 => DType::BF16,
        _ if elem_size(dtype).is_some() => return Err(hcode::E_NOT_SUPPORT),
        _ => return Err(hcode::E_PARA),
    };
    Ok((dtype, op))
}

/// Checks a collective's common arguments; returns the member and the stream.
pub(crate) fn prepare(
    comm: *mut c_void,
    stream: *mut c_void,
) -> Result<(Arc<CommMember>, MockStream), i32> {
    let c = comm_of(comm)?;
    let s = stream_of(stream).map_err(|_| hcode::E_PARA)?;
    block_if_stuck(&c)?;
    Ok((c, s.stream))
}

static STUCK: Mutex<()> = Mutex::new(());
static UNSTUCK: Condvar = Condvar::new();

/// Harness: a call stuck inside HCCL waits until `HcclCommDestroy` from another thread
/// makes it exit (`HCCL_E_INTERNAL`) or the joint timeout passes (`HCCL_E_TIMEOUT`).
fn block_if_stuck(c: &CommMember) -> Result<(), i32> {
    let stuck = c
        .stuck_calls
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n > 0).then(|| n - 1)
        });
    if stuck.is_err() {
        return Ok(());
    }
    let deadline = Instant::now() + joint_timeout();
    let mut guard = STUCK.lock();
    c.blocked.fetch_add(1, Ordering::AcqRel);
    let result = loop {
        if c.destroyed.load(Ordering::Acquire) {
            break Err(hcode::E_INTERNAL);
        }
        if UNSTUCK.wait_until(&mut guard, deadline).timed_out() {
            break Err(hcode::E_TIMEOUT);
        }
    };
    c.blocked.fetch_sub(1, Ordering::AcqRel);
    result
}

/// Harness: the next `n` calls on `comm` get stuck.
pub(crate) fn set_stuck_calls(comm: *mut c_void, n: i32) -> Result<(), i32> {
    comm_of(comm)?.stuck_calls.store(n, Ordering::Release);
    Ok(())
}

/// Harness: calls on `comm` stuck right now.
pub(crate) fn blocked_calls(comm: *mut c_void) -> Result<i32, i32> {
    Ok(comm_of(comm)?.blocked.load(Ordering::Acquire))
}

fn submit(c: &CommMember, stream: &MockStream, op: JointOp) -> Result<(), i32> {
    c.shared
        .collectives
        .submit(c.rank, stream, op)
        .map(|_| ())
        .map_err(|e| hccl_code(&e))
}

pub(crate) fn ptr(p: *const c_void) -> Result<DevicePtr, i32> {
    if p.is_null() {
        Err(hcode::E_PTR)
    } else {
        Ok(DevicePtr(p as usize as u64))
    }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn HcclAllReduce(
    send: *mut c_void,
    recv: *mut c_void,
    count: u64,
    dtype: i32,
    op: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    guard("HcclAllReduce", hcode::E_INTERNAL, || {
        let (c, s) = prepare(comm, stream)?;
        let (send, recv) = (ptr(send)?, ptr(recv)?);
        let (ty, red) = reduction(dtype, op)?;
        let n = count * ty.size_bytes();
        // In place (the usual case) declares one written region, as the mock does.
        let jop = JointOp::new(format!("HcclAllReduce({op})"));
        let jop = if send == recv {
            jop.access(MemAccess::write(recv, n))
        } else {
            jop.access(MemAccess::read(send, n))
                .access(MemAccess::write(recv, n))
        };
        // The mock's body writes each rank's last region: recv in both layouts.
        let jop = jop.body(move |m| collective::all_reduce_typed(m, ty, red));
        submit(&c, &s, jop)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn HcclReduceScatter(
    send: *mut c_void,
    recv: *mut c_void,
    recv_count: u64,
    dtype: i32,
    op: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    guard("HcclReduceScatter", hcode::E_INTERNAL, || {
        let (c, s) = prepare(comm, stream)?;
        let (send, recv) = (ptr(send)?, ptr(recv)?);
        let (ty, red) = reduction(dtype, op)?;
        let n = recv_count * ty.size_bytes();
        let size = c.shared.devices.len() as u64;
        let jop = JointOp::new(format!("HcclReduceScatter({op})"))
            .access(MemAccess::read(send, n * size))
            .access(MemAccess::write(recv, n))
            .body(move |m| collective::reduce_scatter_typed(m, ty, red));
        submit(&c, &s, jop)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn HcclAllGather(
    send: *mut c_void,
    recv: *mut c_void,
    send_count: u64,
    dtype: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    guard("HcclAllGather", hcode::E_INTERNAL, || {
        let (c, s) = prepare(comm, stream)?;
        let (send, recv) = (ptr(send)?, ptr(recv)?);
        let n = send_count * elem_size(dtype).ok_or(hcode::E_PARA)?;
        let size = c.shared.devices.len() as u64;
        let jop = JointOp::new("HcclAllGather")
            .access(MemAccess::read(send, n))
            .access(MemAccess::write(recv, n * size))
            .body(collective::all_gather);
        submit(&c, &s, jop)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn HcclAlltoAll(
    send: *const c_void,
    send_count: u64,
    send_type: i32,
    recv: *const c_void,
    recv_count: u64,
    recv_type: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    guard("HcclAlltoAll", hcode::E_INTERNAL, || {
        let (c, s) = prepare(comm, stream)?;
        let (send, recv) = (ptr(send)?, ptr(recv)?);
        if send_count != recv_count || send_type != recv_type {
            return Err(hcode::E_PARA);
        }
        let chunk = send_count * elem_size(send_type).ok_or(hcode::E_PARA)?;
        let n = chunk * c.shared.devices.len() as u64;
        let jop = JointOp::new("HcclAlltoAll")
            .access(MemAccess::read(send, n))
            .access(MemAccess::write(recv, n))
            .body(collective::all_to_all);
        submit(&c, &s, jop)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn HcclBroadcast(
    buf: *mut c_void,
    count: u64,
    dtype: i32,
    root: u32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    guard("HcclBroadcast", hcode::E_INTERNAL, || {
        let (c, s) = prepare(comm, stream)?;
        let buf = ptr(buf)?;
        let root = root as usize;
        if root >= c.shared.devices.len() {
            return Err(hcode::E_PARA);
        }
        let n = count * elem_size(dtype).ok_or(hcode::E_PARA)?;
        let access = if c.rank == root {
            MemAccess::read(buf, n)
        } else {
            MemAccess::write(buf, n)
        };
        let jop = JointOp::new(format!("HcclBroadcast(root {root})"))
            .access(access)
            .body(move |m| collective::broadcast(m, root));
        submit(&c, &s, jop)
    })
}

/// Not exported by the CANN 8.0-8.3 variant (feature `cann80`).
#[cfg_attr(not(feature = "cann80"), unsafe(no_mangle))]
unsafe extern "C" fn HcclBarrier(comm: *mut c_void, stream: *mut c_void) -> i32 {
    guard("HcclBarrier", hcode::E_INTERNAL, || {
        let (c, s) = prepare(comm, stream)?;
        if behaves(behaviour::BARRIER_UNSUPPORTED) {
            return Err(hcode::E_NOT_SUPPORT);
        }
        submit(&c, &s, JointOp::new("HcclBarrier"))
    })
}

/// Harness: the communicator's `k`-th collective fails on every member.
pub(crate) fn inject_collective_failure(comm: *mut c_void, k: u64) -> Result<(), i32> {
    comm_of(comm)?.shared.collectives.inject_failure(k);
    Ok(())
}

/// Harness: what `HcclGetCommAsyncError` reports from now on for this communicator.
pub(crate) fn set_async_error(comm: *mut c_void, code: i32) -> Result<(), i32> {
    comm_of(comm)?
        .shared
        .async_error
        .store(code, Ordering::Relaxed);
    Ok(())
}
