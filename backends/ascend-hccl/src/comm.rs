//! Layer 3: [`AscendCommunicator`], one rank of an HCCL communicator as a memreuse
//! [`Communicator`].
//!
//! Set-up follows torch_npu: rank 0 calls `HcclGetRootInfo`, the 4108 bytes reach every rank
//! (here in process; length-checked by [`HcclRootInfo::from_bytes`] when they come from
//! elsewhere), every rank calls `HcclCommInitRootInfo` from its own thread with its device
//! bound. Sub-groups repeat this with the sub-group's rank 0 generating the root info
//! ([`Family`]). `all_to_all` is `HcclAlltoAll`.
//!
//! Where the runtime lacks something, the communicator falls back:
//! - no `HcclGroupStart`/`HcclGroupEnd` (CANN 8.0-8.3), or `HCCL_E_NOT_SUPPORT` from them:
//!   grouped point-to-point is issued ungrouped in a deadlock-free order (`group.rs`);
//! - no `HcclBarrier`, or `HCCL_E_NOT_SUPPORT` from it: a one-element all_reduce;
//! - `HcclGetCommAsyncError` answering `HCCL_E_NOT_SUPPORT`: no information (`None`), and
//!   it is not asked again.
//!
//! Abort: HCCL has no `HcclCommAbort`; as torch_npu does, [`Communicator::abort`] calls
//! `HcclCommDestroy` (from whichever thread aborts), which makes running operations exit.
//! The aborted state is kept outside any lock a call holds, so `abort` never waits behind a
//! call in flight; `HCCL_E_AGAIN` (a busy communicator) is retried, and the communicator
//! counts as destroyed only once `HcclCommDestroy` succeeded.
//!
//! One window remains, as in torch_npu: a call that passed the aborted check on another
//! thread just before `abort` may reach HCCL after the handle was destroyed (HCCL then
//! refuses the stale handle).

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp};
use memreuse_core::{Backend, BackendError, DevicePtr};
use parking_lot::Mutex;

use crate::device::{AscendDevice, AscendStream};
pub use crate::family::Family;
pub(crate) use crate::family::store_error;
use crate::group::Emulated;
use crate::result::{HcclError, hccl_check};
use crate::sys::{self, HcclRootInfo};

/// How long `abort` retries `HcclCommDestroy` on `HCCL_E_AGAIN` before leaving the rest
/// to the drop (which retries for [`DESTROY_RETRY`] more).
pub const ABORT_DESTROY_RETRY: Duration = Duration::from_secs(1);
/// How long a drop retries `HcclCommDestroy` on `HCCL_E_AGAIN` before giving up (logged).
pub const DESTROY_RETRY: Duration = Duration::from_secs(30);

/// Whether the HCCL handle still exists.
#[derive(Default)]
struct Handle {
    destroyed: bool,
}

/// One rank's member of an HCCL communicator.
pub struct AscendCommunicator {
    pub(crate) device: AscendDevice,
    raw: usize,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    family: Arc<Family>,
    new_group_calls: Mutex<u64>,
    /// Set by `abort` (never under `handle`'s lock, so it never waits behind a call).
    aborted: Mutex<Option<String>>,
    /// Serializes `HcclCommDestroy` attempts.
    handle: Mutex<Handle>,
    /// Grouped point-to-point runs ungrouped (no group symbols, or they answered
    /// `HCCL_E_NOT_SUPPORT`).
    pub(crate) emulate_group: AtomicBool,
    /// The open emulated group.
    pub(crate) group: Mutex<Emulated>,
    /// `HcclBarrier` is absent or answered `HCCL_E_NOT_SUPPORT`.
    barrier_by_all_reduce: AtomicBool,
    /// One f32 of device memory for the barrier fallback (allocated on first use).
    barrier_buf: Mutex<Option<DevicePtr>>,
    /// `HcclGetCommAsyncError` answered `HCCL_E_NOT_SUPPORT`.
    async_error_unsupported: AtomicBool,
}

impl std::fmt::Debug for AscendCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AscendCommunicator(rank {}/{} on {:?})",
            self.rank, self.size, self.device
        )
    }
}

pub(crate) fn comm_err(e: BackendError) -> CommError {
    CommError::Backend(e)
}

pub(crate) fn bad(call: &'static str, reason: impl Into<String>) -> CommError {
    CommError::InvalidArgument {
        call,
        reason: reason.into(),
    }
}

