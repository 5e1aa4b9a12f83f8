//! Constructors for the mock's own [`BackendError`]s (injected faults, timeouts, internal
//! failures), so every message names the backend the same way; refused arguments and
//! out-of-memory use core's [`BackendError::invalid_argument`] and
//! [`BackendError::out_of_memory`] with [`BACKEND_NAME`].

use std::time::Duration;

use memreuse_core::BackendError;

/// The backend name in every error and in the registry.
pub const BACKEND_NAME: &str = "mock";

/// A fault planted on purpose.
pub(crate) fn injected(what: impl Into<String>) -> BackendError {
    BackendError::Injected {
        backend: BACKEND_NAME.to_owned(),
        what: what.into(),
    }
}

/// A host wait or a joint op that did not finish in `after`.
pub(crate) fn timeout(what: impl Into<String>, after: Duration) -> BackendError {
    BackendError::Timeout {
        backend: BACKEND_NAME.to_owned(),
        what: what.into(),
        millis: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
    }
}

/// A failure of the simulated device itself (a worker thread that could not start).
pub(crate) fn device(call: &'static str, message: impl Into<String>) -> BackendError {
    BackendError::Device {
        backend: BACKEND_NAME.to_owned(),
        call,
        code: -1,
        code_name: "MOCK_INTERNAL".to_owned(),
        message: message.into(),
    }
}

/// A joint op of an aborted group (`JointGroup::abort`).
pub(crate) fn aborted(reason: &str) -> BackendError {
    BackendError::Device {
        backend: BACKEND_NAME.to_owned(),
        call: "joint op",
        code: -2,
        code_name: "MOCK_GROUP_ABORTED".to_owned(),
        message: format!("the group was aborted: {reason}"),
    }
}
