//! The handle types of [`crate::VulkanDevice`]: streams, events, and the gates that hold a
//! stream's later work on the host until the host's part (a collective, a delay) is done.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use ash::vk;
use memreuse_core::BackendError;
use parking_lot::Mutex;

use crate::raw::RawDevice;
use crate::sched::{Sched, counter};

/// A stream of a [`crate::VulkanDevice`]: a timeline semaphore and the chain of submits
/// that signal it. Handles are plain values; the semaphore lives as long as its device.
#[derive(Clone, Copy)]
pub struct VulkanStream {
    /// Identity of the device (unique in the process).
    pub(crate) device_uid: u64,
    /// Index among the device's streams (0: the default stream).
    pub(crate) index: usize,
    pub(crate) sem: vk::Semaphore,
}

impl PartialEq for VulkanStream {
    fn eq(&self, other: &Self) -> bool {
        (self.device_uid, self.index) == (other.device_uid, other.index)
    }
}
impl Eq for VulkanStream {}
impl Hash for VulkanStream {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.device_uid, self.index).hash(state);
    }
}
impl std::fmt::Debug for VulkanStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VulkanStream({} of device#{})",
            self.index, self.device_uid
        )
    }
}

/// An event: the `(stream, value)` of its last recording (none: complete).
pub struct VulkanEvent {
    pub(crate) device_uid: u64,
    pub(crate) at: Mutex<Option<(usize, vk::Semaphore, u64)>>,
}

impl std::fmt::Debug for VulkanEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self.at.lock() {
            Some((s, _, v)) => write!(f, "VulkanEvent(stream {s} value {v})"),
            None => write!(f, "VulkanEvent(unrecorded)"),
        }
    }
}

/// A closed gate on a stream: work enqueued on the stream after it is held on the host
/// until [`Gate::open`].
pub struct Gate {
    pub(crate) sched: Arc<Mutex<Sched>>,
    pub(crate) raw: Arc<RawDevice>,
    pub(crate) stream: usize,
    pub(crate) sem: vk::Semaphore,
    /// The stream's value just before the gate: what the host waits for.
    pub(crate) before: u64,
    /// The gate's own value, host-signalled when it opens.
    pub(crate) value: u64,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Gate(stream {} after {} at {})",
            self.stream, self.before, self.value
        )
    }
}

impl Gate {
    /// True once the stream completed everything enqueued before the gate.
    pub fn reached(&self) -> Result<bool, BackendError> {
        Ok(counter(&self.raw, self.sem)? >= self.before)
    }

    /// Opens the gate: signals its value and submits the work held behind it.
    ///
    /// Only call it after [`Gate::reached`] returned true (the host may signal a timeline
    /// value only above every pending signal).
    pub fn open(&self) {
        self.sched.lock().open_gate(self.stream, self.value);
    }

    /// Opens the gate without its host part done: waits for its value (and later ones) on
    /// this stream report `error` from now on. Same precondition as [`Gate::open`].
    pub fn open_failed(&self, error: BackendError) {
        let mut sched = self.sched.lock();
        sched.fail_gate(self.stream, self.value, error);
        sched.open_gate(self.stream, self.value);
    }
}
