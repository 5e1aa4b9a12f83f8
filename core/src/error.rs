//! The error every backend call returns.

use thiserror::Error;

/// What went wrong in a backend call. Every variant names the backend and, where one was
/// involved, the vendor call, so a message read in a CI log says where to look.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendError {
    /// The device could not provide `requested` bytes. The caching allocator turns this
    /// into its retry chain and, at the end, into [`crate::OutOfMemory`]-style errors.
    #[error("{backend}: device out of memory allocating {requested} bytes ({detail})")]
    OutOfMemory {
        /// Backend name.
        backend: String,
        /// Bytes asked of the device.
        requested: u64,
        /// Vendor code or explanation.
        detail: String,
    },
    /// The backend cannot be used on this machine (library or device missing).
    #[error("backend `{backend}` unavailable: {reason}")]
    Unavailable {
        /// Backend name.
        backend: String,
        /// What is missing and where it was looked for.
        reason: String,
    },
    /// An argument the backend refuses (unknown pointer, range outside an allocation,
    /// handle from another device, misaligned copy).
    #[error("{backend}: invalid argument to {call}: {reason}")]
    InvalidArgument {
        /// Backend name.
        backend: String,
        /// The operation that refused it.
        call: &'static str,
        /// Why.
        reason: String,
    },
    /// A vendor call failed with a status code.
    #[error("{backend}: {call} failed with {code_name} ({code}): {message}")]
    Device {
        /// Backend name.
        backend: String,
        /// The vendor call.
        call: &'static str,
        /// The vendor's numeric status.
        code: i64,
        /// The vendor's symbolic name of the status.
        code_name: String,
        /// Explanation.
        message: String,
    },
    /// An operation did not finish in time (a rank that never arrives, a hung stream).
    #[error("{backend}: {what} timed out after {millis} ms")]
    Timeout {
        /// Backend name.
        backend: String,
        /// What was waited for.
        what: String,
        /// How long it waited.
        millis: u64,
    },
    /// The device is gone or unusable (reset, fell off the bus, a sticky fault): nothing
    /// more will run on it, and every later call may fail the same way.
    #[error("{backend}: device lost: {reason}")]
    DeviceLost {
        /// Backend name.
        backend: String,
        /// The vendor's explanation (status name and code where there is one).
        reason: String,
    },
    /// The backend does not offer this operation (an optional interface it does not
    /// declare in [`crate::Capabilities`], such as virtual memory).
    #[error("{backend}: {call} is not supported: {reason}")]
    Unsupported {
        /// Backend name.
        backend: String,
        /// The operation asked for.
        call: &'static str,
        /// Which capability is missing.
        reason: String,
    },
    /// A fault planted by fault injection (tests and conformance only).
    #[error("{backend}: injected fault: {what}")]
    Injected {
        /// Backend name.
        backend: String,
        /// Which fault.
        what: String,
    },
}

impl BackendError {
    /// [`BackendError::InvalidArgument`]: `backend` refused an argument to `call`. Every
    /// backend builds its refusals with this one constructor, so the messages read alike.
    pub fn invalid_argument(
        backend: impl Into<String>,
        call: &'static str,
        reason: impl Into<String>,
    ) -> Self {
        BackendError::InvalidArgument {
            backend: backend.into(),
            call,
            reason: reason.into(),
        }
    }

    /// [`BackendError::Unsupported`]: `backend` does not offer `call`; `reason` names the
    /// missing capability.
    pub fn unsupported(
        backend: impl Into<String>,
        call: &'static str,
        reason: impl Into<String>,
    ) -> Self {
        BackendError::Unsupported {
            backend: backend.into(),
            call,
            reason: reason.into(),
        }
    }

    /// [`BackendError::OutOfMemory`]: `backend` could not provide `requested` bytes.
    pub fn out_of_memory(
        backend: impl Into<String>,
        requested: u64,
        detail: impl Into<String>,
    ) -> Self {
        BackendError::OutOfMemory {
            backend: backend.into(),
            requested,
            detail: detail.into(),
        }
    }

    /// True for the device's out-of-memory error, the one the allocator retries on.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, BackendError::OutOfMemory { .. })
    }
}

/// `value` for an error message: at most 64 characters, with the full length given when
/// cut, so a hostile environment value (100 KB of it) cannot make a message huge.
pub(crate) fn clip(value: &str) -> String {
    const MAX_CHARS: usize = 64;
    match value.char_indices().nth(MAX_CHARS) {
        None => format!("{value:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes)", &value[..end], value.len()),
    }
}
