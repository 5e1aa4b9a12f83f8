//! NCCL operations: `ncclAllReduce`, `ncclAllGather`, `ncclReduceScatter`,
//! `ncclBroadcast`, `ncclAlltoAll` (not in the `old-nccl` profile), `ncclSend`, `ncclRecv`,
//! `ncclGroupStart`, `ncclGroupEnd`, each a joint op of the mock on the communicator's
//! group (point-to-point: on the (sender, receiver) pair group), so every access goes
//! through the race detector and results are the mock communicator's.
//!
//! Rules: the communicator is initialised and not finalized (`ncclInvalidUsage`); the
//! stream is a stream of the rank's device (`ncclInvalidArgument`); buffers lie in device
//! memory of that device (`ncclInvalidArgument`) with access granted (virtual memory:
//! `ncclUnhandledCudaError`); data types and reduction operations are values of the enums
//! and supported for the type (`ncclInvalidArgument`, see `reduce.rs`); a root or peer is a
//! rank of the communicator (`ncclInvalidArgument`; to oneself: see `self_p2p`). The
//! `k`-th collective of every rank must have the same kind, count, type, operation and root:
//! a mismatch (which hangs real NCCL) fails that collective on every rank and is reported
//! by `ncclCommGetAsyncError` as `ncclInvalidUsage` once the timeout passed. Inside
//! `ncclGroupStart`/`ncclGroupEnd` operations are queued and submitted at the outermost
//! `ncclGroupEnd`, one batch per stream, where sends and receives are matched;
//! `ncclGroupEnd` without a start is `ncclInvalidUsage`.

#![allow(non_snake_case, clippy::missing_safety_doc)]
#![cfg_attr(feature = "old-nccl", allow(dead_code))]

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use memreuse_core::{Backend, BackendError, DevicePtr};
use memreuse_mock::{JointGroup, JointOp, MemAccess, collective};

use crate::codes::{NCCL_INTERNAL_ERROR, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE};
use crate::nccl::{Member, Shared, member};
use crate::reduce;
use crate::state::{StreamH, guard};

/// `ncclUnhandledCudaError`.
const NCCL_UNHANDLED_CUDA_ERROR: u32 = 1;

struct Call {
    m: Arc<Member>,
    shared: Arc<Shared>,
    s: StreamH,
}

fn prepare(comm: usize, stream: usize) -> Result<Call, u32> {
    let m = member(comm)?;
    let shared = Arc::clone(m.ready()?);
    if m.finalized.load(Ordering::Acquire) {
        return Err(NCCL_INVALID_USAGE);
    }
    let s = crate::stream::stream_of(stream).map_err(|_| NCCL_INVALID_ARGUMENT)?;
    if s.index != m.device_index {
        return Err(NCCL_INVALID_ARGUMENT);
    }
    Ok(Call { m, shared, s })
}

/// A device buffer of `bytes` (null with a non-zero count refused; access checked).
fn buffer(c: &Call, p: *const c_void, bytes: u64) -> Result<DevicePtr, u32> {
    if p.is_null() && bytes > 0 {
        return Err(NCCL_INVALID_ARGUMENT);
    }
    crate::vm::check_access(c.s.index, p as u64, bytes).map_err(|_| NCCL_UNHANDLED_CUDA_ERROR)?;
    Ok(DevicePtr(p as u64))
}

fn mock_code(e: &BackendError) -> u32 {
    match e {
        BackendError::InvalidArgument { .. } => NCCL_INVALID_ARGUMENT,
        _ => NCCL_INTERNAL_ERROR,
    }
}

/// Records the end of the work just enqueued on `c.s`, for `ncclCommGetAsyncError`.
fn track(m: &Member, s: &StreamH) {
    if let Ok(e) = s.device.create_event()
        && s.device.record_event(&e, &s.stream).is_ok()
    {
        m.pending.lock().push((s.device.clone(), e));
    }
}

/// A queued share of a group.
struct Queued {
    group: JointGroup,
    share: usize,
    op: JointOp,
    s: StreamH,
    m: Arc<Member>,
}

thread_local! {
    /// Group depth and the operations issued inside the outermost group.
    static GROUP: RefCell<(u32, Vec<Queued>)> = const { RefCell::new((0, Vec::new())) };
}

/// Submits now, or queues inside a group.
fn submit(c: &Call, group: &JointGroup, share: usize, op: JointOp) -> Result<(), u32> {
    let mut op = Some(op);
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.0 > 0
            && let Some(op) = op.take()
        {
            g.1.push(Queued {
                group: group.clone(),
                share,
                op,
                s: c.s.clone(),
                m: Arc::clone(&c.m),
            });
        }
    });
    let Some(op) = op else { return Ok(()) };
    group
        .submit(share, &c.s.stream, op)
        .map_err(|e| mock_code(&e))?;
    track(&c.m, &c.s);
    Ok(())
}

