//! The handles a [`crate::MockDevice`] gives out: [`MockStream`] and [`MockEvent`]. Plain
//! data naming a cluster, a device slot and a stream; the device checks them on every call.

use memreuse_core::race::VClock;
use parking_lot::Mutex;

/// A stream of a mock device. Plain data: equality and hashing follow the stream.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MockStream {
    /// The cluster's `Core::uid`.
    pub(crate) cluster: u64,
    /// The device's slot in its cluster.
    pub(crate) device: usize,
    /// The stream's global index in its cluster (also its clock component).
    pub(crate) index: usize,
}

/// Where an event was last recorded.
#[derive(Clone)]
pub(crate) struct Recorded {
    /// Global index of the recording stream.
    pub stream: usize,
    /// The stream position it completes at.
    pub target: u64,
    /// The stream's clock at the recording.
    pub clock: VClock,
}

/// An event of a mock device.
pub struct MockEvent {
    /// The cluster's `Core::uid`.
    pub(crate) cluster: u64,
    /// The device's slot in its cluster.
    pub(crate) device: usize,
    /// The last recording, if any.
    pub(crate) state: Mutex<Option<Recorded>>,
}

impl std::fmt::Debug for MockEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let recorded = self.state.lock().as_ref().map(|r| (r.stream, r.target));
        write!(
            f,
            "MockEvent(device {}, recorded {recorded:?})",
            self.device
        )
    }
}
