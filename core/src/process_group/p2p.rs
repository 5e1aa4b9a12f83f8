//! Point-to-point communication of a process group: send, recv and batches of them.

use super::buffer::CommBuffer;
use super::checks;
use super::error::PgError;
use super::group::ProcessGroup;
use super::kind::CommKind;
use super::work::Work;
use crate::allocator::Storage;
use crate::backend::Backend;
use crate::comm::DType;

/// One member of a batched point-to-point exchange: the whole tensor as `f32` elements
/// (a size that is not a multiple of 4 bytes fails the whole batch before anything is
/// issued).
#[derive(Clone, Copy, Debug)]
pub enum P2pOp<'a, B: Backend> {
    /// Send the tensor to a group rank.
    Send(&'a Storage<B>, usize),
    /// Receive into the tensor from a group rank.
    Recv(&'a Storage<B>, usize),
}

impl<B: Backend> ProcessGroup<B> {
    /// Sends the tensor to group rank `peer`.
    pub fn send<'t>(
        &self,
        t: impl Into<CommBuffer<'t, B>>,
        peer: usize,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (t, n, dtype) = checks::typed("send", t.into())?;
        self.issue(
            "send",
            CommKind::PointToPoint,
            &[t],
            &[],
            current,
            async_op,
            |c, s| c.send(t.ptr(), n, dtype, peer, s),
        )
    }

    /// Receives into the tensor from group rank `peer`.
    pub fn recv<'t>(
        &self,
        t: impl Into<CommBuffer<'t, B>>,
        peer: usize,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (t, n, dtype) = checks::typed("recv", t.into())?;
        self.issue(
            "recv",
            CommKind::PointToPoint,
            &[],
            &[t],
            current,
            async_op,
            |c, s| c.recv(t.ptr(), n, dtype, peer, s),
        )
    }

    /// Issues sends and receives as one group (PyTorch's `batch_isend_irecv`): one work,
    /// always asynchronous. Every tensor it touches is covered by the policy.
    pub fn batch_isend_irecv(
        &self,
        ops: &[P2pOp<'_, B>],
        current: &B::Stream,
    ) -> Result<Work<B>, PgError> {
        let inputs: Vec<&Storage<B>> = ops
            .iter()
            .filter_map(|o| {
                if let P2pOp::Send(t, _) = o {
                    Some(*t)
                } else {
                    None
                }
            })
            .collect();
        let outputs: Vec<&Storage<B>> = ops
            .iter()
            .filter_map(|o| {
                if let P2pOp::Recv(t, _) = o {
                    Some(*t)
                } else {
                    None
                }
            })
            .collect();
        // Every member is checked before anything is issued (no half-issued batch).
        let counts = ops
            .iter()
            .map(|o| match *o {
                P2pOp::Send(t, _) | P2pOp::Recv(t, _) => checks::p2p_elems("batch_isend_irecv", t),
            })
            .collect::<Result<Vec<usize>, PgError>>()?;
        self.issue(
            "batch_isend_irecv",
            CommKind::PointToPoint,
            &inputs,
            &outputs,
            current,
            true,
            |c, s| {
                c.group_start()?;
                let mut result = Ok(());
                for (op, &n) in ops.iter().zip(&counts) {
                    result = match *op {
                        P2pOp::Send(t, peer) => c.send(t.ptr(), n, DType::F32, peer, s),
                        P2pOp::Recv(t, peer) => c.recv(t.ptr(), n, DType::F32, peer, s),
                    };
                    if result.is_err() {
                        break;
                    }
                }
                // Close the group even after a failed member so the communicator stays usable.
                let end = c.group_end();
                result.and(end)
            },
        )
    }
}
