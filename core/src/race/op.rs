//! [`OpInfo`]: what a race report says about the op behind an access, and
//! [`HOST_STREAM`], the stream the host's own accesses (a raw `free`) are reported on.
//!
//! Its own file because every layer of the race module names it: the access history
//! stores it, the race log copies it into reports, the detector and the happens-before
//! layer create it.

use crate::ids::StreamId;

/// The stream id race reports use for the host (a raw `free` racing with device work).
pub const HOST_STREAM: StreamId = StreamId(u64::MAX);

/// What a race report says about the op behind an access.
#[derive(Debug)]
pub struct OpInfo {
    /// Enqueue number, unique among the ops of one world (tells apart two ops with equal
    /// descriptions).
    pub seq: u64,
    /// Op kind and label, e.g. `memset_zero [step 3]`.
    pub desc: String,
    /// The stream it was enqueued on.
    pub stream: StreamId,
}
