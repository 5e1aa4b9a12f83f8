//! The communicator entries: each forwards to the mock's communicator
//! (`Communicator<MockDevice>`). An `MrComm` is a [`Comm`] box.

// The entries' parameters are named as in memreuse_backend.h's short signatures (c, i, o,
// n, t, s): one letter each, consistently.
#![allow(clippy::many_single_char_names)]

use memreuse_core::{Communicator, DType, DevicePtr, ReduceOp};
use memreuse_mock::{MockConfig, MockDevice, open_mock_world};
use memreuse_plugin::abi::{
    MR_ERR_INVALID_ARGUMENT, MR_OK, MR_OP_AVG, MR_OP_MAX, MR_OP_MIN, MR_OP_PROD, MR_OP_SUM, MrComm,
    MrDType, MrDevice, MrReduceOp, MrStatus, MrStream, MrWorldOptions,
};

use crate::device::{Dev, config, stream};
use crate::status::{backend_status, comm_done, fail, guard, null_argument};

/// One rank's communicator.
pub(crate) struct Comm {
    inner: Box<dyn Communicator<MockDevice>>,
}

/// # Safety
/// `c` is NULL or a communicator handle of this plugin, live for `'a`.
unsafe fn comm<'a>(c: *mut MrComm) -> Option<&'a Comm> {
    // SAFETY: per the contract above.
    unsafe { c.cast::<Comm>().as_ref() }
}

fn into_raw(inner: Box<dyn Communicator<MockDevice>>) -> *mut MrComm {
    Box::into_raw(Box::new(Comm { inner })).cast()
}

/// The host element type of an ABI code (the inverse of the host's `dtype_code`): the mock
/// moves every type and reduces each with core's reference arithmetic, as the direct mock.
fn dtype(code: MrDType) -> Result<DType, MrStatus> {
    DType::ALL
        .into_iter()
        .find(|&t| memreuse_plugin::dtype_code(t).ok() == Some(code))
        .ok_or_else(|| {
            fail(
                MR_ERR_INVALID_ARGUMENT,
                format!("element type code {code} is not an ABI 1 code"),
            )
        })
}

fn reduce_op(code: MrReduceOp) -> Result<ReduceOp, MrStatus> {
    match code {
        MR_OP_SUM => Ok(ReduceOp::Sum),
        MR_OP_PROD => Ok(ReduceOp::Prod),
        MR_OP_MAX => Ok(ReduceOp::Max),
        MR_OP_MIN => Ok(ReduceOp::Min),
        MR_OP_AVG => Ok(ReduceOp::Avg),
        c => Err(fail(
            MR_ERR_INVALID_ARGUMENT,
            format!("reduction code {c} is not an ABI 1 code"),
        )),
    }
}

/// Runs `body` on the communicator and the stream the host passed (NULL refused).
macro_rules! on_comm {
    ($call:literal, $c:expr, $s:expr, |$cm:ident, $st:ident| $body:expr) => {
        guard($call, || {
            // SAFETY: the host passes communicator and stream handles this plugin returned.
            let (Some($cm), Some($st)) = (unsafe { comm($c) }, unsafe { stream($s) }) else {
                return null_argument($call);
            };
            $body
        })
    };
    ($call:literal, $c:expr, |$cm:ident| $body:expr) => {
        guard($call, || {
            // SAFETY: the host passes communicator handles this plugin returned.
            let Some($cm) = (unsafe { comm($c) }) else {
                return null_argument($call);
            };
            $body
        })
    };
}

/// `?` for a status: returns it from the entry.
macro_rules! code {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(status) => return status,
        }
    };
}

pub(crate) unsafe extern "C" fn world_open(
    o: *const MrWorldOptions,
    devices: *mut *mut MrDevice,
    comms: *mut *mut MrComm,
) -> MrStatus {
    guard("world_open", || {
        // SAFETY: the host passes its options struct (or NULL, refused).
        let Some(o) = (unsafe { o.as_ref() }) else {
            return null_argument("world_open");
        };
        if o.struct_size < size_of::<MrWorldOptions>() || devices.is_null() || comms.is_null() {
            return null_argument("world_open");
        }
        let cfg = MockConfig {
            joint_timeout: std::time::Duration::from_millis(o.timeout_ms),
            first_device_index: 0,
            ..config(&o.device)
        };
        match open_mock_world(o.world_size as usize, cfg) {
            Ok(ranks) => {
                for (r, (device, c)) in ranks.into_iter().enumerate() {
                    // SAFETY: the host's arrays hold `world_size` slots each.
                    unsafe {
                        devices
                            .add(r)
                            .write(Box::into_raw(Box::new(Dev::new(device))).cast());
                        comms.add(r).write(into_raw(Box::new(c)));
                    }
                }
                MR_OK
            }
            Err(e) => backend_status(&e),
        }
    })
}

pub(crate) unsafe extern "C" fn comm_rank_size(
    c: *mut MrComm,
    rank: *mut u32,
    size: *mut u32,
) -> MrStatus {
    on_comm!("comm_rank_size", c, |cm| {
        if rank.is_null() || size.is_null() {
            return null_argument("comm_rank_size");
        }
        // SAFETY: the host's two out-pointers.
        unsafe {
            rank.write(cm.inner.rank() as u32);
            size.write(cm.inner.size() as u32);
        }
        MR_OK
    })
}

