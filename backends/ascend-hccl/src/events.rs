//! [`AscendEvent`] and the per-device pool its raw ACL events come from.
//!
//! Every event is an `ACL_EVENT_SYNC` event. The runtime documents that events created
//! without `ACL_EVENT_SYNC` are not supported by `aclrtStreamWaitEvent`, and the `Backend`
//! contract gives no hint of which events will be waited on (the process group waits on the
//! very events it creates), so none is created without it, as torch_npu's `NPUEvent` does by
//! default. A SYNC event takes a runtime resource when recorded and a device has 65,536 of
//! them, so raw events are pooled: dropping an [`AscendEvent`] returns its handle to the
//! device's pool and `create_event` hands it out again, so the number of raw events
//! stays the largest number alive at once (plus at most [`MAX_IDLE_EVENTS`] idle), and more
//! than [`MAX_LIVE_EVENTS`] is refused with a typed error instead of blocking in a record.
//!
//! Re-recording: only events from `aclrtCreateEventExWithFlag` are documented as
//! re-recordable and as reporting complete before their first record. With that symbol
//! absent, events come from `aclrtCreateEventWithFlag` and each record after the first is
//! preceded by `aclrtResetEvent` on the recording stream. Either way, an event handed out
//! by `create_event` counts as unrecorded until [`AscendEvent`] is recorded: queries
//! report complete and waits are no-ops without asking the runtime (a pooled handle's old
//! recording must not leak into the new event).
//!
//! A raw event whose last recording has not completed is not handed out again before the
//! runtime reports it complete, so a reset never races a wait still pending on it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use memreuse_core::BackendError;
use parking_lot::Mutex;

use crate::loader::Api;
use crate::result::{AclError, BACKEND, acl};
use crate::runtime::bind;
use crate::sys;

/// The flags of every event this backend creates.
pub const EVENT_FLAGS: u32 = sys::ACL_EVENT_SYNC;
/// Raw events alive per device (in use, idle or settling) beyond which `create_event` is
/// refused: far below the runtime's 65,536 SYNC events per device.
pub const MAX_LIVE_EVENTS: usize = 16_384;
/// Idle raw events a device keeps for reuse; more are destroyed.
pub const MAX_IDLE_EVENTS: usize = 1024;
/// Settling events (returned before their recording completed) checked per `take`.
const SETTLE_CHECKS: usize = 4;

/// A raw ACL event handle and whether it was recorded since it was created or reset.
#[derive(Clone, Copy, Debug)]
struct Raw {
    handle: usize,
    dirty: bool,
}

#[derive(Default)]
struct PoolState {
    /// Never recorded, or last recording known complete.
    idle: Vec<Raw>,
    /// Returned while their last recording may still be pending (oldest first).
    settling: VecDeque<Raw>,
    /// Raw events created and not destroyed.
    live: usize,
}

/// The raw events of one device.
pub(crate) struct EventPool {
    api: &'static Api,
    device: i32,
    state: Mutex<PoolState>,
}

/// An event of an [`crate::AscendDevice`] (an `ACL_EVENT_SYNC` event); its raw handle
/// returns to the device's pool on drop.
pub struct AscendEvent {
    raw: usize,
    /// Recorded since creation or since the last `aclrtResetEvent` (non-Ex events).
    dirty: AtomicBool,
    /// Recorded since this `AscendEvent` was handed out.
    recorded: AtomicBool,
    pool: Arc<EventPool>,
}

impl std::fmt::Debug for AscendEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AscendEvent({:#x} on npu:{})",
            self.raw, self.pool.device
        )
    }
}

impl Drop for AscendEvent {
    fn drop(&mut self) {
        let raw = Raw {
            handle: self.raw,
            dirty: self.dirty.load(Ordering::Acquire),
        };
        self.pool.give(raw, self.recorded.load(Ordering::Acquire));
    }
}

impl EventPool {
    pub(crate) fn new(api: &'static Api, device: i32) -> Arc<EventPool> {
        Arc::new(EventPool {
            api,
            device,
            state: Mutex::new(PoolState::default()),
        })
    }

    /// True when events come from `aclrtCreateEventExWithFlag` (re-recordable as is).
    fn ex(&self) -> bool {
        self.api.aclrtCreateEventExWithFlag.is_some()
    }

    /// Raw events created and not destroyed (for tests and diagnostics).
    pub(crate) fn live(&self) -> usize {
        self.state.lock().live
    }