/// A collective: numbered, its signature compared with the other ranks', submitted.
fn collective_op(c: &Call, signature: &str, op: JointOp) -> Result<(), u32> {
    let k = c.m.issued.fetch_add(1, Ordering::AcqRel);
    let n = c.shared.devices.len();
    let matches = {
        let mut sigs = c.shared.signatures.lock();
        let entry = sigs.entry(k).or_insert_with(|| (signature.to_owned(), 0));
        entry.1 += 1;
        let same = entry.0 == signature;
        if entry.1 == n {
            sigs.remove(&k);
        }
        same
    };
    let op = if matches {
        op
    } else {
        c.shared.mismatch.lock().get_or_insert_with(Instant::now);
        // A name the other ranks do not use: the mock fails the op on every rank.
        JointOp::new(format!("{signature} (mismatched)"))
    };
    submit(c, &c.shared.collectives, c.m.rank, op)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    op: u32,
    comm: usize,
    stream: usize,
) -> u32 {
    guard("ncclAllReduce", NCCL_INTERNAL_ERROR, || {
        let c = prepare(comm, stream)?;
        reduce::check(datatype, op)?;
        let n = count as u64 * reduce::elem_size(datatype)?;
        let (send, recv) = (buffer(&c, send, n)?, buffer(&c, recv, n)?);
        let jop = JointOp::new("ncclAllReduce");
        let jop = if send == recv {
            jop.access(MemAccess::write(recv, n))
        } else {
            jop.access(MemAccess::read(send, n))
                .access(MemAccess::write(recv, n))
        };
        let jop = jop.body(move |m| reduce::all_reduce(m, datatype, op));
        collective_op(
            &c,
            &format!("ncclAllReduce({count} x {datatype}, op {op})"),
            jop,
        )
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclReduceScatter(
    send: *const c_void,
    recv: *mut c_void,
    recv_count: usize,
    datatype: u32,
    op: u32,
    comm: usize,
    stream: usize,
) -> u32 {
    guard("ncclReduceScatter", NCCL_INTERNAL_ERROR, || {
        let c = prepare(comm, stream)?;
        reduce::check(datatype, op)?;
        let n = recv_count as u64 * reduce::elem_size(datatype)?;
        let size = c.shared.devices.len() as u64;
        let (send, recv) = (buffer(&c, send, n * size)?, buffer(&c, recv, n)?);
        let jop = JointOp::new("ncclReduceScatter")
            .access(MemAccess::read(send, n * size))
            .access(MemAccess::write(recv, n))
            .body(move |m| reduce::reduce_scatter(m, datatype, op));
        collective_op(
            &c,
            &format!("ncclReduceScatter({recv_count} x {datatype}, op {op})"),
            jop,
        )
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclAllGather(
    send: *const c_void,
    recv: *mut c_void,
    send_count: usize,
    datatype: u32,
    comm: usize,
    stream: usize,
) -> u32 {
    guard("ncclAllGather", NCCL_INTERNAL_ERROR, || {
        let c = prepare(comm, stream)?;
        let n = send_count as u64 * reduce::elem_size(datatype)?;
        let size = c.shared.devices.len() as u64;
        let (send, recv) = (buffer(&c, send, n)?, buffer(&c, recv, n * size)?);
        let jop = JointOp::new("ncclAllGather")
            .access(MemAccess::read(send, n))
            .access(MemAccess::write(recv, n * size))
            .body(collective::all_gather);
        collective_op(
            &c,
            &format!("ncclAllGather({send_count} x {datatype})"),
            jop,
        )
    })
}

/// Not exported by the `old-nccl` profile (NCCL < 2.28).
#[cfg_attr(not(feature = "old-nccl"), unsafe(no_mangle))]
unsafe extern "C" fn ncclAlltoAll(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    comm: usize,
    stream: usize,
) -> u32 {
    guard("ncclAlltoAll", NCCL_INTERNAL_ERROR, || {
        let c = prepare(comm, stream)?;
        let n = count as u64 * reduce::elem_size(datatype)? * c.shared.devices.len() as u64;
        let (send, recv) = (buffer(&c, send, n)?, buffer(&c, recv, n)?);
        let jop = JointOp::new("ncclAlltoAll")
            .access(MemAccess::read(send, n))
            .access(MemAccess::write(recv, n))
            .body(collective::all_to_all);
        collective_op(&c, &format!("ncclAlltoAll({count} x {datatype})"), jop)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclBroadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    root: c_int,
    comm: usize,
    stream: usize,
) -> u32 {
    guard("ncclBroadcast", NCCL_INTERNAL_ERROR, || {
        let c = prepare(comm, stream)?;
        let root = usize::try_from(root)
            .ok()
            .filter(|&r| r < c.shared.devices.len())
            .ok_or(NCCL_INVALID_ARGUMENT)?;
        let n = count as u64 * reduce::elem_size(datatype)?;
        let recv = buffer(&c, recv, n)?;
        // The mock's broadcast is in place: an out-of-place root is not modelled.
        if c.m.rank == root && buffer(&c, send, n)? != recv {
            return Err(NCCL_INVALID_USAGE);
        }
        let access = if c.m.rank == root {
            MemAccess::read(recv, n)
        } else {
            MemAccess::write(recv, n)
        };
        let jop = JointOp::new("ncclBroadcast")
            .access(access)
            .body(move |m| collective::broadcast(m, root));
        collective_op(
            &c,
            &format!("ncclBroadcast({count} x {datatype}, root {root})"),
            jop,
        )
    })
}

fn p2p(
    buf: *const c_void,
    count: usize,
    datatype: u32,
    peer: c_int,
    comm: usize,
    stream: usize,
    sending: bool,
) -> Result<(), u32> {
    let c = prepare(comm, stream)?;
    let peer = usize::try_from(peer)
        .ok()
        .filter(|&p| p < c.shared.devices.len())
        .ok_or(NCCL_INVALID_ARGUMENT)?;
    let n = count as u64 * reduce::elem_size(datatype)?;
    let buf = buffer(&c, buf, n)?;
    if peer == c.m.rank {
        return self_p2p(&c, buf, n, sending);
    }
    let (sender, receiver, access) = if sending {
        (c.m.rank, peer, MemAccess::read(buf, n))
    } else {
        (peer, c.m.rank, MemAccess::write(buf, n))
    };
    let group = c
        .shared
        .pairs
        .get(sender, receiver)
        .map_err(|e| mock_code(&e))?;
    let op = JointOp::new("ncclSend/ncclRecv")
        .access(access)
        .body(collective::send_recv);
    submit(&c, &group, usize::from(!sending), op)
}

/// A send to or a receive from this rank itself (NCCL's own all-to-all example issues them
/// inside a group): the k-th send to self pairs with the k-th receive from self, as a
/// device-to-device copy on the receive's stream once both were issued. Outside a group a
/// lone one stays pending (real NCCL would block).
fn self_p2p(c: &Call, buf: DevicePtr, bytes: u64, sending: bool) -> Result<(), u32> {
    let mut q = c.m.self_p2p.lock();
    let (recvs, sends) = &mut *q;
    let (mine, other) = if sending {
        (sends, recvs)
    } else {
        (recvs, sends)
    };
    let Some((peer_buf, peer_bytes, peer_stream)) = other.pop_front() else {
        mine.push_back((buf, bytes, c.s.clone()));
        return Ok(());
    };
    if peer_bytes != bytes {
        return Err(NCCL_INVALID_USAGE);
    }
    let (dst, src, s) = if sending {
        (peer_buf, buf, peer_stream)
    } else {
        (buf, peer_buf, c.s.clone())
    };
    if bytes == 0 {
        return Ok(());
    }
    s.device
        .copy_device_to_device(dst, src, bytes, &s.stream)
        .map_err(|e| mock_code(&e))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclSend(
    send: *const c_void,
    count: usize,
    datatype: u32,
    peer: c_int,
    comm: usize,
    stream: usize,
) -> u32 {
    guard("ncclSend", NCCL_INTERNAL_ERROR, || {
        p2p(send, count, datatype, peer, comm, stream, true)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclRecv(
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    peer: c_int,
    comm: usize,
    stream: usize,
) -> u32 {
    guard("ncclRecv", NCCL_INTERNAL_ERROR, || {
        p2p(recv, count, datatype, peer, comm, stream, false)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclGroupStart() -> u32 {
    guard("ncclGroupStart", NCCL_INTERNAL_ERROR, || {
        GROUP.with(|g| g.borrow_mut().0 += 1);
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclGroupEnd() -> u32 {
    guard("ncclGroupEnd", NCCL_INTERNAL_ERROR, || {
        let queued = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.0 == 0 {
                return Err(NCCL_INVALID_USAGE);
            }
            g.0 -= 1;
            Ok(if g.0 == 0 {
                std::mem::take(&mut g.1)
            } else {
                Vec::new()
            })
        })?;
        // One batch per stream (a batch is one entry of one stream).
        let mut queued: Vec<Option<Queued>> = queued.into_iter().map(Some).collect();
        while let Some(first) = queued.iter().flatten().next() {
            let stream = first.s.clone();
            let mine: Vec<Queued> = queued
                .iter_mut()
                .filter(|q| q.as_ref().is_some_and(|q| q.s.stream == stream.stream))
                .filter_map(Option::take)
                .collect();
            let members: Vec<Arc<Member>> = mine.iter().map(|q| Arc::clone(&q.m)).collect();
            let groups: Vec<JointGroup> = mine.iter().map(|q| q.group.clone()).collect();
            let ops: Vec<(&JointGroup, usize, JointOp)> = mine
                .into_iter()
                .zip(&groups)
                .map(|(q, g)| (g, q.share, q.op))
                .collect();
            JointGroup::submit_batch(&stream.stream, ops).map_err(|e| mock_code(&e))?;
            if let Some(m) = members.first() {
                track(m, &stream);
            }
        }
        Ok(())
    })
}
