//! Errors across the boundary: memreuse's typed errors become a status code and the
//! thread-local message `last_error` returns; a panic becomes `MR_ERR_INTERNAL` (nothing
//! unwinds into the host).

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use memreuse_core::{BackendError, CommError};
use memreuse_plugin::abi::{
    MR_ERR_ABORTED, MR_ERR_DEVICE, MR_ERR_DEVICE_LOST, MR_ERR_INTERNAL, MR_ERR_INVALID_ARGUMENT,
    MR_ERR_OUT_OF_MEMORY, MR_ERR_TIMEOUT, MR_ERR_UNAVAILABLE, MR_ERR_UNSUPPORTED, MR_OK, MrStatus,
};

thread_local! {
    static MESSAGE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Records `message` for `last_error` and returns `status`.
pub(crate) fn fail(status: MrStatus, message: String) -> MrStatus {
    MESSAGE.with(|m| *m.borrow_mut() = message);
    status
}

/// `last_error`: the message of this thread's last failure, valid until its next call.
pub(crate) unsafe extern "C" fn last_error(len: *mut usize) -> *const c_char {
    MESSAGE.with(|m| {
        let m = m.borrow();
        if !len.is_null() {
            // SAFETY: the host passes a valid length out-pointer (header contract).
            unsafe { len.write(m.len()) };
        }
        // The String's buffer lives in this thread's storage until the next failure.
        m.as_ptr().cast()
    })
}

/// The status and message of a backend error (the message is the error's reason, so the
/// host's rebuilt error reads like the mock's own).
pub(crate) fn backend_status(e: &BackendError) -> MrStatus {
    let (status, message) = match e {
        BackendError::InvalidArgument { reason, .. } => (MR_ERR_INVALID_ARGUMENT, reason.clone()),
        BackendError::OutOfMemory { detail, .. } => (MR_ERR_OUT_OF_MEMORY, detail.clone()),
        BackendError::Unsupported { reason, .. } => (MR_ERR_UNSUPPORTED, reason.clone()),
        BackendError::Unavailable { reason, .. } => (MR_ERR_UNAVAILABLE, reason.clone()),
        BackendError::Timeout { what, millis, .. } => {
            (MR_ERR_TIMEOUT, format!("{what} after {millis} ms"))
        }
        BackendError::DeviceLost { reason, .. } => (MR_ERR_DEVICE_LOST, reason.clone()),
        other => (MR_ERR_DEVICE, other.to_string()),
    };
    fail(status, message)
}

/// The status and message of a communicator error.
pub(crate) fn comm_status(e: &CommError) -> MrStatus {
    match e {
        CommError::Backend(b) => backend_status(b),
        CommError::InvalidArgument { reason, .. } => fail(MR_ERR_INVALID_ARGUMENT, reason.clone()),
        CommError::Aborted { reason } => fail(MR_ERR_ABORTED, reason.clone()),
        other => fail(MR_ERR_DEVICE, other.to_string()),
    }
}

/// Runs an entry's body; a panic is `MR_ERR_INTERNAL`, never an unwind into the host.
pub(crate) fn guard(call: &str, body: impl FnOnce() -> MrStatus) -> MrStatus {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        fail(
            MR_ERR_INTERNAL,
            format!("{call}: the mock plugin panicked (a bug)"),
        )
    })
}

/// `MR_OK`, or the backend error's status.
pub(crate) fn done(r: Result<(), BackendError>) -> MrStatus {
    match r {
        Ok(()) => MR_OK,
        Err(e) => backend_status(&e),
    }
}

/// `MR_OK`, or the communicator error's status.
pub(crate) fn comm_done(r: Result<(), CommError>) -> MrStatus {
    match r {
        Ok(()) => MR_OK,
        Err(e) => comm_status(&e),
    }
}

/// A NULL argument the host must never pass.
pub(crate) fn null_argument(call: &str) -> MrStatus {
    fail(
        MR_ERR_INVALID_ARGUMENT,
        format!("{call}: a NULL handle or out-pointer"),
    )
}
