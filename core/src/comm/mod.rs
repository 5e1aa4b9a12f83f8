//! Communicators: one rank of a group on one device, with NCCL semantics.
//!
//! Every operation is *enqueued* on a stream of the communicator's device and returns once
//! it is enqueued; completion is observed through events on that stream. Collectives are
//! matched across the group in issue order; point-to-point operations are matched per
//! (sender, receiver) pair in issue order. A [`Communicator::group_start`] /
//! [`Communicator::group_end`] bracket issues point-to-point operations as one group
//! (NCCL's `ncclGroupStart`/`ncclGroupEnd`, PyTorch's `batch_isend_irecv`), so members of a
//! batch never block each other.

mod dtype;
mod elementwise;
mod erased;
mod error;
mod group_ranks;

pub use dtype::{DType, ReduceOp, UnknownName};
pub use elementwise::{ElementwiseError, combine_into, finish_average, read_f64, write_f64};
pub use erased::ErasedCommunicator;
pub use error::{CommError, REFERENCE_REDUCTION_RULE};
pub use group_ranks::group_position;

use crate::backend::Backend;
use crate::ids::DevicePtr;

/// One rank of a communication group, bound to one device of backend `B`.
///
/// Counts are in elements of `dtype`; ranks (`root`, `peer`) are *group* ranks.
pub trait Communicator<B: Backend>: Send + Sync {
    /// This member's rank in the group.
    fn rank(&self) -> usize;
    /// Number of members.
    fn size(&self) -> usize;

    /// In place: every member's `buf` becomes the element-wise reduction over members.
    fn all_reduce(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &B::Stream,
    ) -> Result<(), CommError>;

    /// `output` (`count * size` elements) receives every member's `input` (`count`
    /// elements), ordered by group rank.
    fn all_gather(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &B::Stream,
    ) -> Result<(), CommError>;

    /// `input` holds `count * size` elements; member `r`'s `output` (`count` elements)
    /// receives the reduction of chunk `r` over members.
    fn reduce_scatter(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &B::Stream,
    ) -> Result<(), CommError>;

    /// Equal splits: `input` and `output` hold `count * size` elements; chunk `j` of member
    /// `i` lands in chunk `i` of member `j`.
    fn all_to_all(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &B::Stream,
    ) -> Result<(), CommError>;

    /// Every member's `buf` becomes member `root`'s.
    fn broadcast(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        root: usize,
        stream: &B::Stream,
    ) -> Result<(), CommError>;

    /// Sends `count` elements to group rank `peer`.
    fn send(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &B::Stream,
    ) -> Result<(), CommError>;

    /// Receives `count` elements from group rank `peer`.
    fn recv(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &B::Stream,
    ) -> Result<(), CommError>;

    /// Opens a group: point-to-point operations until [`Communicator::group_end`] are
    /// issued together.
    fn group_start(&self) -> Result<(), CommError>;

    /// Closes the group and enqueues its operations on the stream they named (all members
    /// of one group must name the same stream).
    fn group_end(&self) -> Result<(), CommError>;

    /// Enqueues a barrier: the stream continues once every member reached it.
    fn barrier(&self, stream: &B::Stream) -> Result<(), CommError>;

    /// Creates a sub-group of the given group ranks (in that order). Every member of this
    /// group calls it with the same list, in the same order relative to other
    /// `new_group` calls (as `torch.distributed.new_group`); non-members get `None`.
    fn new_group(&self, ranks: &[usize]) -> Result<Option<Box<dyn Communicator<B>>>, CommError>;

    /// An error that happened asynchronously (a collective that failed or timed out on the
    /// device), polled by the process group's watchdog. `None` while healthy.
    fn async_error(&self) -> Option<CommError>;

    /// Aborts outstanding operations: pending and future operations fail instead of
    /// waiting for peers (used when a process group is dropped with work in flight).
    fn abort(&self);

    /// Whether this communicator reduces `dtype` with `op` (`all_reduce`,
    /// `reduce_scatter`). The process group asks before issuing, so a reduction the
    /// backend cannot do is a typed error naming the type, the operator and the backend,
    /// and nothing is enqueued. The default is the reference arithmetic's rule
    /// ([`DType::reduces_with`]: avg on floating types only, no fp8 reductions); a backend
    /// that reduces less (HCCL has no avg) or more (NCCL's fp8 on newer devices) says so.
    fn reduces(&self, dtype: DType, op: ReduceOp) -> bool {
        dtype.reduces_with(op)
    }
}
