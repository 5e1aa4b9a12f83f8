//! A communicator of a loaded plugin as an ordinary [`Communicator`].
//!
//! The host keeps the header's threading rule: calls on one communicator are serialized
//! (a lock held for the enqueue only), except `abort` and `async_error`, which the
//! process group's watchdog makes from its own thread at any time.

use std::sync::Arc;

use memreuse_core::{BackendError, CommError, Communicator, DType, DevicePtr, ReduceOp};
use parking_lot::Mutex;

use crate::abi::{
    MR_DTYPE_BF16, MR_DTYPE_F8E4M3, MR_DTYPE_F8E5M2, MR_DTYPE_F16, MR_DTYPE_F32, MR_DTYPE_F64,
    MR_DTYPE_I8, MR_DTYPE_I32, MR_DTYPE_I64, MR_DTYPE_U8, MR_DTYPE_U32, MR_DTYPE_U64, MR_OK,
    MR_OP_AVG, MR_OP_MAX, MR_OP_MIN, MR_OP_PROD, MR_OP_SUM, MrComm, MrDType, MrReduceOp, MrStream,
};
use crate::device::{PluginDevice, PluginStream, entry};

/// One rank of a plugin communicator, bound to one plugin device.
pub struct PluginComm {
    device: PluginDevice,
    raw: *mut MrComm,
    rank: usize,
    size: usize,
    lock: Mutex<()>,
}

// SAFETY: calls are serialized by `lock` except abort/async_error, which the header lets
// any thread make at any time.
unsafe impl Send for PluginComm {}
// SAFETY: as for Send.
unsafe impl Sync for PluginComm {}

impl Drop for PluginComm {
    fn drop(&mut self) {
        if let Some(destroy) = self.device.plugin().api.comm_destroy {
            // SAFETY: a communicator of this plugin, destroyed once by its only owner.
            unsafe { destroy(self.raw) };
        }
    }
}

/// The ABI code of a host element type. Every host type has one (the ABI carries the full
/// list from version 1).
pub fn dtype_code(dtype: DType) -> Result<MrDType, CommError> {
    Ok(match dtype {
        DType::F32 => MR_DTYPE_F32,
        DType::F16 => MR_DTYPE_F16,
        DType::BF16 => MR_DTYPE_BF16,
        DType::F64 => MR_DTYPE_F64,
        DType::I8 => MR_DTYPE_I8,
        DType::U8 => MR_DTYPE_U8,
        DType::I32 => MR_DTYPE_I32,
        DType::U32 => MR_DTYPE_U32,
        DType::I64 => MR_DTYPE_I64,
        DType::U64 => MR_DTYPE_U64,
        DType::F8E4M3 => MR_DTYPE_F8E4M3,
        DType::F8E5M2 => MR_DTYPE_F8E5M2,
        // `DType` is non_exhaustive: a type added later has no ABI 1 code.
        other => {
            return Err(CommError::invalid_argument(
                "dtype",
                format!("element type {other} has no plugin ABI code in this host"),
            ));
        }
    })
}

/// The ABI code of a host reduction.
pub fn op_code(op: ReduceOp) -> MrReduceOp {
    match op {
        ReduceOp::Sum => MR_OP_SUM,
        ReduceOp::Prod => MR_OP_PROD,
        ReduceOp::Avg => MR_OP_AVG,
        ReduceOp::Max => MR_OP_MAX,
        ReduceOp::Min => MR_OP_MIN,
    }
}

impl PluginComm {
    /// Wraps a communicator handle of `device` the plugin returned; reads its rank and size.
    pub(crate) fn from_raw(device: PluginDevice, raw: *mut MrComm) -> Result<Self, BackendError> {
        let p = Arc::clone(&device.inner.plugin);
        let f = entry!(p, comm_rank_size);
        let (mut rank, mut size) = (0u32, 0u32);
        let mut comm = PluginComm {
            device,
            raw,
            rank: 0,
            size: 0,
            lock: Mutex::new(()),
        };
        // SAFETY: a live communicator and two out-pointers.
        let status = unsafe { f(raw, &raw mut rank, &raw mut size) };
        p.check(status, "comm_rank_size")?;
        if size == 0 || rank >= size {
            return Err(BackendError::invalid_argument(
                p.name.clone(),
                "comm_rank_size",
                format!(
                    "plugin {} reports rank {rank} of a group of {size}",
                    p.path.display()
                ),
            ));
        }
        comm.rank = rank as usize;
        comm.size = size as usize;
        Ok(comm)
    }

    fn stream(
        &self,
        stream: &PluginStream,
        call: &'static str,
    ) -> Result<*mut MrStream, CommError> {
        Ok(self.device.raw_stream(stream, call)?)
    }

    fn rank_arg(&self, r: usize, call: &'static str, what: &str) -> Result<u32, CommError> {
        if r < self.size {
            Ok(r as u32)
        } else {
            Err(CommError::invalid_argument(
                call,
                format!("{what} {r} is outside the group of {}", self.size),
            ))
        }
    }
}

