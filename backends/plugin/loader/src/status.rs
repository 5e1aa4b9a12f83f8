//! Turning a plugin's status code and thread-local message into memreuse's typed errors.

use memreuse_core::{BackendError, CommError};

use crate::abi::{
    MR_ERR_ABORTED, MR_ERR_DEVICE, MR_ERR_DEVICE_LOST, MR_ERR_INTERNAL, MR_ERR_INVALID_ARGUMENT,
    MR_ERR_OUT_OF_MEMORY, MR_ERR_TIMEOUT, MR_ERR_UNAVAILABLE, MR_ERR_UNSUPPORTED, MR_OK, MrStatus,
};
use crate::library::{Plugin, text};

/// The symbolic name of a status code.
pub fn status_name(status: MrStatus) -> &'static str {
    match status {
        MR_OK => "MR_OK",
        MR_ERR_INVALID_ARGUMENT => "MR_ERR_INVALID_ARGUMENT",
        MR_ERR_OUT_OF_MEMORY => "MR_ERR_OUT_OF_MEMORY",
        MR_ERR_UNSUPPORTED => "MR_ERR_UNSUPPORTED",
        MR_ERR_UNAVAILABLE => "MR_ERR_UNAVAILABLE",
        MR_ERR_DEVICE => "MR_ERR_DEVICE",
        MR_ERR_TIMEOUT => "MR_ERR_TIMEOUT",
        MR_ERR_DEVICE_LOST => "MR_ERR_DEVICE_LOST",
        MR_ERR_ABORTED => "MR_ERR_ABORTED",
        MR_ERR_INTERNAL => "MR_ERR_INTERNAL",
        _ => "an unknown status",
    }
}

impl Plugin {
    /// The plugin's message for the last failed call on this thread, copied.
    pub(crate) fn last_message(&self) -> String {
        let Some(last_error) = self.api.last_error else {
            return String::new();
        };
        let mut len = 0usize;
        // SAFETY: `last_error` is a required entry taking a length out-pointer; it returns
        // NULL or `len` bytes valid until the next call on this thread, copied at once.
        let msg = unsafe { text(last_error(&raw mut len), len) };
        msg.unwrap_or_else(|| "(no message)".to_owned())
    }

    /// The error for a failed device call `call` (`requested` bytes for allocations).
    pub(crate) fn backend_error(
        &self,
        status: MrStatus,
        call: &'static str,
        requested: u64,
    ) -> BackendError {
        let message = self.last_message();
        let backend = self.name.clone();
        match status {
            MR_ERR_INVALID_ARGUMENT => BackendError::invalid_argument(backend, call, message),
            MR_ERR_OUT_OF_MEMORY => BackendError::out_of_memory(backend, requested, message),
            MR_ERR_UNSUPPORTED => BackendError::unsupported(backend, call, message),
            MR_ERR_UNAVAILABLE => BackendError::Unavailable {
                backend,
                reason: format!("{call}: {message}"),
            },
            MR_ERR_TIMEOUT => BackendError::Timeout {
                backend,
                what: format!("{call} ({message})"),
                millis: 0,
            },
            MR_ERR_DEVICE_LOST => BackendError::DeviceLost {
                backend,
                reason: message,
            },
            _ => BackendError::Device {
                backend,
                call,
                code: i64::from(status),
                code_name: status_name(status).to_owned(),
                message,
            },
        }
    }

    /// `Ok(())` for `MR_OK`, else the typed error.
    pub(crate) fn check(&self, status: MrStatus, call: &'static str) -> Result<(), BackendError> {
        if status == MR_OK {
            Ok(())
        } else {
            Err(self.backend_error(status, call, 0))
        }
    }

    /// The error for a failed communicator call.
    pub(crate) fn comm_error(&self, status: MrStatus, call: &'static str) -> CommError {
        match status {
            MR_ERR_ABORTED => CommError::Aborted {
                reason: self.last_message(),
            },
            MR_ERR_INVALID_ARGUMENT => CommError::invalid_argument(call, self.last_message()),
            _ => CommError::Backend(self.backend_error(status, call, 0)),
        }
    }

    /// `Ok(())` for `MR_OK`, else the typed communicator error.
    pub(crate) fn check_comm(&self, status: MrStatus, call: &'static str) -> Result<(), CommError> {
        if status == MR_OK {
            Ok(())
        } else {
            Err(self.comm_error(status, call))
        }
    }

    /// The error for an entry that answered `MR_OK` without its handle or result.
    pub(crate) fn null_handle(&self, field: &'static str) -> BackendError {
        BackendError::Device {
            backend: self.name.clone(),
            call: field,
            code: i64::from(MR_OK),
            code_name: "MR_OK with a NULL handle".to_owned(),
            message: format!(
                "plugin {} (ABI {}, host {}): `{field}` reported success but returned no handle",
                self.path.display(),
                self.version,
                crate::HOST_ABI
            ),
        }
    }

    /// The error for an optional entry the plugin leaves NULL.
    pub(crate) fn absent(&self, call: &'static str) -> BackendError {
        BackendError::unsupported(
            self.name.clone(),
            call,
            format!(
                "plugin {} (ABI {}) leaves the optional entry `{call}` NULL",
                self.path.display(),
                self.version
            ),
        )
    }
}
