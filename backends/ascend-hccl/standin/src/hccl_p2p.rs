//! HCCL point-to-point: `HcclSend`/`HcclRecv` queued inside a group and matched at
//! `HcclGroupEnd` (outside a group each call is a group of one).
//!
//! # Safety (all functions)
//! Pointers are as HCCL documents them (see the `hccl` module).

#![allow(non_snake_case, clippy::missing_safety_doc)]
// The CANN 8.0-8.3 variant keeps the group code but exports none of it.
#![cfg_attr(feature = "cann80", allow(dead_code))]

use std::cell::RefCell;
use std::ffi::c_void;

use memreuse_mock::{JointGroup, JointOp, MemAccess, MockStream, collective};

use crate::hccl::{behaves, behaviour, elem_size, prepare, ptr};
use crate::{guard, hccl_code, hcode};

/// A send or receive waiting for `HcclGroupEnd`.
struct PendingP2p {
    group: JointGroup,
    share: usize,
    op: JointOp,
    stream: MockStream,
}

thread_local! {
    /// Group depth and the point-to-point ops issued inside the outermost group.
    static GROUP: RefCell<(u32, Vec<PendingP2p>)> = const { RefCell::new((0, Vec::new())) };
}

fn p2p(
    buf: *mut c_void,
    count: u64,
    dtype: i32,
    peer: u32,
    comm: *mut c_void,
    stream: *mut c_void,
    sending: bool,
) -> Result<(), i32> {
    let (c, s) = prepare(comm, stream)?;
    let buf = ptr(buf)?;
    let peer = peer as usize;
    if peer >= c.shared.devices.len() || peer == c.rank {
        return Err(hcode::E_PARA);
    }
    let n = count * elem_size(dtype).ok_or(hcode::E_PARA)?;
    let (sender, receiver, access) = if sending {
        (c.rank, peer, MemAccess::read(buf, n))
    } else {
        (peer, c.rank, MemAccess::write(buf, n))
    };
    let group = c
        .shared
        .pairs
        .get(sender, receiver)
        .map_err(|e| hccl_code(&e))?;
    let op = JointOp::new("HcclSend/HcclRecv")
        .access(access)
        .body(collective::send_recv);
    let share = usize::from(!sending);
    let mut op = Some(op);
    let queued = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.0 == 0 {
            return false;
        }
        if let Some(op) = op.take() {
            g.1.push(PendingP2p {
                group: group.clone(),
                share,
                op,
                stream: s,
            });
        }
        true
    });
    match op {
        Some(op) if !queued => group
            .submit(share, &s, op)
            .map(|_| ())
            .map_err(|e| hccl_code(&e)),
        _ => Ok(()),
    }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn HcclSend(
    buf: *mut c_void,
    count: u64,
    dtype: i32,
    dest_rank: u32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    guard("HcclSend", hcode::E_INTERNAL, || {
        p2p(buf, count, dtype, dest_rank, comm, stream, true)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn HcclRecv(
    buf: *mut c_void,
    count: u64,
    dtype: i32,
    src_rank: u32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    guard("HcclRecv", hcode::E_INTERNAL, || {
        p2p(buf, count, dtype, src_rank, comm, stream, false)
    })
}

/// Exported by `libhccl.so` in the default variant; by `libhcomm.so` (through
/// [`group_start_for_hcomm`]) in the CANN 8.5 variant; not at all in the 8.0-8.3 one.
#[cfg_attr(not(any(feature = "cann80", feature = "cann85")), unsafe(no_mangle))]
pub(crate) unsafe extern "C" fn HcclGroupStart() -> i32 {
    guard("HcclGroupStart", hcode::E_INTERNAL, || {
        if behaves(behaviour::GROUP_UNSUPPORTED) {
            return Err(hcode::E_NOT_SUPPORT);
        }
        GROUP.with(|g| g.borrow_mut().0 += 1);
        Ok(())
    })
}

/// See [`HcclGroupStart`].
#[cfg_attr(not(any(feature = "cann80", feature = "cann85")), unsafe(no_mangle))]
pub(crate) unsafe extern "C" fn HcclGroupEnd() -> i32 {
    guard("HcclGroupEnd", hcode::E_INTERNAL, || {
        let pending = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.0 == 0 {
                return Err(hcode::E_PARA);
            }
            g.0 -= 1;
            Ok(if g.0 == 0 {
                std::mem::take(&mut g.1)
            } else {
                Vec::new()
            })
        })?;
        // One batch per stream (a batch is one entry of one stream).
        let mut streams: Vec<MockStream> = Vec::new();
        for p in &pending {
            if !streams.contains(&p.stream) {
                streams.push(p.stream);
            }
        }
        let mut pending: Vec<Option<PendingP2p>> = pending.into_iter().map(Some).collect();
        for stream in streams {
            let mine: Vec<PendingP2p> = pending
                .iter_mut()
                .filter(|p| p.as_ref().is_some_and(|p| p.stream == stream))
                .filter_map(Option::take)
                .collect();
            let groups: Vec<JointGroup> = mine.iter().map(|p| p.group.clone()).collect();
            let ops: Vec<(&JointGroup, usize, JointOp)> = mine
                .into_iter()
                .zip(&groups)
                .map(|(p, g)| (g, p.share, p.op))
                .collect();
            JointGroup::submit_batch(&stream, ops).map_err(|e| hccl_code(&e))?;
        }
        Ok(())
    })
}