/// `HcclGetRootInfo` on `device` (rank 0's step).
pub fn root_info(device: &AscendDevice) -> Result<HcclRootInfo, BackendError> {
    device.bind()?;
    let mut info = HcclRootInfo::zeroed();
    // SAFETY: `info` is a valid, writable HcclRootInfo (4108 bytes).
    let code = unsafe { (device.api().HcclGetRootInfo)(&raw mut info) };
    hccl_check(code, "HcclGetRootInfo")?;
    Ok(info)
}

fn hccl_dtype(dtype: DType) -> sys::HcclDataType {
    match dtype {
        DType::F32 => sys::HCCL_DATA_TYPE_FP32,
        _ => -1,
    }
}

fn hccl_op(op: ReduceOp) -> sys::HcclReduceOp {
    match op {
        ReduceOp::Sum => sys::HCCL_REDUCE_SUM,
        ReduceOp::Max => sys::HCCL_REDUCE_MAX,
        ReduceOp::Min => sys::HCCL_REDUCE_MIN,
    }
}

pub(crate) fn vptr(p: DevicePtr) -> *mut c_void {
    p.addr() as usize as *mut c_void
}

impl AscendCommunicator {
    /// `HcclCommInitRootInfo(size, root, rank)` on `device`, from the calling thread (it
    /// blocks until every rank joined, so each rank calls it from its own thread).
    pub fn init(
        device: AscendDevice,
        root: &HcclRootInfo,
        size: usize,
        rank: usize,
        family: Arc<Family>,
    ) -> Result<AscendCommunicator, BackendError> {
        device.bind()?;
        let n = u32::try_from(size)
            .map_err(|_| crate::result::invalid("HcclCommInitRootInfo", "size"))?;
        let r = u32::try_from(rank)
            .map_err(|_| crate::result::invalid("HcclCommInitRootInfo", "rank"))?;
        let mut raw: sys::HcclComm = std::ptr::null_mut();
        // SAFETY: `root` points to 4108 readable bytes; `raw` is a valid out-pointer.
        let code = unsafe { (device.api().HcclCommInitRootInfo)(n, root, r, &raw mut raw) };
        hccl_check(code, "HcclCommInitRootInfo")?;
        let api = device.api();
        Ok(AscendCommunicator {
            emulate_group: AtomicBool::new(api.HcclGroupStart.is_none()),
            barrier_by_all_reduce: AtomicBool::new(api.HcclBarrier.is_none()),
            device,
            raw: raw as usize,
            rank,
            size,
            family,
            new_group_calls: Mutex::new(0),
            aborted: Mutex::new(None),
            handle: Mutex::new(Handle::default()),
            group: Mutex::new(Emulated::default()),
            barrier_buf: Mutex::new(None),
            async_error_unsupported: AtomicBool::new(false),
        })
    }

    /// The member's device.
    pub fn device(&self) -> &AscendDevice {
        &self.device
    }

    /// The raw `HcclComm` (for harness hooks such as fault injection).
    pub fn raw(&self) -> *mut c_void {
        self.raw as *mut c_void
    }

    /// True while grouped point-to-point runs without the group symbols.
    pub fn groups_emulated(&self) -> bool {
        self.emulate_group.load(Ordering::Relaxed)
    }

    /// True while `barrier` runs as a one-element all_reduce.
    pub fn barrier_emulated(&self) -> bool {
        self.barrier_by_all_reduce.load(Ordering::Relaxed)
    }

