//! The reasons a parsed schedule is invalid (docs/schedules.md "Validation").

use memreuse_core::DType;

/// Why a schedule is invalid. Names are the schedule's own (tensor, work, group, stream).
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ValidationErrorKind {
    /// `world_size` is 0.
    #[error("world_size must be at least 1")]
    EmptyWorld,
    /// A value above what this implementation accepts.
    #[error("{what} is {value}, above the limit {limit}")]
    LimitExceeded {
        /// What is too large.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The largest accepted value.
        limit: u64,
    },
    /// A user group is named `world`.
    #[error("the group name \"world\" is reserved")]
    ReservedGroupName,
    /// A group has no lists, or a list with no ranks.
    #[error("group {group:?} has an empty rank list")]
    EmptyGroupList {
        /// The group.
        group: String,
    },
    /// A rank in a group list is outside the world.
    #[error("group {group:?} names rank {rank}, outside the world")]
    GroupRankOutsideWorld {
        /// The group.
        group: String,
        /// The rank.
        rank: usize,
    },
    /// A rank appears twice among the lists of one group name.
    #[error("rank {rank} appears more than once in the lists of group {group:?}")]
    OverlappingGroupLists {
        /// The group.
        group: String,
        /// The rank.
        rank: usize,
    },
    /// A declared stream is `compute` or declared twice.
    #[error("stream {0:?} is reserved or declared twice")]
    InvalidStreamName(String),
    /// An op's `ranks` names a rank outside the world (or twice).
    #[error("ranks names rank {0}, outside the world or twice")]
    RankOutsideWorld(usize),
    /// A `peer` outside the world.
    #[error("peer {0} is outside the world")]
    PeerOutsideWorld(usize),
    /// A send or recv whose peer is the executing rank.
    #[error("send/recv to self")]
    SendToSelf,
    /// A group name that is not defined.
    #[error("undefined group {0:?}")]
    UndefinedGroup(String),
    /// A stream name that is neither `compute` nor declared.
    #[error("undefined stream {0:?}")]
    UndefinedStream(String),
    /// A tensor name that this rank never allocated.
    #[error("undefined tensor {0:?}")]
    UndefinedTensor(String),
    /// A work name that this rank never issued.
    #[error("undefined work {0:?}")]
    UndefinedWork(String),
    /// The rank runs a group op on a group whose lists do not contain it.
    #[error("this rank is not in any list of group {0:?}")]
    NotInGroup(String),
    /// A `broadcast` root outside the group.
    #[error("broadcast root {root} is not a group rank of a group of size {size}")]
    RootOutsideGroup {
        /// The root (a group rank).
        root: usize,
        /// The group size.
        size: usize,
    },
    /// `async: false` with a `work`.
    #[error("a synchronous op may not carry a work")]
    WorkOnSyncOp,
    /// `async: true` without a `work`.
    #[error("an asynchronous op needs a work")]
    AsyncWithoutWork,
    /// A `batch` with no members.
    #[error("empty batch")]
    EmptyBatch,
    /// A `batch` receives into a tensor that another of its members also uses.
    #[error("batch receives into {0:?}, which another member of the batch also uses")]
    BatchTensorConflict(String),
    /// `copy` with `src` equal to `dst`.
    #[error("copy from {0:?} to itself")]
    CopyToSelf(String),
    /// A `copy` offset or length that is not a multiple of 16 elements.
    #[error("copy {field} = {value} is not a multiple of 16 elements")]
    MisalignedCopy {
        /// `src_offset`, `dst_offset` or `elems`.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// Tensor sizes that the op does not allow.
    #[error("size mismatch in {op}: {detail}")]
    SizeMismatch {
        /// The op.
        op: &'static str,
        /// What does not fit.
        detail: String,
    },
    /// `alloc` of a name that is still live.
    #[error("tensor {0:?} allocated again while live")]
    ReallocatedWhileLive(String),
    /// Use of a tensor name after its `free`.
    #[error("tensor {0:?} used after free")]
    UseAfterFree(String),
    /// A tensor name still allocated when the schedule ends.
    #[error("tensor {0:?} still live at the end of the schedule")]
    LiveAtEnd(String),
    /// A read of elements that were never written since the allocation.
    #[error("reads element {elem} of {tensor:?}, never written")]
    UninitializedRead {
        /// The tensor.
        tensor: String,
        /// The first undefined element read.
        elem: u64,
    },
    /// A work issued again while still pending.
    #[error("work {0:?} reused before it was waited or dropped")]
    WorkReused(String),
    /// A `wait`/`drop_work` of a work already waited or dropped.
    #[error("work {0:?} already waited or dropped")]
    WorkNotPending(String),
    /// A work never waited nor dropped.
    #[error("work {0:?} never waited or dropped")]
    WorkNeverWaited(String),
    /// The members of a communicator disagree on their k-th collective.
    #[error("collective #{index} on {communicator} does not match the other members: {detail}")]
    CollectiveMismatch {
        /// `group[list index]`.
        communicator: String,
        /// k: the position among this communicator's collectives in the segment.
        index: usize,
        /// What differs.
        detail: String,
    },
    /// A collective that some member of its communicator never issues in this segment.
    #[error(
        "collective #{index} on {communicator} is not issued by every member in this phase and iteration"
    )]
    UnmatchedCollective {
        /// `group[list index]`.
        communicator: String,
        /// k.
        index: usize,
    },
    /// A send or recv without a counterpart in the same phase and iteration.
    #[error("{dir} with peer {peer} has no matching {} in this phase and iteration", if *dir == "send" { "recv" } else { "send" })]
    UnmatchedP2p {
        /// `send` or `recv`.
        dir: &'static str,
        /// The peer.
        peer: usize,
    },
    /// Matched send and recv of different sizes.
    #[error("send/recv with peer {peer}: {elems} elements here, {peer_elems} at the peer")]
    P2pSizeMismatch {
        /// The peer.
        peer: usize,
        /// Elements here.
        elems: u64,
        /// Elements at the peer.
        peer_elems: u64,
    },
    /// The strictest execution cannot make progress: this rank is blocked here.
    #[error("deadlock under the strictest execution: blocked at {op} (iteration {iter})")]
    Deadlock {
        /// The blocked op.
        op: &'static str,
        /// The phase index `iter`.
        iter: u32,
    },
    /// A value, or a reduction's absolute total (sum) or product (prod), beyond the
    /// floating type's exactness bound 2^(significand bits + 1).
    #[error(
        "{tensor:?} leaves the exactness bound of {dtype}: |value| up to {magnitude} > 2^{bound_exp} (iteration {iter})"
    )]
    ExactnessExceeded {
        /// The tensor written.
        tensor: String,
        /// Its element type.
        dtype: DType,
        /// The magnitude reached.
        magnitude: u64,
        /// The bound's exponent: 11 f16, 8 bf16, 24 f32, 53 f64, 4 f8e4m3, 3 f8e5m2.
        bound_exp: u32,
        /// The phase index `iter`.
        iter: u32,
    },
    /// A value or intermediate of a reduction outside the integer type's range.
    #[error(
        "{tensor:?} leaves the range of {dtype} ({min}..={max}): a reduction reaches {reached} (iteration {iter})"
    )]
    RangeExceeded {
        /// The tensor written.
        tensor: String,
        /// Its element type.
        dtype: DType,
        /// The first value or intermediate outside the range.
        reached: i128,
        /// The type's smallest value.
        min: i128,
        /// The type's largest value.
        max: i128,
        /// The phase index `iter`.
        iter: u32,
    },
    /// An op that combines tensors of different element types.
    #[error("{op} needs tensors of one element type: {detail}")]
    TypeMismatch {
        /// The op.
        op: &'static str,
        /// Which tensors have which types.
        detail: String,
    },
    /// A reduction on a type that only takes part in data movement.
    #[error(
        "{op} cannot reduce {dtype} tensor {tensor:?}: fp8 types take part in data movement only (all_gather, broadcast, all_to_all, send, recv)"
    )]
    NoReduction {
        /// `all_reduce` or `reduce_scatter`.
        op: &'static str,
        /// The tensor.
        tensor: String,
        /// Its element type.
        dtype: DType,
    },
    /// Matched send and recv of different element types.
    #[error("send/recv with peer {peer}: {dtype} here, {peer_dtype} at the peer")]
    P2pTypeMismatch {
        /// The peer.
        peer: usize,
        /// The type here.
        dtype: DType,
        /// The type at the peer.
        peer_dtype: DType,
    },
    /// An access to a tensor of a pending communication op before waiting for it.
    #[error("{access} {tensor:?} while work {work} still uses it (wait first)")]
    AccessBeforeWait {
        /// `reads` or `writes`.
        access: &'static str,
        /// The tensor.
        tensor: String,
        /// The pending work (or `(dropped)`).
        work: String,
    },
    /// A tensor used on a foreign stream freed without `record_stream` or a host wait.
    #[error(
        "tensor {tensor:?} used on stream {stream:?} (not its allocation stream) is freed without record_stream or a host wait"
    )]
    MissingRecordStream {
        /// The tensor.
        tensor: String,
        /// The foreign stream.
        stream: String,
    },
    /// More errors than the cap; the rest were not reported.
    #[error("too many errors; stopped after {0}")]
    TooManyErrors(usize),
}
