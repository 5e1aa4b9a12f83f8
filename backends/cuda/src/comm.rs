//! [`NcclCommunicator`]: one rank of an NCCL communicator on one [`CudaDevice`].
//!
//! Calls go through cudarc's `nccl::result` / `nccl::sys` layer with raw communicators
//! (cudarc's safe `Comm` panics in `Drop`). `all_to_all` uses `ncclAlltoAll` when the loaded
//! NCCL is 2.28 or newer and grouped send/recv otherwise (a missing symbol would panic);
//! `barrier` is a one-element all-reduce, as in PyTorch; `new_group` is `ncclCommSplit`.
//! NCCL operations have no timeout of their own: a peer that never arrives shows up as a
//! work that never completes (the process group's timeout) and is cleared by `abort`.
//! Communicator *init* can have one (`MEMREUSE_NCCL_INIT_TIMEOUT_S`, see `nccl_init`).

use std::ffi::c_int;
use std::ptr;
use std::time::Duration;

use cudarc::nccl::result as nccl;
use cudarc::nccl::sys;
use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp};
use memreuse_core::{Backend, DevicePtr};
use parking_lot::{Mutex, RwLock};

use crate::device::{CudaDevice, CudaStreamHandle};
use crate::error::{self, nccl_comm};
use crate::nccl_args::{chunk, dev, dtype, raw_stream, reduces, reduction};
use crate::nccl_init::{wait_ready, wait_settled};
use crate::p2p::{P2p, Pending, grouped};

mod close;
mod fresh_id;
mod settle;

pub(crate) use fresh_id::SplitFamily;

/// `NCCL_SPLIT_NOCOLOR` from `nccl.h`: this rank joins no sub-communicator.
const NCCL_SPLIT_NOCOLOR: c_int = -1;
/// First NCCL version (`NCCL_VERSION_CODE`) with `ncclAlltoAll`.
pub const NCCL_ALLTOALL_VERSION: i32 = 22_800;

/// An owned `ncclComm_t`.
struct RawComm(sys::ncclComm_t);

// SAFETY: an NCCL communicator handle may be used from any thread (NCCL serializes
// internally); this newtype only carries the pointer, every use is behind `RwLock`.
unsafe impl Send for RawComm {}
// SAFETY: as above; shared access only reads the pointer value.
unsafe impl Sync for RawComm {}

/// The loaded NCCL's version code (e.g. 22_805 for 2.28.5).
pub fn nccl_version() -> Result<i32, CommError> {
    nccl::get_nccl_version().map_err(|e| nccl_comm("ncclGetVersion", &e))
}

/// One rank's member of an NCCL communicator (the world, or a sub-group).
pub struct NcclCommunicator {
    device: CudaDevice,
    comm: RwLock<Option<RawComm>>,
    rank: usize,
    size: usize,
    /// NCCL 2.28+ that exports `ncclAlltoAll` (probed by name: a missing symbol panics).
    native_all_to_all: bool,
    /// One f32 for `barrier`, allocated at the first barrier: a communicator takes no
    /// device memory the allocator did not hand out until it needs it (a device filled to
    /// its capacity by the allocator must not fail because a communicator exists).
    scratch: Mutex<Option<DevicePtr>>,
    pending: Mutex<Option<Vec<Pending>>>,
    aborted: Mutex<Option<String>>,
    /// `Some(limit)` for a non-blocking communicator: after every call, its state is polled
    /// while `ncclInProgress`, for at most `limit`, before the next call may run.
    nonblocking: Option<Duration>,
    /// The in-process world's shared ids for `new_group` without `ncclCommSplit`.
    family: Option<std::sync::Arc<SplitFamily>>,
    /// `new_group` calls so far (numbers the fresh ids).
    splits: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for NcclCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NcclCommunicator(rank {}/{} on {:?})",
            self.rank, self.size, self.device
        )
    }
}