    pub(crate) fn check_aborted(&self) -> Result<(), CommError> {
        match &*self.aborted.lock() {
            Some(reason) => Err(CommError::Aborted {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Runs one HCCL call with the device bound, unless the member was aborted; returns
    /// the raw status.
    pub(crate) fn call_raw(
        &self,
        f: impl FnOnce(sys::HcclComm) -> sys::HcclResult,
    ) -> Result<sys::HcclResult, CommError> {
        self.check_aborted()?;
        self.device.bind().map_err(comm_err)?;
        Ok(f(self.raw as sys::HcclComm))
    }

    /// Runs one HCCL call with the device bound, unless the member was aborted.
    pub(crate) fn call(
        &self,
        name: &'static str,
        f: impl FnOnce(sys::HcclComm) -> sys::HcclResult,
    ) -> Result<(), CommError> {
        let code = self.call_raw(f)?;
        hccl_check(code, name).map_err(comm_err)
    }

    pub(crate) fn dtype(call: &'static str, dtype: DType) -> Result<sys::HcclDataType, CommError> {
        match hccl_dtype(dtype) {
            -1 => Err(bad(call, format!("{dtype:?} has no HCCL data type here"))),
            t => Ok(t),
        }
    }

    /// `HcclCommDestroy`, retried while it answers `HCCL_E_AGAIN` (for at most `patience`);
    /// the handle counts as destroyed only once it succeeded. Returns whether it is gone.
    fn destroy(&self, patience: Duration) -> bool {
        let mut handle = self.handle.lock();
        if handle.destroyed {
            return true;
        }
        if self.device.bind().is_err() {
            return false;
        }
        let deadline = Instant::now() + patience;
        let mut pause = Duration::from_micros(50);
        loop {
            // SAFETY: the handle came from HcclCommInitRootInfo and was not destroyed yet
            // (`destroyed` is set only after a successful destroy, under this lock).
            let code = unsafe { (self.device.api().HcclCommDestroy)(self.raw as sys::HcclComm) };
            match code {
                sys::HCCL_SUCCESS => {
                    handle.destroyed = true;
                    return true;
                }
                sys::HCCL_E_AGAIN if Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                code => {
                    tracing::warn!(
                        code,
                        name = HcclError(code).name(),
                        "HcclCommDestroy failed"
                    );
                    return false;
                }
            }
        }
    }

    /// The barrier fallback: a one-element all_reduce on a buffer of this member.
    fn barrier_by_all_reduce(&self, stream: &AscendStream) -> Result<(), CommError> {
        let buf = {
            let mut slot = self.barrier_buf.lock();
            if let Some(p) = *slot {
                p
            } else {
                self.device.bind().map_err(comm_err)?;
                let p = self.device.malloc(4).map_err(comm_err)?;
                *slot = Some(p);
                p
            }
        };
        let f = self.device.api().HcclAllReduce;
        // SAFETY: `buf` holds one f32 for this communicator's lifetime; live handles.
        self.call("HcclAllReduce (barrier)", |c| unsafe {
            f(
                vptr(buf),
                vptr(buf),
                1,
                sys::HCCL_DATA_TYPE_FP32,
                sys::HCCL_REDUCE_SUM,
                c,
                stream_raw(stream),
            )
        })
    }
}

impl Drop for AscendCommunicator {
    fn drop(&mut self) {
        if self.aborted.get_mut().is_none() {
            // Destroying makes this communicator's pending operations exit, on every
            // member: let this member's finish first.
            let _ = self.device.synchronize_device();
        }
        let gone = self.destroy(DESTROY_RETRY);
        if let Some(p) = self.barrier_buf.get_mut().take() {
            // The barrier all_reduce may still be queued: wait for the device first.
            if gone && self.device.synchronize_device().is_ok() {
                let _ = self.device.free(p);
            }
        }
    }
}

impl Communicator<AscendDevice> for AscendCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        let t = Self::dtype("all_reduce", dtype)?;
        let f = self.device.api().HcclAllReduce;
        // SAFETY: device addresses are checked by HCCL; live comm and stream handles.
        self.call("HcclAllReduce", |c| unsafe {
            f(
                vptr(buf),
                vptr(buf),
                count as u64,
                t,
                hccl_op(op),
                c,
                stream_raw(stream),
            )
        })
    }

    fn all_gather(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        let t = Self::dtype("all_gather", dtype)?;
        let f = self.device.api().HcclAllGather;
        // SAFETY: as for all_reduce.
        self.call("HcclAllGather", |c| unsafe {
            f(
                vptr(input),
                vptr(output),
                count as u64,
                t,
                c,
                stream_raw(stream),
            )
        })
    }

    fn reduce_scatter(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        let t = Self::dtype("reduce_scatter", dtype)?;
        let f = self.device.api().HcclReduceScatter;
        // SAFETY: as for all_reduce.
        self.call("HcclReduceScatter", |c| unsafe {
            f(
                vptr(input),
                vptr(output),
                count as u64,
                t,
                hccl_op(op),
                c,
                stream_raw(stream),
            )
        })
    }

    fn all_to_all(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        let t = Self::dtype("all_to_all", dtype)?;
        let f = self.device.api().HcclAlltoAll;
        // SAFETY: as for all_reduce; `count` elements go to each rank.
        self.call("HcclAlltoAll", |c| unsafe {
            f(
                vptr(input),
                count as u64,
                t,
                vptr(output),
                count as u64,
                t,
                c,
                stream_raw(stream),
            )
        })
    }

    fn broadcast(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        root: usize,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        if root >= self.size {
            return Err(bad(
                "broadcast",
                format!("root {root} is outside the {}-rank group", self.size),
            ));
        }
        let t = Self::dtype("broadcast", dtype)?;
        let f = self.device.api().HcclBroadcast;
        // SAFETY: as for all_reduce.
        self.call("HcclBroadcast", |c| unsafe {
            f(
                vptr(buf),
                count as u64,
                t,
                root as u32,
                c,
                stream_raw(stream),
            )
        })
    }

    fn send(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        let f = self.device.api().HcclSend;
        self.p2p(("send", "HcclSend"), f, buf, count, dtype, peer, stream)
    }

    fn recv(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        let f = self.device.api().HcclRecv;
        self.p2p(("recv", "HcclRecv"), f, buf, count, dtype, peer, stream)
    }

    fn group_start(&self) -> Result<(), CommError> {
        self.open_group()
    }

    fn group_end(&self) -> Result<(), CommError> {
        self.close_group()
    }

    fn barrier(&self, stream: &AscendStream) -> Result<(), CommError> {
        if let Some(f) = self
            .device
            .api()
            .HcclBarrier
            .filter(|_| !self.barrier_emulated())
        {
            // SAFETY: live comm and stream handles.
            match self.call_raw(|c| unsafe { f(c, stream_raw(stream)) })? {
                sys::HCCL_SUCCESS => return Ok(()),
                // Documented as unsupported on Atlas inference parts.
                sys::HCCL_E_NOT_SUPPORT => {
                    self.barrier_by_all_reduce.store(true, Ordering::Relaxed);
                }
                code => return hccl_check(code, "HcclBarrier").map_err(comm_err),
            }
        }
        self.barrier_by_all_reduce(stream)
    }

    fn new_group(
        &self,
        ranks: &[usize],
    ) -> Result<Option<Box<dyn Communicator<AscendDevice>>>, CommError> {
        let seq = {
            let mut calls = self.new_group_calls.lock();
            *calls += 1;
            *calls - 1
        };
        let Some(position) = memreuse_core::comm::group_position(ranks, self.size, self.rank)
            .map_err(|reason| bad("new_group", reason))?
        else {
            return Ok(None);
        };
        let (root, family) = self
            .family
            .subgroup(&self.device, seq, ranks, position)
            .map_err(comm_err)?;
        let comm =
            AscendCommunicator::init(self.device.clone(), &root, ranks.len(), position, family)
                .map_err(comm_err)?;
        Ok(Some(Box::new(comm)))
    }

    fn async_error(&self) -> Option<CommError> {
        if self.async_error_unsupported.load(Ordering::Relaxed) {
            return None;
        }
        let mut code = sys::HCCL_SUCCESS;
        let f = self.device.api().HcclGetCommAsyncError;
        // SAFETY: live comm handle, valid out-pointer.
        let status = match self.call_raw(|c| unsafe { f(c, &raw mut code) }) {
            Ok(status) => status,
            Err(e) => return Some(e),
        };
        match status {
            sys::HCCL_SUCCESS => {}
            // Unsupported on some parts (Ascend 950): no information, not an error.
            sys::HCCL_E_NOT_SUPPORT => {
                self.async_error_unsupported.store(true, Ordering::Relaxed);
                return None;
            }
            status => {
                return Some(comm_err(
                    HcclError(status).into_backend("HcclGetCommAsyncError"),
                ));
            }
        }
        (code != sys::HCCL_SUCCESS)
            .then(|| comm_err(HcclError(code).into_backend("HcclGetCommAsyncError")))
    }

    fn abort(&self) {
        {
            let mut aborted = self.aborted.lock();
            if aborted.is_none() {
                *aborted = Some(format!(
                    "HCCL communicator rank {}/{} aborted",
                    self.rank, self.size
                ));
            }
        }
        // HcclCommDestroy from this thread makes running operations exit; a busy
        // communicator (HCCL_E_AGAIN) is retried here for a while, then by the drop.
        self.destroy(ABORT_DESTROY_RETRY);
    }
}

pub(crate) fn stream_raw(s: &AscendStream) -> sys::aclrtStream {
    s.raw_handle()
}
