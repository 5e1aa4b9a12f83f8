//! Who is to blame for a race, and the fix in words: the program's own missing
//! `wait_stream` / `record_stream`, or the allocator or reuse policy.
//!
//! A [`super::RaceKind::Reuse`] race only says that two hand-outs shared memory while an
//! access of the first could still run. When the first hand-out was touched from a side
//! stream that the program never declared with `record_stream` (and no process-group work
//! recorded a use of it), the allocator had no way to know: that is the program's bug,
//! not the allocator's. [`advise`] tells the two apart from what the allocator recorded,
//! given through [`UseLookup`].

use std::fmt;

use super::op::HOST_STREAM;
use super::report::{RaceKind, RaceReport};
use crate::ids::{AllocationId, StreamId};

/// What the allocator knows about the stream uses recorded on a hand-out.
pub trait UseLookup {
    /// Whether a use of `stream` was recorded on `allocation` before it was freed
    /// (`record_stream` by the user or on behalf of a work); `None` when unknown (the
    /// hand-out is not in the lookup's records).
    fn had_recorded_use(&self, allocation: AllocationId, stream: StreamId) -> Option<bool>;
}

/// No records: every reuse race stays attributed to the allocator or policy.
impl UseLookup for () {
    fn had_recorded_use(&self, _: AllocationId, _: StreamId) -> Option<bool> {
        None
    }
}

/// The verdict on one race, with the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RaceAdvice {
    /// One hand-out touched from two streams with no ordering: the later stream must wait
    /// for the earlier one.
    MissingWaitStream {
        /// The stream that must wait.
        waiter: StreamId,
        /// The stream it must wait for.
        side: StreamId,
        /// The later op, which needs the wait before it.
        before_op: String,
    },
    /// A hand-out used on a side stream was freed without `record_stream` for that stream:
    /// the allocator reused its memory as the program allowed.
    MissingRecordStream {
        /// The freed hand-out.
        allocation: AllocationId,
        /// The side stream that used it.
        side: StreamId,
        /// The side stream's op that still ran.
        side_op: String,
    },
    /// The allocator or the reuse policy handed memory out while a use it knew about could
    /// still run (or nothing tells otherwise).
    AllocatorOrPolicy {
        /// True when the allocator's records show the use was declared; false when the
        /// records cannot say (then it may still be a missing `record_stream`).
        declared_use: bool,
    },
}

/// Classifies `report` with the allocator's records of declared stream uses.
pub fn advise(report: &RaceReport, uses: &dyn UseLookup) -> RaceAdvice {
    let (e, l) = (&report.earlier, &report.later);
    match report.kind {
        RaceKind::Schedule => RaceAdvice::MissingWaitStream {
            waiter: l.stream,
            side: e.stream,
            before_op: l.op.clone(),
        },
        RaceKind::Reuse => {
            let Some(allocation) = e.allocation else {
                return RaceAdvice::AllocatorOrPolicy {
                    declared_use: false,
                };
            };
            if e.stream == HOST_STREAM {
                return RaceAdvice::AllocatorOrPolicy {
                    declared_use: false,
                };
            }
            match uses.had_recorded_use(allocation, e.stream) {
                Some(false) => RaceAdvice::MissingRecordStream {
                    allocation,
                    side: e.stream,
                    side_op: e.op.clone(),
                },
                Some(true) => RaceAdvice::AllocatorOrPolicy { declared_use: true },
                None => RaceAdvice::AllocatorOrPolicy {
                    declared_use: false,
                },
            }
        }
    }
}

impl RaceAdvice {
    /// True when the program, not the allocator or policy, has the bug.
    pub fn is_program_bug(&self) -> bool {
        !matches!(self, RaceAdvice::AllocatorOrPolicy { .. })
    }
}

impl fmt::Display for RaceAdvice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RaceAdvice::MissingWaitStream {
                waiter,
                side,
                before_op,
            } => write!(
                f,
                "program bug (missing wait_stream): {waiter} must wait_stream({side}) before `{before_op}`"
            ),
            RaceAdvice::MissingRecordStream {
                allocation,
                side,
                side_op,
            } => write!(
                f,
                "program bug (missing record_stream): add record_stream({allocation}, {side}) before the free of {allocation} (it is still used by `{side_op}` on {side})"
            ),
            RaceAdvice::AllocatorOrPolicy { declared_use: true } => write!(
                f,
                "allocator or reuse-policy bug: the use was declared with record_stream, yet the memory was handed out again before it ended"
            ),
            RaceAdvice::AllocatorOrPolicy {
                declared_use: false,
            } => write!(
                f,
                "allocator or reuse-policy bug, unless the program used the memory on a stream it never declared (no record of its uses)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::race::{AccessKind, RaceAccess};

    struct Records(Vec<(AllocationId, StreamId)>);

    impl UseLookup for Records {
        fn had_recorded_use(&self, a: AllocationId, s: StreamId) -> Option<bool> {
            Some(self.0.contains(&(a, s)))
        }
    }

    fn access(op: &str, stream: u64, alloc: u64) -> RaceAccess {
        RaceAccess {
            op: op.to_owned(),
            stream: StreamId(stream),
            kind: AccessKind::Write,
            allocation: Some(AllocationId(alloc)),
        }
    }

    fn report(kind: RaceKind, earlier: RaceAccess, later: RaceAccess) -> RaceReport {
        RaceReport {
            kind,
            range: 0..64,
            earlier,
            later,
        }
    }

    #[test]
    fn a_side_stream_use_never_declared_is_the_programs_missing_record_stream() {
        let r = report(
            RaceKind::Reuse,
            access("memset_zero [op 3]", 2, 10),
            access("fill [op 5]", 0, 11),
        );
        let a = advise(&r, &Records(vec![]));
        assert_eq!(
            a,
            RaceAdvice::MissingRecordStream {
                allocation: AllocationId(10),
                side: StreamId(2),
                side_op: "memset_zero [op 3]".to_owned()
            }
        );
        assert!(a.is_program_bug());
        assert!(
            a.to_string()
                .contains("add record_stream(alloc#10, stream#2) before the free of alloc#10"),
            "{a}"
        );
    }

    #[test]
    fn a_declared_use_reused_early_is_the_allocators_bug() {
        let r = report(
            RaceKind::Reuse,
            access("all_reduce", 2, 10),
            access("fill", 0, 11),
        );
        let a = advise(&r, &Records(vec![(AllocationId(10), StreamId(2))]));
        assert_eq!(a, RaceAdvice::AllocatorOrPolicy { declared_use: true });
        assert!(!a.is_program_bug());
        assert!(
            a.to_string().starts_with("allocator or reuse-policy bug"),
            "{a}"
        );
        // Without records the verdict stays with the allocator, saying why it may not be.
        let unknown = advise(&r, &());
        assert_eq!(
            unknown,
            RaceAdvice::AllocatorOrPolicy {
                declared_use: false
            }
        );
    }

    #[test]
    fn a_schedule_race_says_which_stream_must_wait_for_which() {
        let r = report(
            RaceKind::Schedule,
            access("all_reduce [op 2]", 1, 10),
            access("read [op 4]", 0, 10),
        );
        let a = advise(&r, &());
        assert!(a.is_program_bug());
        assert_eq!(
            a.to_string(),
            "program bug (missing wait_stream): stream#0 must wait_stream(stream#1) before `read [op 4]`"
        );
    }
}
