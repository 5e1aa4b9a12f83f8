//! The mock device's side of the virtual-memory interface
//! (`memreuse_core::virtual_memory`): each call checks and updates the device's
//! [`crate::memory::Memory`] and tells the race detector, which sees a mapping as an
//! allocation and an unmapping as a free, so unmapping (and later remapping) a page while
//! work on it is not known complete is a reuse race.

use memreuse_core::{BackendError, DevicePtr, PhysicalHandle};

use crate::device::MockDevice;

/// `vm_map`: maps the handle and starts tracking the mapping's accesses.
pub(crate) fn map(d: &MockDevice, at: DevicePtr, h: PhysicalHandle) -> Result<(), BackendError> {
    let mut w = d.core().world.lock();
    let detect = w.race_detection;
    let dev = &mut w.devices[d.slot];
    let len = dev.memory.vm_map(at.addr(), h.0)?;
    if detect {
        dev.detector.track_allocation(at.addr(), len);
    }
    Ok(())
}

/// `vm_unmap`: the host unmaps, so every access to the pages must be known complete.
pub(crate) fn unmap(d: &MockDevice, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
    let mut w = d.core().world.lock();
    let detect = w.race_detection;
    let dev = &mut w.devices[d.slot];
    dev.memory.vm_unmap(at.addr(), bytes)?;
    if detect {
        dev.detector.free(at.addr(), &dev.host);
    }
    Ok(())
}

/// Runs `f` on the device's memory (the calls that do not concern the race detector).
pub(crate) fn with_memory<R>(
    d: &MockDevice,
    f: impl FnOnce(&mut crate::memory::Memory) -> Result<R, BackendError>,
) -> Result<R, BackendError> {
    f(&mut d.core().world.lock().devices[d.slot].memory)
}