    /// An unrecorded event: an idle raw event, a settled one, or a new one.
    pub(crate) fn take(self: &Arc<Self>) -> Result<AscendEvent, BackendError> {
        bind(self.api, self.device)?;
        let reused = {
            let mut st = self.state.lock();
            let mut found = st.idle.pop();
            for _ in 0..SETTLE_CHECKS.min(st.settling.len()) {
                if found.is_some() {
                    break;
                }
                let Some(candidate) = st.settling.pop_front() else {
                    break;
                };
                if self.completed(candidate.handle) {
                    found = Some(candidate);
                } else {
                    st.settling.push_back(candidate);
                }
            }
            if found.is_none() && st.live >= MAX_LIVE_EVENTS {
                // At the limit: wait for the oldest settling event rather than create one.
                found = st.settling.pop_front();
                if let Some(r) = found {
                    if acl::synchronize_event(self.api, r.handle as _).is_err() {
                        st.settling.push_back(r);
                        found = None;
                    }
                }
            }
            if found.is_none() {
                if st.live >= MAX_LIVE_EVENTS {
                    return Err(BackendError::Device {
                        backend: BACKEND.to_owned(),
                        call: "create_event",
                        code: 207_007,
                        code_name: "ACL_ERROR_RT_NO_EVENT_RESOURCE".to_owned(),
                        message: format!(
                            "{} events are alive on npu:{} (this backend's limit, far below \
                             the runtime's 65536 SYNC events per device); drop events first",
                            st.live, self.device
                        ),
                    });
                }
                st.live += 1;
            }
            found
        };
        let raw = match reused {
            Some(r) => r,
            None => match self.create_raw() {
                Ok(handle) => Raw {
                    handle,
                    dirty: false,
                },
                Err(e) => {
                    self.state.lock().live -= 1;
                    return Err(e);
                }
            },
        };
        Ok(AscendEvent {
            raw: raw.handle,
            dirty: AtomicBool::new(raw.dirty),
            recorded: AtomicBool::new(false),
            pool: Arc::clone(self),
        })
    }

    fn create_raw(&self) -> Result<usize, BackendError> {
        let raw = match self.api.aclrtCreateEventExWithFlag {
            Some(f) => acl::create_event_ex_with_flag(f, EVENT_FLAGS)?,
            None => acl::create_event_with_flag(self.api, EVENT_FLAGS)?,
        };
        Ok(raw as usize)
    }

    /// The runtime reports the raw event's last recording complete (errors count as not).
    fn completed(&self, handle: usize) -> bool {
        matches!(
            acl::query_event_status(self.api, handle as _),
            Ok(sys::ACL_EVENT_RECORDED_STATUS_COMPLETE)
        )
    }

    fn give(&self, raw: Raw, recorded: bool) {
        let mut st = self.state.lock();
        if recorded {
            st.settling.push_back(raw);
        } else if st.idle.len() < MAX_IDLE_EVENTS {
            st.idle.push(raw);
        } else {
            st.live -= 1;
            drop(st);
            self.destroy(raw.handle, false);
        }
    }

    fn destroy(&self, handle: usize, settle: bool) {
        if bind(self.api, self.device).is_err() {
            return;
        }
        if settle {
            // Nothing may still wait on an event that is destroyed.
            let _ = acl::synchronize_event(self.api, handle as _);
        }
        if let Err(AclError(code)) = acl::destroy_event(self.api, handle as _) {
            tracing::warn!(code, "aclrtDestroyEvent failed");
        }
    }
}

impl Drop for EventPool {
    fn drop(&mut self) {
        let st = std::mem::take(self.state.get_mut());
        for r in st.idle {
            self.destroy(r.handle, false);
        }
        for r in st.settling {
            self.destroy(r.handle, true);
        }
    }
}

impl AscendEvent {
    fn handle(&self) -> sys::aclrtEvent {
        self.raw as sys::aclrtEvent
    }

    /// Records the event on `stream` (resetting a non-Ex event recorded before).
    pub(crate) fn record(&self, stream: sys::aclrtStream) -> Result<(), BackendError> {
        let api = self.pool.api;
        if !self.pool.ex() && self.dirty.load(Ordering::Acquire) {
            acl::reset_event(api, self.handle(), stream)?;
            self.dirty.store(false, Ordering::Release);
        }
        acl::record_event(api, self.handle(), stream)?;
        self.dirty.store(true, Ordering::Release);
        self.recorded.store(true, Ordering::Release);
        Ok(())
    }

    /// True once the work before the last recording finished (an unrecorded event is
    /// complete, without asking the runtime).
    pub(crate) fn query(&self) -> Result<bool, BackendError> {
        if !self.recorded.load(Ordering::Acquire) {
            return Ok(true);
        }
        let status = acl::query_event_status(self.pool.api, self.handle())?;
        Ok(status == sys::ACL_EVENT_RECORDED_STATUS_COMPLETE)
    }

    /// Blocks until the event completed (at once when unrecorded).
    pub(crate) fn synchronize(&self) -> Result<(), BackendError> {
        if !self.recorded.load(Ordering::Acquire) {
            return Ok(());
        }
        acl::synchronize_event(self.pool.api, self.handle())
    }

    /// Makes `stream` wait for the event (nothing to wait for when unrecorded).
    pub(crate) fn wait_on(&self, stream: sys::aclrtStream) -> Result<(), BackendError> {
        if !self.recorded.load(Ordering::Acquire) {
            return Ok(());
        }
        acl::stream_wait_event(self.pool.api, stream, self.handle())
    }
}
