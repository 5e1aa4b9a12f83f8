//! Communicator errors.

use thiserror::Error;

use super::dtype::{DType, ReduceOp};
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

    /// The refusal, before anything is enqueued, of a reduction `backend` cannot do: an
    /// [`CommError::InvalidArgument`] naming the backend, the element type and the operator,
    /// then `why`. Every backend refuses reductions with this one constructor, so a user
    /// reads the same sentence whichever backend refused.
    pub fn unsupported_reduction(
        backend: &str,
        call: &'static str,
        dtype: DType,
        op: ReduceOp,
        why: &str,
    ) -> Self {
        CommError::invalid_argument(
            call,
            format!("the {backend} backend cannot reduce {dtype} with {op}: {why}"),
        )
    }

    /// The reference rule ([`DType::reduces_with`]) as a check, for a backend that reduces
    /// exactly what core's reference arithmetic defines (the mock, Vulkan's host proxy, the
    /// plugin host).
    ///
    /// # Errors
    /// [`CommError::unsupported_reduction`] for `avg` on an integer type or any fp8
    /// reduction.
    pub fn check_reference_reduction(
        backend: &str,
        call: &'static str,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<(), Self> {
        if dtype.reduces_with(op) {
            Ok(())
        } else {
            Err(Self::unsupported_reduction(
                backend,
                call,
                dtype,
                op,
                REFERENCE_REDUCTION_RULE,
            ))
        }
    }
}

/// Why the reference arithmetic refuses a reduction, as [`CommError::check_reference_reduction`]
/// says it.
pub const REFERENCE_REDUCTION_RULE: &str =
    "avg is for floating types, and fp8 types move data but do not reduce";
