//! Race reports, as produced by the happens-before engine (the mock's native detector and
//! the [`super::RaceChecker`] adaptor).
//!
//! They live in core so that code generic over backends (the conformance runner) can read
//! them through [`crate::Backend::race_reports`] without knowing the backend.

use std::fmt;
use std::ops::Range;

use crate::ids::{AllocationId, StreamId};

/// Read or write.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum AccessKind {
    /// The op reads the bytes.
    Read,
    /// The op writes the bytes.
    Write,
}

/// Which kind of bug a race reveals.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum RaceKind {
    /// Both accesses belong to one allocation: the schedule (the user's program) forgot a
    /// wait or a `record_stream`.
    Schedule,
    /// The accesses belong to two allocations that share memory: the allocator or the reuse
    /// policy handed memory out while earlier work could still touch it.
    Reuse,
}

/// One side of a race: which op touched which bytes, from which stream.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RaceAccess {
    /// Op name and label (e.g. `memset_zero`, `all_reduce [body iter 2 op 5]`).
    pub op: String,
    /// The stream the op ran on.
    pub stream: StreamId,
    /// Read or write.
    pub kind: AccessKind,
    /// The allocation the bytes belonged to when the op was enqueued, if the allocator
    /// had annotated them.
    pub allocation: Option<AllocationId>,
}

/// Two conflicting accesses not ordered by happens-before.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RaceReport {
    /// Schedule race or reuse race.
    pub kind: RaceKind,
    /// Device address range both accesses touch (the overlap).
    pub range: Range<u64>,
    /// The access enqueued first.
    pub earlier: RaceAccess,
    /// The access enqueued second, which found the conflict.
    pub later: RaceAccess,
}

impl fmt::Display for RaceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            RaceKind::Schedule => "schedule race",
            RaceKind::Reuse => "reuse race",
        };
        write!(
            f,
            "{kind} on [{:#x}, {:#x}): {:?} by `{}` on {} ({}) is not ordered before {:?} by `{}` on {} ({})",
            self.range.start,
            self.range.end,
            self.earlier.kind,
            self.earlier.op,
            self.earlier.stream,
            self.earlier
                .allocation
                .map_or_else(|| "unannotated".to_owned(), |a| a.to_string()),
            self.later.kind,
            self.later.op,
            self.later.stream,
            self.later
                .allocation
                .map_or_else(|| "unannotated".to_owned(), |a| a.to_string()),
        )
    }
}
