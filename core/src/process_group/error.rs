//! Process-group errors.

use thiserror::Error;

use crate::comm::CommError;
use crate::error::BackendError;
use crate::ids::WorkId;

/// What went wrong in a process-group call or a work.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum PgError {
    /// The communicator failed (synchronously or asynchronously).
    #[error("{op} ({work}) failed: {source}")]
    Comm {
        /// The operation.
        op: &'static str,
        /// The work.
        work: WorkId,
        /// The communicator's error.
        source: CommError,
    },
    /// A communicator call failed before any work was created.
    #[error(transparent)]
    Communicator(#[from] CommError),
    /// The device failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The work did not complete within the group's timeout.
    #[error("{op} ({work}) timed out after {millis} ms")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The work.
        work: WorkId,
        /// The timeout.
        millis: u64,
    },
    /// Tensors whose sizes or placement do not fit the operation.
    #[error("{op}: invalid argument: {reason}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// `MULTI_STREAM_MEMORY_REUSE` is malformed.
    #[error(transparent)]
    Config(#[from] crate::process_group::ReuseModeError),
    /// The process group was shut down or aborted.
    #[error("process group aborted: {reason}")]
    Aborted {
        /// Why.
        reason: String,
    },
}
