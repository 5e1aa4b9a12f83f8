//! The ops of `memreuse.schedule/1` (docs/schedules.md "Ops").
//!
//! [`OpKind`] is the serde model of one op object without its `ranks` field; [`Op`] adds
//! `ranks`, which every op may carry. They are split because serde's `flatten` cannot be
//! combined with `deny_unknown_fields`, and unknown fields must be rejected everywhere.

use memreuse_core::DType;
use serde::{Deserialize, Serialize};

/// Element-wise reduction of `all_reduce` and `reduce_scatter`.
///
/// `avg` is left out on purpose (docs/schedule-format.md "Typed tensors"): a division by
/// the rank count is not exact in general, and every schedule result must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    /// Sum (the default).
    #[default]
    Sum,
    /// Product.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

impl ReduceOp {
    /// The names a schedule's `reduce` accepts, as one line for error messages.
    pub const NAMES: &'static str = "sum, prod, max, min";

    /// The name as written in `reduce`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sum => "sum",
            Self::Prod => "prod",
            Self::Max => "max",
            Self::Min => "min",
        }
    }
}

impl std::fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> Deserialize<'de> for ReduceOp {
    /// Accepts [`ReduceOp::NAMES`]; `avg` gets its own reason (it is a reduction the
    /// library has, but no schedule may use).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        match name.as_str() {
            "sum" => Ok(Self::Sum),
            "prod" => Ok(Self::Prod),
            "max" => Ok(Self::Max),
            "min" => Ok(Self::Min),
            "avg" => Err(serde::de::Error::custom(format!(
                "reduce \"avg\" is not allowed in schedules (its results are not exact in \
                 general); valid are {}",
                Self::NAMES
            ))),
            other => Err(serde::de::Error::custom(format!(
                "unknown reduce {:?}: valid are {}",
                super::echo::clip(other),
                Self::NAMES
            ))),
        }
    }
}

/// serde of `alloc`'s optional `dtype` by its name ([`DType::NAMES`]); an unknown name is
/// an error that lists the valid ones.
mod dtype_field {
    use memreuse_core::DType;
    use serde::{Deserialize, Deserializer, Serializer};

    // serde's `serialize_with` takes a reference to the field.
    #[allow(clippy::ref_option, clippy::trivially_copy_pass_by_ref)]
    pub(super) fn serialize<S: Serializer>(v: &Option<DType>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(t) => s.serialize_str(t.name()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DType>, D::Error> {
        let name = String::deserialize(d)?;
        name.parse::<DType>().map(Some).map_err(|_| {
            serde::de::Error::custom(format!(
                "unknown dtype {:?}: valid are {}",
                super::super::echo::clip(&name),
                DType::NAMES
            ))
        })
    }
}

// serde's `skip_serializing_if` takes a path to a fn of `&T`.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_false(b: &bool) -> bool {
    !*b
}

/// One member of a `batch`: a `send` or `recv` without `async`, `work` or `ranks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum BatchMember {
    /// Sends `t` to global rank `peer`.
    Send {
        /// Tensor read.
        t: String,
        /// Global rank of the receiver.
        peer: usize,
    },
    /// Receives into `t` from global rank `peer`.
    Recv {
        /// Tensor written.
        t: String,
        /// Global rank of the sender.
        peer: usize,
    },
}

impl BatchMember {
    /// The tensor the member reads (send) or writes (recv).
    pub fn tensor(&self) -> &str {
        match self {
            Self::Send { t, .. } | Self::Recv { t, .. } => t,
        }
    }

    /// The peer's global rank.
    pub fn peer(&self) -> usize {
        match self {
            Self::Send { peer, .. } | Self::Recv { peer, .. } => *peer,
        }
    }

    /// Whether this member sends.
    pub fn is_send(&self) -> bool {
        matches!(self, Self::Send { .. })
    }
}