pub(crate) unsafe extern "C" fn comm_new_group(
    c: *mut MrComm,
    ranks: *const u32,
    n: usize,
    out: *mut *mut MrComm,
) -> MrStatus {
    on_comm!("comm_new_group", c, |cm| {
        if (ranks.is_null() && n > 0) || out.is_null() {
            return null_argument("comm_new_group");
        }
        // SAFETY: the host's array of `n` ranks.
        let list: Vec<usize> = unsafe { std::slice::from_raw_parts(ranks, n) }
            .iter()
            .map(|&r| r as usize)
            .collect();
        match cm.inner.new_group(&list) {
            Ok(group) => {
                // A non-member gets MR_OK with NULL (header rule).
                let raw = group.map_or(std::ptr::null_mut(), into_raw);
                // SAFETY: the host's out-pointer, checked non-NULL above.
                unsafe { out.write(raw) };
                MR_OK
            }
            Err(e) => comm_done(Err(e)),
        }
    })
}

pub(crate) unsafe extern "C" fn comm_destroy(c: *mut MrComm) {
    let _ = guard("comm_destroy", || {
        if !c.is_null() {
            // SAFETY: a communicator this plugin returned, destroyed once (header rule).
            drop(unsafe { Box::from_raw(c.cast::<Comm>()) });
        }
        MR_OK
    });
}

pub(crate) unsafe extern "C" fn comm_abort(c: *mut MrComm) {
    let _ = on_comm!("comm_abort", c, |cm| {
        cm.inner.abort();
        MR_OK
    });
}

pub(crate) unsafe extern "C" fn comm_async_error(c: *mut MrComm) -> MrStatus {
    on_comm!("comm_async_error", c, |cm| match cm.inner.async_error() {
        None => MR_OK,
        Some(e) => comm_done(Err(e)),
    })
}

pub(crate) unsafe extern "C" fn all_reduce(
    c: *mut MrComm,
    buf: u64,
    n: u64,
    t: MrDType,
    op: MrReduceOp,
    s: *mut MrStream,
) -> MrStatus {
    on_comm!("all_reduce", c, s, |cm, st| {
        let (t, op) = (code!(dtype(t)), code!(reduce_op(op)));
        comm_done(cm.inner.all_reduce(DevicePtr(buf), n as usize, t, op, st))
    })
}

pub(crate) unsafe extern "C" fn all_gather(
    c: *mut MrComm,
    i: u64,
    o: u64,
    n: u64,
    t: MrDType,
    s: *mut MrStream,
) -> MrStatus {
    on_comm!("all_gather", c, s, |cm, st| {
        comm_done(
            cm.inner
                .all_gather(DevicePtr(i), DevicePtr(o), n as usize, code!(dtype(t)), st),
        )
    })
}

pub(crate) unsafe extern "C" fn reduce_scatter(
    c: *mut MrComm,
    i: u64,
    o: u64,
    n: u64,
    t: MrDType,
    op: MrReduceOp,
    s: *mut MrStream,
) -> MrStatus {
    on_comm!("reduce_scatter", c, s, |cm, st| {
        let (t, op) = (code!(dtype(t)), code!(reduce_op(op)));
        comm_done(
            cm.inner
                .reduce_scatter(DevicePtr(i), DevicePtr(o), n as usize, t, op, st),
        )
    })
}

pub(crate) unsafe extern "C" fn all_to_all(
    c: *mut MrComm,
    i: u64,
    o: u64,
    n: u64,
    t: MrDType,
    s: *mut MrStream,
) -> MrStatus {
    on_comm!("all_to_all", c, s, |cm, st| {
        comm_done(
            cm.inner
                .all_to_all(DevicePtr(i), DevicePtr(o), n as usize, code!(dtype(t)), st),
        )
    })
}

pub(crate) unsafe extern "C" fn broadcast(
    c: *mut MrComm,
    buf: u64,
    n: u64,
    t: MrDType,
    root: u32,
    s: *mut MrStream,
) -> MrStatus {
    on_comm!("broadcast", c, s, |cm, st| {
        comm_done(cm.inner.broadcast(
            DevicePtr(buf),
            n as usize,
            code!(dtype(t)),
            root as usize,
            st,
        ))
    })
}

pub(crate) unsafe extern "C" fn send(
    c: *mut MrComm,
    buf: u64,
    n: u64,
    t: MrDType,
    peer: u32,
    s: *mut MrStream,
) -> MrStatus {
    on_comm!("send", c, s, |cm, st| {
        comm_done(cm.inner.send(
            DevicePtr(buf),
            n as usize,
            code!(dtype(t)),
            peer as usize,
            st,
        ))
    })
}

pub(crate) unsafe extern "C" fn recv(
    c: *mut MrComm,
    buf: u64,
    n: u64,
    t: MrDType,
    peer: u32,
    s: *mut MrStream,
) -> MrStatus {
    on_comm!("recv", c, s, |cm, st| {
        comm_done(cm.inner.recv(
            DevicePtr(buf),
            n as usize,
            code!(dtype(t)),
            peer as usize,
            st,
        ))
    })
}

pub(crate) unsafe extern "C" fn group_start(c: *mut MrComm) -> MrStatus {
    on_comm!("group_start", c, |cm| comm_done(cm.inner.group_start()))
}

pub(crate) unsafe extern "C" fn group_end(c: *mut MrComm) -> MrStatus {
    on_comm!("group_end", c, |cm| comm_done(cm.inner.group_end()))
}

pub(crate) unsafe extern "C" fn barrier(c: *mut MrComm, s: *mut MrStream) -> MrStatus {
    on_comm!("barrier", c, s, |cm, st| comm_done(cm.inner.barrier(st)))
}
