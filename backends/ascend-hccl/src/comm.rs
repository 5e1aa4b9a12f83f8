//! The communicator layer: [`AscendCommunicator`], one rank of an HCCL communicator as a
//! memreuse [`Communicator`].
//!
//! Set-up follows torch_npu: rank 0 calls `HcclGetRootInfo`, the 4108 bytes reach every rank
//! (here in process; length-checked by [`HcclRootInfo::from_bytes`] when they come from
//! elsewhere), every rank calls `HcclCommInitRootInfo` from its own thread with its device
//! bound. Sub-groups repeat this with the sub-group's rank 0 generating the root info
//! ([`Family`]). `all_to_all` is `HcclAlltoAll`.
//!
//! Where the runtime lacks something, the communicator falls back:
//! - no `HcclGroupStart`/`HcclGroupEnd` (CANN 8.0-8.3), or `HCCL_E_NOT_SUPPORT` from them:
//!   grouped point-to-point is issued ungrouped in a deadlock-free order (`group.rs` holds
//!   the order, `comm/point_to_point.rs` issues it);
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
//!
//! [`Communicator`]: memreuse_core::comm::Communicator
//! [`Communicator::abort`]: memreuse_core::comm::Communicator::abort

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use memreuse_core::comm::{CommError, DType, ReduceOp};
use memreuse_core::{Backend, BackendError, DevicePtr};
use parking_lot::Mutex;

use crate::conversions::{hccl_dtype, hccl_op, hccl_reduces, refuse_reduction};
use crate::device::{AscendDevice, AscendStream};
pub(crate) use crate::family::store_error;
pub use crate::family::{Family, root_info};
use crate::group::Emulated;
use crate::result::{BACKEND, HcclError, hccl};
use crate::sys::{self, HcclRootInfo};

mod collectives;
mod point_to_point;

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
    device: AscendDevice,
    raw: usize,
    rank: usize,
    size: usize,
    family: Arc<Family>,
    new_group_calls: Mutex<u64>,
    /// Set by `abort` (never under `handle`'s lock, so it never waits behind a call).
    aborted: Mutex<Option<String>>,
    /// Serializes `HcclCommDestroy` attempts.
    handle: Mutex<Handle>,
    /// Grouped point-to-point runs ungrouped (no group symbols, or they answered
    /// `HCCL_E_NOT_SUPPORT`).
    emulate_group: AtomicBool,
    /// The open emulated group.
    group: Mutex<Emulated>,
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

/// A backend failure as the communicator's error.
fn comm_err(e: BackendError) -> CommError {
    CommError::Backend(e)
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
        let invalid =
            |what: &str| BackendError::invalid_argument(BACKEND, "HcclCommInitRootInfo", what);
        let n = u32::try_from(size).map_err(|_| invalid("size"))?;
        let r = u32::try_from(rank).map_err(|_| invalid("rank"))?;
        let api = device.api();
        let raw = hccl::comm_init_root_info(api, n, root, r)
            .map_err(|e| e.into_backend("HcclCommInitRootInfo"))?;
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

    fn check_aborted(&self) -> Result<(), CommError> {
        match &*self.aborted.lock() {
            Some(reason) => Err(CommError::Aborted {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Runs one HCCL call with the device bound, unless the member was aborted; returns
    /// its status for the caller to act on.
    fn call_status<T>(
        &self,
        f: impl FnOnce(sys::HcclComm) -> Result<T, HcclError>,
    ) -> Result<Result<T, HcclError>, CommError> {
        self.check_aborted()?;
        self.device.bind().map_err(comm_err)?;
        Ok(f(self.raw as sys::HcclComm))
    }

    /// Runs one HCCL call with the device bound, unless the member was aborted; a failure
    /// is named `name`.
    fn call(
        &self,
        name: &'static str,
        f: impl FnOnce(sys::HcclComm) -> Result<(), HcclError>,
    ) -> Result<(), CommError> {
        self.call_status(f)?
            .map_err(|e| comm_err(e.into_backend(name)))
    }

    /// The HCCL data type of `dtype`, or the `InvalidArgument` of `call` when it has none.
    fn dtype(call: &'static str, dtype: DType) -> Result<sys::HcclDataType, CommError> {
        hccl_dtype(dtype).ok_or_else(|| {
            CommError::invalid_argument(
                call,
                format!("the ascend backend has no HCCL data type for {dtype}"),
            )
        })
    }

    /// The HCCL data type and operator of a reduction, or the `InvalidArgument` of `call`
    /// (naming type, operator and backend) for one HCCL cannot do: refused before anything
    /// is enqueued.
    fn reduction(
        call: &'static str,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<(sys::HcclDataType, sys::HcclReduceOp), CommError> {
        if !hccl_reduces(dtype, op) {
            return Err(refuse_reduction(call, dtype, op));
        }
        Ok((Self::dtype(call, dtype)?, hccl_op(call, op)?))
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
            // The handle came from HcclCommInitRootInfo and was not destroyed yet
            // (`destroyed` is set only after a successful destroy, under this lock).
            match hccl::comm_destroy(self.device.api(), self.raw as sys::HcclComm) {
                Ok(()) => {
                    handle.destroyed = true;
                    return true;
                }
                Err(HcclError(sys::HCCL_E_AGAIN)) if Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                Err(HcclError(code)) => {
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
        let api = self.device.api();
        // `buf` holds one f32 for this communicator's lifetime.
        self.call("HcclAllReduce (barrier)", |c| {
            hccl::all_reduce(
                api,
                buf,
                1,
                sys::HCCL_DATA_TYPE_FP32,
                sys::HCCL_REDUCE_SUM,
                c,
                stream.raw_handle(),
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