/// One op object of a schedule, without `ranks` (see [`Op`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum OpKind {
    /// Allocates `t` with `elems` elements of `dtype`; contents undefined.
    Alloc {
        /// Tensor name.
        t: String,
        /// Number of elements of `dtype`.
        elems: u64,
        /// Element type (default `f32`); the tensor's bytes are `elems` x its size.
        #[serde(default, with = "dtype_field", skip_serializing_if = "Option::is_none")]
        dtype: Option<DType>,
        /// Allocation stream (default: the current stream).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<String>,
    },
    /// Writes the upload pattern into `t`.
    Upload {
        /// Tensor name.
        t: String,
        /// Pattern seed.
        seed: u32,
    },
    /// Writes 0.0 into every element of `t`.
    Zero {
        /// Tensor name.
        t: String,
    },
    /// Copies `elems` elements from `src[src_offset..]` to `dst[dst_offset..]`.
    Copy {
        /// Source tensor.
        src: String,
        /// Destination tensor.
        dst: String,
        /// First source element (multiple of 16).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        src_offset: Option<u64>,
        /// First destination element (multiple of 16).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dst_offset: Option<u64>,
        /// Element count (multiple of 16); without it both tensors are copied whole.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        elems: Option<u64>,
    },
    /// In-place all-reduce of `t`.
    AllReduce {
        /// Tensor read and written.
        t: String,
        /// Reduction (default `sum`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reduce: Option<ReduceOp>,
        /// Group name (default `world`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
        /// Asynchronous issue; requires `work`.
        #[serde(rename = "async", default, skip_serializing_if = "is_false")]
        is_async: bool,
        /// Work handle name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        work: Option<String>,
    },
    /// Gathers `in` of every group member into `out`, ordered by group rank.
    AllGather {
        /// Input tensor.
        #[serde(rename = "in")]
        input: String,
        /// Output tensor (`in.elems * group size`).
        out: String,
        /// Group name (default `world`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
        /// Asynchronous issue; requires `work`.
        #[serde(rename = "async", default, skip_serializing_if = "is_false")]
        is_async: bool,
        /// Work handle name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        work: Option<String>,
    },
    /// Reduces `in` over the group; group rank r gets chunk r in `out`.
    ReduceScatter {
        /// Input tensor (`out.elems * group size`).
        #[serde(rename = "in")]
        input: String,
        /// Output tensor.
        out: String,
        /// Reduction (default `sum`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reduce: Option<ReduceOp>,
        /// Group name (default `world`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
        /// Asynchronous issue; requires `work`.
        #[serde(rename = "async", default, skip_serializing_if = "is_false")]
        is_async: bool,
        /// Work handle name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        work: Option<String>,
    },
    /// Chunk j of group rank i lands in chunk i of group rank j.
    AllToAll {
        /// Input tensor.
        #[serde(rename = "in")]
        input: String,
        /// Output tensor (same length as `in`, divisible by the group size).
        out: String,
        /// Group name (default `world`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
        /// Asynchronous issue; requires `work`.
        #[serde(rename = "async", default, skip_serializing_if = "is_false")]
        is_async: bool,
        /// Work handle name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        work: Option<String>,
    },
    /// Copies the root's `t` into every other member's `t`.
    Broadcast {
        /// Tensor read (root) or written (others).
        t: String,
        /// Group rank of the root (default 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        root: Option<usize>,
        /// Group name (default `world`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
        /// Asynchronous issue; requires `work`.
        #[serde(rename = "async", default, skip_serializing_if = "is_false")]
        is_async: bool,
        /// Work handle name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        work: Option<String>,
    },
    /// Sends `t` to global rank `peer`.
    Send {
        /// Tensor read.
        t: String,
        /// Global rank of the receiver.
        peer: usize,
        /// Asynchronous issue; requires `work`.
        #[serde(rename = "async", default, skip_serializing_if = "is_false")]
        is_async: bool,
        /// Work handle name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        work: Option<String>,
    },
    /// Receives `t` from global rank `peer`.
    Recv {
        /// Tensor written.
        t: String,
        /// Global rank of the sender.
        peer: usize,
        /// Asynchronous issue; requires `work`.
        #[serde(rename = "async", default, skip_serializing_if = "is_false")]
        is_async: bool,
        /// Work handle name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        work: Option<String>,
    },
    /// Sends and receives issued as one group with one work.
    Batch {
        /// The members, in the order they contribute to p2p matching.
        ops: Vec<BatchMember>,
        /// Asynchronous issue; requires `work`.
        #[serde(rename = "async", default, skip_serializing_if = "is_false")]
        is_async: bool,
        /// Work handle name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        work: Option<String>,
    },
    /// Synchronous barrier over a group.
    Barrier {
        /// Group name (default `world`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
    },
    /// The current stream waits for `work`.
    Wait {
        /// Work handle name.
        work: String,
    },
    /// Discards `work` without waiting.
    DropWork {
        /// Work handle name.
        work: String,
    },
    /// Drops this rank's handle to `t`.
    Free {
        /// Tensor name.
        t: String,
    },
    /// Makes `stream` current.
    SetStream {
        /// Stream name.
        stream: String,
    },
    /// `stream` waits for all work enqueued on `on` so far.
    WaitStream {
        /// The waiting stream.
        stream: String,
        /// The stream waited on.
        on: String,
    },
    /// The user's `record_stream(t, stream)`.
    RecordStream {
        /// Tensor name.
        t: String,
        /// Stream name.
        stream: String,
    },
    /// The host waits for all work of this rank's device.
    Sync,
    /// Reads `t` back on the current stream; compared with the reference.
    Check {
        /// Tensor name.
        t: String,
    },
    /// Releases cached, unused memory to the device.
    EmptyCache,
    /// Device-side busy period of `us` microseconds.
    Delay {
        /// Duration in microseconds.
        us: u64,
        /// Stream (default: current).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<String>,
    },
}

