//! [`Communicator`] for [`AscendCommunicator`]: each collective one HCCL call with the
//! device bound (unless the member was aborted), the fallbacks for `HcclBarrier` and
//! `HcclGetCommAsyncError`, sub-groups through the member's [`super::Family`], and abort.

use std::sync::atomic::Ordering;

use memreuse_core::DevicePtr;
use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp};

use super::{ABORT_DESTROY_RETRY, AscendCommunicator, comm_err};
use crate::conversions::hccl_reduces;
use crate::device::{AscendDevice, AscendStream};
use crate::result::{HcclError, hccl};
use crate::sys;

impl Communicator<AscendDevice> for AscendCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn reduces(&self, dtype: DType, op: ReduceOp) -> bool {
        hccl_reduces(dtype, op)
    }

    fn all_reduce(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        let (t, o) = Self::reduction("all_reduce", dtype, op)?;
        let api = self.device.api();
        self.call("HcclAllReduce", |c| {
            hccl::all_reduce(api, buf, count as u64, t, o, c, stream.raw_handle())
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
        let api = self.device.api();
        self.call("HcclAllGather", |c| {
            hccl::all_gather(api, input, output, count as u64, t, c, stream.raw_handle())
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
        let (t, o) = Self::reduction("reduce_scatter", dtype, op)?;
        let api = self.device.api();
        self.call("HcclReduceScatter", |c| {
            hccl::reduce_scatter(
                api,
                input,
                output,
                count as u64,
                t,
                o,
                c,
                stream.raw_handle(),
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
        let api = self.device.api();
        // `count` elements go to each rank.
        self.call("HcclAlltoAll", |c| {
            hccl::all_to_all(api, input, output, count as u64, t, c, stream.raw_handle())
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
            return Err(CommError::invalid_argument(
                "broadcast",
                format!("root {root} is outside the {}-rank group", self.size),
            ));
        }
        let t = Self::dtype("broadcast", dtype)?;
        let api = self.device.api();
        self.call("HcclBroadcast", |c| {
            hccl::broadcast(
                api,
                buf,
                count as u64,
                t,
                root as u32,
                c,
                stream.raw_handle(),
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
        self.p2p(true, buf, count, dtype, peer, stream)
    }

    fn recv(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        self.p2p(false, buf, count, dtype, peer, stream)
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
            match self.call_status(|c| hccl::barrier(f, c, stream.raw_handle()))? {
                Ok(()) => return Ok(()),
                // Documented as unsupported on Atlas inference parts.
                Err(HcclError(sys::HCCL_E_NOT_SUPPORT)) => {
                    self.barrier_by_all_reduce.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(comm_err(e.into_backend("HcclBarrier"))),
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
            .map_err(|reason| CommError::invalid_argument("new_group", reason))?
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
        let api = self.device.api();
        let status = match self.call_status(|c| hccl::get_comm_async_error(api, c)) {
            Ok(status) => status,
            Err(e) => return Some(e),
        };
        let code = match status {
            Ok(code) => code,
            // Unsupported on some parts (Ascend 950): no information, not an error.
            Err(HcclError(sys::HCCL_E_NOT_SUPPORT)) => {
                self.async_error_unsupported.store(true, Ordering::Relaxed);
                return None;
            }
            Err(e) => return Some(comm_err(e.into_backend("HcclGetCommAsyncError"))),
        };
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