impl NcclCommunicator {
    /// Wraps a communicator created for `device` (takes ownership of `comm`);
    /// `nonblocking` as the field says (`None` for a blocking communicator).
    ///
    /// # Safety
    /// `comm` is a live, initialized NCCL communicator of `size` ranks in which this
    /// process is `rank`, created on `device`, and owned by nobody else.
    pub(crate) unsafe fn from_raw(
        device: CudaDevice,
        comm: sys::ncclComm_t,
        rank: usize,
        size: usize,
        nonblocking: Option<Duration>,
    ) -> Result<NcclCommunicator, CommError> {
        // On a failure below nobody else will ever see `comm`: abort it rather than leak it
        // (and its device memory and proxy threads).
        let abort = |e: CommError| {
            // SAFETY: `comm` is live and owned here alone (contract of this function).
            let _ = unsafe { nccl::comm_abort(comm) };
            e
        };
        let version = nccl_version().map_err(abort)?;
        let owned = RawComm(comm);
        Ok(NcclCommunicator {
            device,
            comm: RwLock::new(Some(owned)),
            rank,
            size,
            native_all_to_all: version >= NCCL_ALLTOALL_VERSION
                && crate::standin::nccl_has("ncclAlltoAll"),
            scratch: Mutex::new(None),
            pending: Mutex::new(None),
            aborted: Mutex::new(None),
            nonblocking,
            family: None,
            splits: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Makes this rank a member of an in-process world's family (see [`SplitFamily`]).
    pub(crate) fn set_family(&mut self, family: std::sync::Arc<SplitFamily>) {
        self.family = Some(family);
    }

    /// The rank's device.
    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    /// True when `new_group` uses `ncclCommSplit`; false when the loaded NCCL lacks it and
    /// sub-groups come from a fresh unique id instead (in-process worlds only).
    pub fn splits_natively(&self) -> bool {
        crate::standin::nccl_has("ncclCommSplit")
    }

    /// True when `all_to_all` uses `ncclAlltoAll` (NCCL 2.28+), false for grouped send/recv.
    pub fn uses_native_all_to_all(&self) -> bool {
        self.native_all_to_all
    }

    fn check_alive(&self) -> Result<(), CommError> {
        match &*self.aborted.lock() {
            Some(reason) => Err(CommError::Aborted {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn check_buf(
        &self,
        call: &'static str,
        p: DevicePtr,
        count: usize,
        dt: DType,
    ) -> Result<(), CommError> {
        let bytes = (count as u64).checked_mul(dt.size_bytes()).ok_or_else(|| {
            CommError::invalid_argument(call, format!("{count} elements overflow"))
        })?;
        if bytes > 0 {
            self.device.check_range(call, p, bytes)?;
        }
        Ok(())
    }

    fn check_stream(&self, call: &'static str, s: &CudaStreamHandle) -> Result<(), CommError> {
        if std::sync::Arc::ptr_eq(s.raw().context(), self.device.context()) {
            Ok(())
        } else {
            Err(CommError::invalid_argument(
                call,
                "stream belongs to another device",
            ))
        }
    }

    fn check_rank(&self, call: &'static str, what: &str, r: usize) -> Result<(), CommError> {
        if r < self.size {
            Ok(())
        } else {
            Err(CommError::invalid_argument(
                call,
                format!("{what} {r} outside the group of {}", self.size),
            ))
        }
    }

    /// Runs NCCL calls on the live communicator, context bound, outside any open group.
    fn run(
        &self,
        call: &'static str,
        f: impl FnOnce(sys::ncclComm_t) -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        self.check_alive()?;
        if self.pending.lock().is_some() {
            return Err(CommError::invalid_argument(
                call,
                "collectives inside group_start/group_end are not supported",
            ));
        }
        self.device.bind()?;
        let guard = self.comm.read();
        let Some(comm) = guard.as_ref() else {
            return Err(CommError::Aborted {
                reason: "communicator aborted".to_owned(),
            });
        };
        let result = f(comm.0);
        if let Some(limit) = self.nonblocking {
            self.settle(call, comm.0, limit)?;
        }
        result
    }

    fn p2p(
        &self,
        kind: P2p,
        buf: DevicePtr,
        count: usize,
        dt: DType,
        peer: usize,
        stream: &CudaStreamHandle,
    ) -> Result<(), CommError> {
        let call = match kind {
            P2p::Send => "send",
            P2p::Recv => "recv",
        };
        self.check_alive()?;
        self.check_stream(call, stream)?;
        self.check_rank(call, "peer", peer)?;
        if peer == self.rank {
            return Err(CommError::invalid_argument(call, "peer is this rank"));
        }
        self.check_buf(call, buf, count, dt)?;
        let op = Pending {
            kind,
            buf,
            count,
            dtype: dtype(dt)?,
            peer,
            stream: stream.clone(),
        };
        if let Some(ops) = self.pending.lock().as_mut() {
            ops.push(op);
            return Ok(());
        }
        self.run(call, |c| grouped(c, std::slice::from_ref(&op)))
    }
}

/// Maps a `Result` of cudarc's NCCL layer.
fn nccl_ok(
    call: &'static str,
    r: Result<nccl::NcclStatus, nccl::NcclError>,
) -> Result<(), CommError> {
    r.map(|_| ()).map_err(|e| nccl_comm(call, &e))
}

impl Communicator<CudaDevice> for NcclCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn reduces(&self, dt: DType, o: ReduceOp) -> bool {
        reduces(dt, o)
    }

    fn all_reduce(
        &self,
        buf: DevicePtr,
        count: usize,
        dt: DType,
        o: ReduceOp,
        stream: &CudaStreamHandle,
    ) -> Result<(), CommError> {
        self.check_stream("all_reduce", stream)?;
        self.check_buf("all_reduce", buf, count, dt)?;
        let (t, nccl_op) = reduction("all_reduce", dt, o)?;
        self.run("ncclAllReduce", |c| {
            // SAFETY: `buf` holds `count` elements in a live allocation of this device
            // (checked), in place is allowed by NCCL, the stream belongs to the device.
            let r = unsafe {
                nccl::all_reduce(dev(buf), dev(buf), count, t, nccl_op, c, raw_stream(stream))
            };
            nccl_ok("ncclAllReduce", r)
        })
    }

    fn all_gather(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dt: DType,
        stream: &CudaStreamHandle,
    ) -> Result<(), CommError> {
        self.check_stream("all_gather", stream)?;
        self.check_buf("all_gather", input, count, dt)?;
        self.check_buf("all_gather", output, count.saturating_mul(self.size), dt)?;
        let t = dtype(dt)?;
        self.run("ncclAllGather", |c| {
            // SAFETY: input holds `count` and output `count * size` elements in live
            // allocations (checked); the stream belongs to the device.
            let r = unsafe {
                nccl::all_gather(dev(input), dev(output), count, t, c, raw_stream(stream))
            };
            nccl_ok("ncclAllGather", r)
        })
    }

    fn reduce_scatter(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dt: DType,
        o: ReduceOp,
        stream: &CudaStreamHandle,
    ) -> Result<(), CommError> {
        self.check_stream("reduce_scatter", stream)?;
        self.check_buf("reduce_scatter", input, count.saturating_mul(self.size), dt)?;
        self.check_buf("reduce_scatter", output, count, dt)?;
        let (t, nccl_op) = reduction("reduce_scatter", dt, o)?;
        self.run("ncclReduceScatter", |c| {
            // SAFETY: input holds `count * size` and output `count` elements in live
            // allocations (checked); the stream belongs to the device.
            let r = unsafe {
                nccl::reduce_scatter(
                    dev(input),
                    dev(output),
                    count,
                    t,
                    nccl_op,
                    c,
                    raw_stream(stream),
                )
            };
            nccl_ok("ncclReduceScatter", r)
        })
    }

    fn all_to_all(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dt: DType,
        stream: &CudaStreamHandle,
    ) -> Result<(), CommError> {
        self.check_stream("all_to_all", stream)?;
        self.check_buf("all_to_all", input, count.saturating_mul(self.size), dt)?;
        self.check_buf("all_to_all", output, count.saturating_mul(self.size), dt)?;
        let t = dtype(dt)?;
        if self.uses_native_all_to_all() {
            return self.run("ncclAlltoAll", |c| {
                // SAFETY: both buffers hold `count * size` elements in live allocations
                // (checked); `ncclAlltoAll` exists in the loaded NCCL (version checked).
                let r = unsafe {
                    sys::ncclAlltoAll(dev(input), dev(output), count, t, c, raw_stream(stream))
                };
                nccl_ok("ncclAlltoAll", r.result())
            });
        }
        let ops: Vec<Pending> = (0..self.size)
            .flat_map(|peer| {
                [(P2p::Send, input), (P2p::Recv, output)].map(|(kind, base)| Pending {
                    kind,
                    buf: chunk(base, peer, count, dt),
                    count,
                    dtype: t,
                    peer,
                    stream: stream.clone(),
                })
            })
            .collect();
        self.run("all_to_all", |c| grouped(c, &ops))
    }

    fn broadcast(
        &self,
        buf: DevicePtr,
        count: usize,
        dt: DType,
        root: usize,
        stream: &CudaStreamHandle,
    ) -> Result<(), CommError> {
        self.check_stream("broadcast", stream)?;
        self.check_rank("broadcast", "root", root)?;
        self.check_buf("broadcast", buf, count, dt)?;
        let t = dtype(dt)?;
        self.run("ncclBroadcast", |c| {
            // SAFETY: `buf` holds `count` elements in a live allocation (checked), in place
            // is allowed, `root` is a rank of the group (checked).
            let r = unsafe {
                nccl::broadcast(
                    dev(buf),
                    dev(buf),
                    count,
                    t,
                    root as c_int,
                    c,
                    raw_stream(stream),
                )
            };
            nccl_ok("ncclBroadcast", r)
        })
    }

    fn send(
        &self,
        buf: DevicePtr,
        count: usize,
        dt: DType,
        peer: usize,
        stream: &CudaStreamHandle,
    ) -> Result<(), CommError> {
        self.p2p(P2p::Send, buf, count, dt, peer, stream)
    }

    fn recv(
        &self,
        buf: DevicePtr,
        count: usize,
        dt: DType,
        peer: usize,
        stream: &CudaStreamHandle,
    ) -> Result<(), CommError> {
        self.p2p(P2p::Recv, buf, count, dt, peer, stream)
    }

    fn group_start(&self) -> Result<(), CommError> {
        self.check_alive()?;
        let mut pending = self.pending.lock();
        if pending.is_some() {
            return Err(CommError::invalid_argument(
                "group_start",
                "a group is already open",
            ));
        }
        *pending = Some(Vec::new());
        Ok(())
    }

    fn group_end(&self) -> Result<(), CommError> {
        let ops = self
            .pending
            .lock()
            .take()
            .ok_or_else(|| CommError::invalid_argument("group_end", "no group is open"))?;
        if ops.is_empty() {
            return Ok(());
        }
        self.run("group_end", |c| grouped(c, &ops))
    }

    fn barrier(&self, stream: &CudaStreamHandle) -> Result<(), CommError> {
        let scratch = {
            let mut slot = self.scratch.lock();
            match *slot {
                Some(p) => p,
                None => *slot.insert(self.device.malloc(DType::F32.size_bytes())?),
            }
        };
        self.all_reduce(scratch, 1, DType::F32, ReduceOp::Sum, stream)
    }

    fn new_group(
        &self,
        ranks: &[usize],
    ) -> Result<Option<Box<dyn Communicator<CudaDevice>>>, CommError> {
        if ranks.is_empty() {
            return Err(CommError::invalid_argument("new_group", "empty rank list"));
        }
        for (i, r) in ranks.iter().enumerate() {
            self.check_rank("new_group", "rank", *r)?;
            if ranks[..i].contains(r) {
                return Err(CommError::invalid_argument(
                    "new_group",
                    format!("rank {r} listed twice"),
                ));
            }
        }
        let position = ranks.iter().position(|r| *r == self.rank);
        let color = if position.is_some() {
            0
        } else {
            NCCL_SPLIT_NOCOLOR
        };
        let key = position.unwrap_or(0) as c_int;
        if !self.splits_natively() {
            // Probed by name before the first call (cudarc would panic on it).
            return self.new_group_fresh_id(ranks, position);
        }
        let mut child: sys::ncclComm_t = ptr::null_mut();
        let split = self.run("ncclCommSplit", |c| {
            // SAFETY: the parent is live (read lock held by `run`), `child` is a valid out
            // pointer, a null config inherits the parent's; every member calls in the same
            // order, as `new_group` requires.
            let r = unsafe { sys::ncclCommSplit(c, color, key, &raw mut child, ptr::null_mut()) };
            nccl_ok("ncclCommSplit", r.result())
        });
        if let Err(e) = split {
            if !child.is_null() {
                // SAFETY: the child was created for this call and is owned here alone;
                // nobody will use it after this failure.
                let _ = unsafe { nccl::comm_abort(child) };
            }
            return Err(e);
        }
        match position {
            Some(rank) if !child.is_null() => {
                // A child of a non-blocking parent inherits its config: wait until it is
                // initialized before using it.
                if let Some(limit) = self.nonblocking {
                    // SAFETY: `child` is the fresh communicator, owned here.
                    let ready = unsafe { wait_ready(child, limit) };
                    if let Err(e) = wait_settled("ncclCommSplit", ready, limit) {
                        // SAFETY: the child is ours alone and never used again.
                        let _ = unsafe { nccl::comm_abort(child) };
                        return Err(e);
                    }
                }
                // SAFETY: `ncclCommSplit` returned a fresh communicator of `ranks.len()`
                // ranks in which this process is `rank` (its key), owned by nobody else,
                // initialized (waited for above when non-blocking).
                let sub = unsafe {
                    NcclCommunicator::from_raw(
                        self.device.clone(),
                        child,
                        rank,
                        ranks.len(),
                        self.nonblocking,
                    )
                }?;
                Ok(Some(Box::new(sub)))
            }
            _ => Ok(None),
        }
    }

    fn async_error(&self) -> Option<CommError> {
        if self.aborted.lock().is_some() || self.device.bind().is_err() {
            return None;
        }
        let guard = self.comm.read();
        let comm = guard.as_ref()?;
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: the communicator is live (read lock held) and `state` a valid out pointer.
        let call = unsafe { sys::ncclCommGetAsyncError(comm.0, &raw mut state) }.result();
        match (call, state.result()) {
            (Err(e), _) | (Ok(_), Err(e)) => Some(nccl_comm("ncclCommGetAsyncError", &e)),
            _ => None,
        }
    }

    fn abort(&self) {
        self.aborted
            .lock()
            .get_or_insert_with(|| "aborted by the process group".to_owned());
        let taken = self.comm.write().take();
        if let Some(comm) = taken {
            let _ = self.device.bind();
            // SAFETY: the communicator was live and is now owned here alone (taken out of
            // the lock, so no other call can reach it); abort frees it.
            if let Err(e) = unsafe { nccl::comm_abort(comm.0) } {
                tracing::warn!("{}", error::nccl("ncclCommAbort", &e));
            }
        }
    }
}
