//! [`AscendStream`]: an ACL stream of an [`crate::AscendDevice`], RAII. It is destroyed only
//! after it was synchronized; when that fails (a hung or aborted stream) it is destroyed
//! with `aclrtDestroyStreamForce` where the runtime has it. With a synchronize timeout set
//! and `aclrtSynchronizeStreamWithTimeout` present, a hung stream is a `Timeout` error
//! (507046) instead of a host thread blocked for good.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use memreuse_core::BackendError;

use crate::loader::Api;
use crate::result::{AclError, acl};
use crate::runtime::bind;
use crate::sys;

/// A stream of an [`crate::AscendDevice`]; synchronized and destroyed when the last clone drops.
#[derive(Clone)]
pub struct AscendStream(Arc<StreamInner>);

struct StreamInner {
    raw: usize,
    device: i32,
    api: &'static Api,
    /// The owning device's synchronize timeout (shared, so a later change applies).
    timeout_ms: Arc<AtomicI32>,
}

impl AscendStream {
    pub(crate) fn raw_handle(&self) -> sys::aclrtStream {
        self.0.raw as sys::aclrtStream
    }
}

/// `aclrtSynchronizeStreamWithTimeout` when a timeout is set and the runtime has it, else
/// `aclrtSynchronizeStream`; returns the status and the call's name.
fn sync_status(
    api: &Api,
    raw: sys::aclrtStream,
    timeout_ms: i32,
) -> (Result<(), AclError>, &'static str) {
    match api.aclrtSynchronizeStreamWithTimeout {
        Some(f) if timeout_ms >= 0 => (
            acl::synchronize_stream_with_timeout(f, raw, timeout_ms),
            "aclrtSynchronizeStreamWithTimeout",
        ),
        _ => (acl::synchronize_stream(api, raw), "aclrtSynchronizeStream"),
    }
}

/// Synchronizes the stream (bounded by `timeout_ms` as [`sync_status`] does), the failure
/// named after the call that was made.
pub(crate) fn synchronize(
    api: &Api,
    raw: sys::aclrtStream,
    timeout_ms: i32,
) -> Result<(), BackendError> {
    let (status, call) = sync_status(api, raw, timeout_ms);
    status.map_err(|e| e.into_backend(call, 0))
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if bind(self.api, self.device).is_err() {
            return;
        }
        let raw = self.raw as sys::aclrtStream;
        // aclrtDestroyStream requires the stream's work to be finished.
        let (synced, _) = sync_status(self.api, raw, self.timeout_ms.load(Ordering::Relaxed));
        let (destroyed, call) = match (synced, self.api.aclrtDestroyStreamForce) {
            // `raw` was created by aclrtCreateStream and is destroyed once, here.
            (Ok(()), _) | (_, None) => (acl::destroy_stream(self.api, raw), "aclrtDestroyStream"),
            // An abort path: the stream is hung or failed; force it.
            (Err(_), Some(force)) => (
                acl::destroy_stream_force(force, raw),
                "aclrtDestroyStreamForce",
            ),
        };
        if let Err(AclError(code)) = destroyed {
            let synced = synced.err().map_or(sys::ACL_SUCCESS, |e| e.0);
            tracing::warn!(code, synced, call, "destroying a stream failed");
        }
    }
}

impl PartialEq for AscendStream {
    fn eq(&self, other: &Self) -> bool {
        self.0.raw == other.0.raw
    }
}
impl Eq for AscendStream {}
impl std::hash::Hash for AscendStream {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.raw.hash(state);
    }
}
impl std::fmt::Debug for AscendStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AscendStream({:#x} on npu:{})",
            self.0.raw, self.0.device
        )
    }
}

/// Creates a stream on `device` (bound to this thread first) that shares the device's
/// synchronize timeout.
pub(crate) fn create_stream(
    api: &'static Api,
    device: i32,
    timeout_ms: &Arc<AtomicI32>,
) -> Result<AscendStream, BackendError> {
    bind(api, device)?;
    let raw = acl::create_stream(api)?;
    Ok(AscendStream(Arc::new(StreamInner {
        raw: raw as usize,
        device,
        api,
        timeout_ms: Arc::clone(timeout_ms),
    })))
}
