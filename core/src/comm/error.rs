//! Communicator errors.

use thiserror::Error;

use crate::error::BackendError;

/// What went wrong in a communicator call.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommError {
    /// The device side failed (includes vendor communicator codes and timeouts).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// An argument the communicator refuses (peer or root outside the group, bad count,
    /// a stream from another device, unbalanced group_start/group_end).
    #[error("communicator: invalid argument to {call}: {reason}")]
    InvalidArgument {
        /// The call.
        call: &'static str,
        /// Why.
        reason: String,
    },
    /// The communicator was aborted; nothing more runs on it.
    #[error("communicator aborted: {reason}")]
    Aborted {
        /// Why it was aborted.
        reason: String,
    },
}

impl CommError {
    /// [`CommError::InvalidArgument`]: the communicator refused an argument to `call`. Every
    /// backend's communicator builds its refusals with this one constructor.
    pub fn invalid_argument(call: &'static str, reason: impl Into<String>) -> Self {
        CommError::InvalidArgument {
            call,
            reason: reason.into(),
        }
    }
}
