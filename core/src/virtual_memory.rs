//! The optional virtual-memory interface a backend offers for expandable segments.
//!
//! PyTorch's `expandable_segments:True` reserves one large range of device *addresses* per
//! (stream, pool) and backs it with physical pages mapped at its end as blocks need them
//! (CUDA `cuMemAddressReserve`/`cuMemCreate`/`cuMemMap`, Ascend
//! `aclrtReserveMemAddress`/`aclrtMallocPhysical`/`aclrtMapMem`). A backend that can do
//! this sets [`crate::Capabilities::virtual_memory`] and implements the `vm_*` methods of
//! [`crate::Backend`]; the defaults refuse every call with [`BackendError::Unsupported`].
//!
//! # Rules a port must follow
//! - [`crate::Backend::vm_granularity`] is a power of two (and a multiple of
//!   [`crate::Capabilities::allocation_alignment`]); every size and address passed to the
//!   other `vm_*` calls is a multiple of it, or the call fails with
//!   [`BackendError::InvalidArgument`] (the real runtimes refuse unaligned sizes too).
//! - A reserved range holds addresses only: it consumes no device memory and nothing may
//!   access it until pages are mapped. Physical handles are what the capacity limits:
//!   `vm_create_physical` fails with [`BackendError::OutOfMemory`] when the device cannot
//!   provide the bytes, so the allocator's free-and-retry chain works unchanged.
//! - `vm_map` maps a whole handle (offset 0, the handle's full size, Ascend's constraint)
//!   at an address inside a reserved range, over pages that are not mapped, and makes it
//!   readable and writable by this device (CUDA's `cuMemSetAccess` is part of the call).
//! - `vm_unmap` removes the mapping of one earlier `vm_map` (its address and size). The
//!   caller guarantees no enqueued work still uses the pages (the allocator synchronizes
//!   the streams that used them first); after it, an access to those addresses is refused
//!   as it is for any address outside an allocation.
//! - A handle is released (`vm_release_physical`) only while unmapped; a range is released
//!   (`vm_release`) only when none of its pages is mapped. Both refuse otherwise with
//!   [`BackendError::InvalidArgument`] and leave the state unchanged.
//! - The contract kit ([`crate::testing::contract`]) checks these rules on every backend
//!   that declares the capability.
//!
//! # The rules written once
//! [`VmLedger`] keeps a device's reserved ranges, physical handles and mappings and
//! refuses every misuse above with an `InvalidArgument` naming the rule, before the driver
//! is called (each `check_*`; the `record_*` runs after the driver succeeded, so a refused
//! or failed call changes nothing); [`VmLedger::covers`] answers whether an access lies in
//! mapped pages, across adjacent mappings but not a hole. [`check_granularity`] and
//! [`check_aligned`] are the alignment rules. The CUDA and Ascend backends keep their
//! state in it, so a port to a new accelerator gets the rules for free: it wraps its
//! driver's calls between the ledger's checks and records and has nothing of its own to
//! test but the FFI.

mod granularity;
mod ledger;

use std::fmt;

use crate::error::BackendError;

pub use granularity::{GranularitySource, MIN_GRANULARITY, check_aligned, check_granularity};
pub use ledger::{VmHeld, VmLedger};

/// A physical memory allocation created by [`crate::Backend::vm_create_physical`], mapped
/// into reserved ranges by [`crate::Backend::vm_map`]. An opaque number the backend chose
/// (CUDA's `CUmemGenericAllocationHandle`, Ascend's `aclrtDrvMemHandle` as an integer).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PhysicalHandle(pub u64);

impl fmt::Debug for PhysicalHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "phys#{}", self.0)
    }
}

/// The error every default `vm_*` method returns: `backend` has no virtual-memory
/// interface, so `call` cannot run.
pub fn unsupported(backend: &str, call: &'static str) -> BackendError {
    BackendError::Unsupported {
        backend: backend.to_owned(),
        call,
        reason: "this backend does not declare the virtual_memory capability (needed by \
                 expandable_segments:True)"
            .to_owned(),
    }
}
