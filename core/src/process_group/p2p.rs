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

/// One member of a batched point-to-point exchange and the group rank it goes to or
/// comes from.
///
/// `T` is the tensor as the member communicates it: a plain `&Storage` is the whole buffer
/// read as [`DType::F32`](crate::comm::DType::F32) (the default, so untyped callers need
/// nothing else), a [`CommBuffer`] names any element type and count. One batch holds one
/// kind of `T`; a typed batch writes every member as a `CommBuffer`. A member whose bytes
/// are not a whole number of elements of its type fails the whole batch before anything
/// is issued.
#[derive(Clone, Copy, Debug)]
pub enum P2pOp<T> {
    /// Send the tensor to a group rank.
    Send(T, usize),
    /// Receive into the tensor from a group rank.
    Recv(T, usize),
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
    pub fn batch_isend_irecv<'t, T: Into<CommBuffer<'t, B>> + Copy>(
        &self,
        ops: &[P2pOp<T>],
        current: &B::Stream,
    ) -> Result<Work<B>, PgError> {
        // Every member is checked before anything is issued (no half-issued batch).
        let members = ops
            .iter()
            .map(|o| {
                let (send, buf) = match *o {
                    P2pOp::Send(t, peer) => (true, (t.into(), peer)),
                    P2pOp::Recv(t, peer) => (false, (t.into(), peer)),
                };
                let (t, n, dtype) = checks::typed("batch_isend_irecv", buf.0)?;
                Ok((send, t, n, dtype, buf.1))
            })
            .collect::<Result<Vec<Member<'t, B>>, PgError>>()?;
        let inputs: Vec<&Storage<B>> = members.iter().filter(|m| m.0).map(|m| m.1).collect();
        let outputs: Vec<&Storage<B>> = members.iter().filter(|m| !m.0).map(|m| m.1).collect();
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
                for &(send, t, n, dtype, peer) in &members {
                    result = if send {
                        c.send(t.ptr(), n, dtype, peer, s)
                    } else {
                        c.recv(t.ptr(), n, dtype, peer, s)
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

/// A checked batch member: is a send, storage, element count, element type, peer.
type Member<'t, B> = (bool, &'t Storage<B>, usize, DType, usize);
