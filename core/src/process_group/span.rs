//! Finished works as time spans, kept by a group for timelines.

use super::kind::CommKind;
use crate::ids::WorkId;

/// How many finished work spans a group keeps for
/// [`super::ProcessGroup::work_spans`].
pub const WORK_SPAN_CAPACITY: usize = 4096;

/// A finished work as a time span on the allocator's trace clock
/// ([`crate::allocator::trace_clock_us`]), for timelines.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct WorkSpan {
    /// The work.
    pub id: WorkId,
    /// The operation's name.
    pub op: &'static str,
    /// Collective or point-to-point.
    pub kind: CommKind,
    /// When the host issued it (µs on the trace clock).
    pub start_us: u64,
    /// When a host thread first observed it complete (µs on the trace clock): an upper
    /// bound of the device end, as precise as the polling that observed it.
    pub end_us: u64,
    /// Whether it ended with an error.
    pub failed: bool,
}