/// The communication-op fields shared by async-capable ops: `(async, work)`.
pub type AsyncWork<'a> = (bool, Option<&'a str>);

impl OpKind {
    /// The op's name as written in `"op"`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Alloc { .. } => "alloc",
            Self::Upload { .. } => "upload",
            Self::Zero { .. } => "zero",
            Self::Copy { .. } => "copy",
            Self::AllReduce { .. } => "all_reduce",
            Self::AllGather { .. } => "all_gather",
            Self::ReduceScatter { .. } => "reduce_scatter",
            Self::AllToAll { .. } => "all_to_all",
            Self::Broadcast { .. } => "broadcast",
            Self::Send { .. } => "send",
            Self::Recv { .. } => "recv",
            Self::Batch { .. } => "batch",
            Self::Barrier { .. } => "barrier",
            Self::Wait { .. } => "wait",
            Self::DropWork { .. } => "drop_work",
            Self::Free { .. } => "free",
            Self::SetStream { .. } => "set_stream",
            Self::WaitStream { .. } => "wait_stream",
            Self::RecordStream { .. } => "record_stream",
            Self::Sync => "sync",
            Self::Check { .. } => "check",
            Self::EmptyCache => "empty_cache",
            Self::Delay { .. } => "delay",
        }
    }

    /// Whether this is a communication op (runs on the process group's comm stream).
    pub fn is_comm(&self) -> bool {
        self.group().is_some()
            || matches!(
                self,
                Self::Send { .. } | Self::Recv { .. } | Self::Batch { .. }
            )
    }

    /// Whether this is a collective (including `barrier`).
    pub fn is_collective(&self) -> bool {
        self.group().is_some()
    }

    /// For collectives, the group name (defaulting to `world`); `None` for other ops.
    pub fn group(&self) -> Option<&str> {
        match self {
            Self::AllReduce { group, .. }
            | Self::AllGather { group, .. }
            | Self::ReduceScatter { group, .. }
            | Self::AllToAll { group, .. }
            | Self::Broadcast { group, .. }
            | Self::Barrier { group } => Some(group.as_deref().unwrap_or(crate::schedule::WORLD)),
            _ => None,
        }
    }

    /// `(async, work)` of a communication op that can be asynchronous; `None` otherwise.
    pub fn async_work(&self) -> Option<AsyncWork<'_>> {
        match self {
            Self::AllReduce { is_async, work, .. }
            | Self::AllGather { is_async, work, .. }
            | Self::ReduceScatter { is_async, work, .. }
            | Self::AllToAll { is_async, work, .. }
            | Self::Broadcast { is_async, work, .. }
            | Self::Send { is_async, work, .. }
            | Self::Recv { is_async, work, .. }
            | Self::Batch { is_async, work, .. } => Some((*is_async, work.as_deref())),
            _ => None,
        }
    }
}

/// One op of a schedule: its kind and the global ranks that execute it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// What the op does.
    pub kind: OpKind,
    /// The global ranks that execute it (`None`: all ranks).
    pub ranks: Option<Vec<usize>>,
}

impl Op {
    /// An op executed by every rank.
    pub fn all(kind: OpKind) -> Self {
        Self { kind, ranks: None }
    }

    /// An op executed by the listed global ranks only.
    pub fn on(kind: OpKind, ranks: Vec<usize>) -> Self {
        Self {
            kind,
            ranks: Some(ranks),
        }
    }

    /// Whether global rank `rank` executes this op.
    pub fn runs_on(&self, rank: usize) -> bool {
        self.ranks.as_ref().is_none_or(|r| r.contains(&rank))
    }
}

impl Serialize for Op {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Serialize the kind to a JSON object, then add `ranks`: the inverse of parsing.
        let mut value = serde_json::to_value(&self.kind).map_err(serde::ser::Error::custom)?;
        if let (Some(ranks), Some(map)) = (&self.ranks, value.as_object_mut()) {
            map.insert("ranks".to_owned(), serde_json::json!(ranks));
        }
        value.serialize(serializer)
    }
}