macro_rules! comm_call {
    ($self:ident, $field:ident, $call:literal, |$f:ident| $body:expr) => {{
        let p = $self.device.plugin();
        let $f = entry!(p, $field);
        let _serial = $self.lock.lock();
        // SAFETY: a live communicator of this plugin, a stream of its device (checked),
        // plain values; the plugin checks the addresses.
        let status = unsafe { $body };
        p.check_comm(status, $call)
    }};
}

impl Communicator<PluginDevice> for PluginComm {
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
        stream: &PluginStream,
    ) -> Result<(), CommError> {
        CommError::check_reference_reduction("plugin", "all_reduce", dtype, op)?;
        let (s, t) = (self.stream(stream, "all_reduce")?, dtype_code(dtype)?);
        comm_call!(self, all_reduce, "all_reduce", |f| f(
            self.raw,
            buf.0,
            count as u64,
            t,
            op_code(op),
            s
        ))
    }
    fn all_gather(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &PluginStream,
    ) -> Result<(), CommError> {
        let (s, t) = (self.stream(stream, "all_gather")?, dtype_code(dtype)?);
        comm_call!(self, all_gather, "all_gather", |f| f(
            self.raw,
            input.0,
            output.0,
            count as u64,
            t,
            s
        ))
    }
    fn reduce_scatter(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &PluginStream,
    ) -> Result<(), CommError> {
        CommError::check_reference_reduction("plugin", "reduce_scatter", dtype, op)?;
        let (s, t) = (self.stream(stream, "reduce_scatter")?, dtype_code(dtype)?);
        comm_call!(self, reduce_scatter, "reduce_scatter", |f| f(
            self.raw,
            input.0,
            output.0,
            count as u64,
            t,
            op_code(op),
            s
        ))
    }
    fn all_to_all(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &PluginStream,
    ) -> Result<(), CommError> {
        let (s, t) = (self.stream(stream, "all_to_all")?, dtype_code(dtype)?);
        comm_call!(self, all_to_all, "all_to_all", |f| f(
            self.raw,
            input.0,
            output.0,
            count as u64,
            t,
            s
        ))
    }
    fn broadcast(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        root: usize,
        stream: &PluginStream,
    ) -> Result<(), CommError> {
        let (s, t) = (self.stream(stream, "broadcast")?, dtype_code(dtype)?);
        let root = self.rank_arg(root, "broadcast", "root")?;
        comm_call!(self, broadcast, "broadcast", |f| f(
            self.raw,
            buf.0,
            count as u64,
            t,
            root,
            s
        ))
    }
    fn send(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &PluginStream,
    ) -> Result<(), CommError> {
        let (s, t) = (self.stream(stream, "send")?, dtype_code(dtype)?);
        let peer = self.rank_arg(peer, "send", "peer")?;
        comm_call!(self, send, "send", |f| f(
            self.raw,
            buf.0,
            count as u64,
            t,
            peer,
            s
        ))
    }
    fn recv(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &PluginStream,
    ) -> Result<(), CommError> {
        let (s, t) = (self.stream(stream, "recv")?, dtype_code(dtype)?);
        let peer = self.rank_arg(peer, "recv", "peer")?;
        comm_call!(self, recv, "recv", |f| f(
            self.raw,
            buf.0,
            count as u64,
            t,
            peer,
            s
        ))
    }
    fn group_start(&self) -> Result<(), CommError> {
        comm_call!(self, group_start, "group_start", |f| f(self.raw))
    }
    fn group_end(&self) -> Result<(), CommError> {
        comm_call!(self, group_end, "group_end", |f| f(self.raw))
    }
    fn barrier(&self, stream: &PluginStream) -> Result<(), CommError> {
        let s = self.stream(stream, "barrier")?;
        comm_call!(self, barrier, "barrier", |f| f(self.raw, s))
    }
    fn new_group(
        &self,
        ranks: &[usize],
    ) -> Result<Option<Box<dyn Communicator<PluginDevice>>>, CommError> {
        let list = ranks
            .iter()
            .map(|&r| self.rank_arg(r, "new_group", "rank"))
            .collect::<Result<Vec<u32>, _>>()?;
        let p = self.device.plugin();
        let f = entry!(p, comm_new_group);
        let mut out: *mut MrComm = std::ptr::null_mut();
        let status = {
            let _serial = self.lock.lock();
            // SAFETY: a live communicator, `list.len()` ranks, an out-pointer.
            unsafe { f(self.raw, list.as_ptr(), list.len(), &raw mut out) }
        };
        p.check_comm(status, "new_group")?;
        if out.is_null() {
            return Ok(None); // not a member
        }
        Ok(Some(Box::new(PluginComm::from_raw(
            self.device.clone(),
            out,
        )?)))
    }
    fn async_error(&self) -> Option<CommError> {
        let p = self.device.plugin();
        let f = p.api.comm_async_error?;
        // SAFETY: a live communicator; the header lets any thread poll it.
        let status = unsafe { f(self.raw) };
        (status != MR_OK).then(|| p.comm_error(status, "comm_async_error"))
    }
    fn abort(&self) {
        if let Some(f) = self.device.plugin().api.comm_abort {
            // SAFETY: a live communicator; the header lets any thread abort it.
            unsafe { f(self.raw) };
        }
    }
}
