//! Point-to-point operations queued between `group_start` and `group_end` and issued as
//! one NCCL group.

use std::ffi::c_int;

use cudarc::nccl::result as nccl;
use cudarc::nccl::sys;
use memreuse_core::DevicePtr;
use memreuse_core::comm::CommError;

use crate::device::CudaStreamHandle;
use crate::error::nccl_comm;
use crate::nccl_args::{dev, raw_stream};

/// Send or receive.
#[derive(Clone, Copy, Debug)]
pub(crate) enum P2p {
    Send,
    Recv,
}

/// One queued point-to-point op.
pub(crate) struct Pending {
    pub kind: P2p,
    pub buf: DevicePtr,
    pub count: usize,
    pub dtype: sys::ncclDataType_t,
    pub peer: usize,
    pub stream: CudaStreamHandle,
}

/// Issues `ops` between `ncclGroupStart` and `ncclGroupEnd`; the group is always closed,
/// even when an op fails.
pub(crate) fn grouped(comm: sys::ncclComm_t, ops: &[Pending]) -> Result<(), CommError> {
    nccl::group_start().map_err(|e| nccl_comm("ncclGroupStart", &e))?;
    let mut first_error = None;
    for p in ops {
        let peer = p.peer as c_int;
        let s = raw_stream(&p.stream);
        // SAFETY: buffers were checked to lie in live allocations of this device, the
        // stream belongs to it, the communicator is live (the caller holds its read lock)
        // and the context is bound.
        let r = unsafe {
            match p.kind {
                P2p::Send => nccl::send(dev(p.buf), p.count, p.dtype, peer, comm, s),
                P2p::Recv => nccl::recv(dev(p.buf), p.count, p.dtype, peer, comm, s),
            }
        };
        if let Err(e) = r {
            let call = match p.kind {
                P2p::Send => "ncclSend",
                P2p::Recv => "ncclRecv",
            };
            first_error.get_or_insert(nccl_comm(call, &e));
        }
    }
    let end = nccl::group_end().map_err(|e| nccl_comm("ncclGroupEnd", &e));
    match first_error {
        Some(e) => Err(e),
        None => end.map(|_| ()),
    }
}
