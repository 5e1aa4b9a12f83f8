//! The mock device's side of the virtual-memory interface
//! (`memreuse_core::virtual_memory`): each call checks and updates the device's
//! [`crate::memory::Memory`] and tells the happens-before layer, which sees a mapping as
//! an allocation and an unmapping as a free, so unmapping (and later remapping) a page
//! while work on it is not known complete is a reuse race.

use memreuse_core::{BackendError, DevicePtr, PhysicalHandle};

use crate::cluster_state::ClusterState;
use crate::memory::Memory;

/// `vm_map` on device `slot`: maps the handle and starts tracking the mapping's accesses.
pub(crate) fn map(
    w: &mut ClusterState,
    slot: usize,
    at: DevicePtr,
    h: PhysicalHandle,
) -> Result<(), BackendError> {
    let len = w.devices[slot].memory.vm_map(at.addr(), h.0)?;
    w.hb.mapped(slot, at.addr(), len);
    Ok(())
}

/// `vm_unmap` on device `slot`: the host unmaps, so every access to the pages must be
/// known complete.
pub(crate) fn unmap(
    w: &mut ClusterState,
    slot: usize,
    at: DevicePtr,
    bytes: u64,
) -> Result<(), BackendError> {
    w.devices[slot].memory.vm_unmap(at.addr(), bytes)?;
    w.hb.unmapped(slot, at.addr());
    Ok(())
}

/// Runs `f` on the memory of device `slot` (the calls that do not concern the race
/// detector).
pub(crate) fn with_memory<R>(
    w: &mut ClusterState,
    slot: usize,
    f: impl FnOnce(&mut Memory) -> Result<R, BackendError>,
) -> Result<R, BackendError> {
    f(&mut w.devices[slot].memory)
}
