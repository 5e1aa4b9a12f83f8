//! Backend-specific extras of [`MockDevice`]: fault injection, errors of failed ops, and
//! what the race detector and the executor have seen.

use memreuse_core::BackendError;

use crate::cluster_state::ExecutedOp;
use crate::config::MallocFault;
use crate::device::MockDevice;

impl MockDevice {
    /// Replaces the planned malloc fault: `fault.nth` counts from the next `malloc`.
    pub fn inject_malloc_fault(&self, fault: MallocFault) {
        self.owner.core.state.lock().devices[self.slot]
            .memory
            .set_fault(Some(fault));
    }

    /// The most recent op failure on this device (a timed-out or mismatched joint op, a
    /// failing custom body), kept until [`MockDevice::take_last_error`].
    pub fn last_error(&self) -> Option<BackendError> {
        self.owner.core.state.lock().devices[self.slot]
            .last_error
            .clone()
    }

    /// Returns and clears the device's last error and the pending errors of its streams,
    /// after which waits on them succeed again.
    pub fn take_last_error(&self) -> Option<BackendError> {
        let mut w = self.owner.core.state.lock();
        let streams = w.hb.device_streams(self.slot).to_vec();
        for s in streams {
            w.streams[s].error = None;
        }
        w.devices[self.slot].last_error.take()
    }

    /// Number of distinct races found on this device, including those past the report cap.
    pub fn race_count(&self) -> u64 {
        self.owner.core.state.lock().hb.found(self.slot)
    }

    /// Ops executed so far in the whole cluster, in execution order (empty unless
    /// `MockConfig::trace_capacity` is set).
    pub fn execution_trace(&self) -> Vec<ExecutedOp> {
        self.owner.core.state.lock().trace.clone()
    }

    /// Access-history entries currently kept by the race detector (for tests of pruning).
    pub fn history_len(&self) -> usize {
        let mut w = self.owner.core.state.lock();
        w.hb.prune(self.slot);
        w.hb.history_len(self.slot)
    }

    /// Number of streams of this device (the default stream included).
    pub fn stream_count(&self) -> usize {
        self.owner
            .core
            .state
            .lock()
            .hb
            .device_streams(self.slot)
            .len()
    }
}
