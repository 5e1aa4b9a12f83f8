//! The handles of a plugin device: the device itself (closed last), its streams and its
//! events, each released through the plugin's matching entry by its last Rust handle.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use memreuse_core::{Capabilities, StreamId};

use crate::abi::{MrDevice, MrEvent, MrStream};
use crate::library::Plugin;

/// The open device: closed when the last device, stream, event or communicator handle of it
/// is dropped, after all of them (each holds this).
pub(crate) struct DeviceInner {
    pub(crate) plugin: Arc<Plugin>,
    pub(crate) raw: *mut MrDevice,
    pub(crate) index: usize,
    pub(crate) capabilities: Capabilities,
    pub(crate) grouping: bool,
}

// SAFETY: the header lets every device entry be called from any thread, concurrently.
unsafe impl Send for DeviceInner {}
// SAFETY: as for Send.
unsafe impl Sync for DeviceInner {}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        if let Some(close) = self.plugin.api.device_close {
            // SAFETY: `raw` came from device_open/world_open; every stream, event and
            // communicator of it held this and is gone, so this is its one close.
            unsafe { close(self.raw) };
        }
    }
}

pub(crate) struct StreamInner {
    pub(crate) raw: *mut MrStream,
    pub(crate) id: StreamId,
    pub(crate) device: *mut MrDevice,
    /// Created streams keep their device open and are destroyed on drop; the default
    /// stream belongs to the device and has `None`.
    pub(crate) owner: Option<Arc<DeviceInner>>,
}

// SAFETY: stream handles may be used from any thread (header threading rules).
unsafe impl Send for StreamInner {}
// SAFETY: as for Send.
unsafe impl Sync for StreamInner {}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if let Some(owner) = &self.owner
            && let Some(destroy) = owner.plugin.api.stream_destroy
        {
            // SAFETY: a stream from stream_create of this device, destroyed once, by its
            // last handle.
            unsafe { destroy(owner.raw, self.raw) };
        }
    }
}

/// A stream of a plugin device. Clones are handles to the same stream.
#[derive(Clone)]
pub struct PluginStream(pub(crate) Arc<StreamInner>);

impl PartialEq for PluginStream {
    fn eq(&self, other: &Self) -> bool {
        self.0.device == other.0.device && self.0.raw == other.0.raw
    }
}
impl Eq for PluginStream {}
impl Hash for PluginStream {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.id.hash(state);
    }
}
impl std::fmt::Debug for PluginStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PluginStream({})", self.0.id)
    }
}

/// An event of a plugin device, destroyed on drop.
pub struct PluginEvent {
    pub(crate) device: Arc<DeviceInner>,
    pub(crate) raw: *mut MrEvent,
}

// SAFETY: event handles may be used from any thread (header threading rules).
unsafe impl Send for PluginEvent {}
// SAFETY: as for Send.
unsafe impl Sync for PluginEvent {}

impl Drop for PluginEvent {
    fn drop(&mut self) {
        if let Some(destroy) = self.device.plugin.api.event_destroy {
            // SAFETY: an event from event_create of this device, destroyed once.
            unsafe { destroy(self.device.raw, self.raw) };
        }
    }
}

impl std::fmt::Debug for PluginEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PluginEvent")
    }
}
