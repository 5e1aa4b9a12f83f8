//! [`crate::CudaDevice`]'s optional virtual-memory interface (`memreuse_core::virtual_memory`)
//! over the CUDA driver's virtual memory management, through cudarc's raw bindings
//! (`cudarc::driver::sys`, cudarc 0.19 at CUDA 12.8), as PyTorch's expandable segments use it:
//!
//! | `Backend` call | driver calls |
//! | --- | --- |
//! | `vm_granularity` | `cuMemGetAllocationGranularity(.., CU_MEM_ALLOC_GRANULARITY_MINIMUM)` (asked once) |
//! | `vm_reserve` | `cuMemAddressReserve(&p, size, 0, 0, 0)` |
//! | `vm_release` | `cuMemAddressFree(base, size)` |
//! | `vm_create_physical` | `cuMemCreate(&h, size, {PINNED, device}, 0)` |
//! | `vm_release_physical` | `cuMemRelease(h)` |
//! | `vm_map` | `cuMemMap(at, size, 0, h, 0)` then `cuMemSetAccess(at, size, {device, READWRITE})` (on failure the map is undone) |
//! | `vm_unmap` | `cuMemUnmap(at, size)` |
//!
//! - **Capability.** Declared only when `cuDeviceGetAttribute(
//!   CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)` is non-zero (read once at
//!   open); otherwise every call is `BackendError::Unsupported` giving the attribute's value
//!   or why it could not be read.
//! - **Checks before the driver** (the core's `memreuse_core::virtual_memory::VmLedger`,
//!   each an `InvalidArgument` naming the rule):
//!   sizes and addresses non-zero multiples of the granularity; a map of a live, unmapped
//!   handle, whole, inside one reserved range, over no mapping; an unmap of exactly one
//!   whole mapping; a handle released only unmapped; a range released only by its base and
//!   with nothing mapped. The ledger changes only after the driver succeeded, so a refused or
//!   failed call leaves the state as it was (a failed `cuMemSetAccess` undoes its map).
//! - **Errors.** Each call runs under [`error::guard`] (cudarc panics on a symbol the driver
//!   lacks: `Unavailable`, never a panic); `CUDA_ERROR_OUT_OF_MEMORY` from `cuMemCreate` or
//!   `cuMemAddressReserve` is `OutOfMemory` (the allocator's retry chain); other failures are
//!   `Device` errors naming the call, as is a granularity that is not a power of two of at
//!   least 256 bytes (the driver's value breaking the core's rules, not the caller's).
//! - **Access.** Mapped pages count as live memory for the device's address checks
//!   (`CudaDevice::check_range`); one access may span adjacent mappings, not a hole.
//! - **Drop.** What is left mapped, created or reserved is released after the context was
//!   synchronized.
//!
//! What ran where: the bookkeeping's unit tests run everywhere (in `memreuse-core`); the
//! driver calls have **not yet run on a GPU**. `tests/gpu.rs`
//! (`virtual_memory_on_the_device`: the contract kit's `virtual_memory` check, an access over
//! two mappings, refusals, the typed OOM, an allocator with `expandable_segments:True`) is
//! what `scripts/gpu-check.sh` runs where one is present, with its own summary line.

use cudarc::driver::sys;
use memreuse_core::virtual_memory::{
    GranularitySource, VmLedger, check_aligned, check_granularity,
};
use memreuse_core::{BackendError, DevicePtr, PhysicalHandle};

use crate::error::{self, BACKEND_NAME};

/// Who reports the granularity, for the error when it breaks the core's rules.
const GRANULARITY_SOURCE: GranularitySource = GranularitySource {
    backend: BACKEND_NAME,
    call: "cuMemGetAllocationGranularity",
    success_code: "CUDA_SUCCESS",
    reporter: "driver",
};

/// Whether the device supports virtual memory management, read once at open.
#[derive(Clone, Debug)]
pub(crate) enum Support {
    /// The attribute is non-zero.
    Yes,
    /// Why not, in words (the attribute's value or the error reading it).
    No(String),
}

/// The driver symbols the virtual-memory path calls.
const VM_SYMBOLS: [&str; 8] = [
    "cuMemGetAllocationGranularity",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemSetAccess",
    "cuMemUnmap",
];

/// Reads `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` of `device`, after
/// checking that the driver exports every symbol of [`VM_SYMBOLS`].
pub(crate) fn query_support(device: sys::CUdevice, ordinal: usize) -> Support {
    let read = error::guard("cuDeviceGetAttribute", || {
        // SAFETY: `device` came from the context cudarc opened for this ordinal.
        unsafe {
            cudarc::driver::result::device::get_attribute(
                device,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            )
        }
        .map_err(|e| error::driver("cuDeviceGetAttribute", e))
    });
    // Each symbol by name: cudarc panics at the first call of one the driver lacks, and
    // the attribute does not prove the symbols are there.
    if let Some(missing) = VM_SYMBOLS.iter().find(|n| !crate::standin::driver_has(n)) {
        return Support::No(format!(
            "the CUDA driver library does not export {missing} (needed with cuMemAddressReserve, \
             cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree, \
             cuMemGetAllocationGranularity)"
        ));
    }
    match read {
        Ok(0) => Support::No(format!(
            "CUDA device {ordinal} reports CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0"
        )),
        Ok(_) => Support::Yes,
        Err(e) => Support::No(format!(
            "reading CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED of CUDA device \
             {ordinal} failed: {e}"
        )),
    }
}

/// The per-device state: support, the granularity once asked, the ledger.
pub(crate) struct DeviceVm {
    support: Support,
    ordinal: usize,
    granularity: Option<u64>,
    ledger: VmLedger,
}

fn location(ordinal: usize) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: i32::try_from(ordinal).unwrap_or(i32::MAX),
    }
}

/// Pinned device memory of `ordinal`, no shareable handle (PyTorch asks for a POSIX file
/// descriptor handle only for IPC, which memreuse does not do).
fn properties(ordinal: usize) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: location(ordinal),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

fn size_t(call: &'static str, bytes: u64) -> Result<usize, BackendError> {
    usize::try_from(bytes).map_err(|_| {
        BackendError::invalid_argument(BACKEND_NAME, call, format!("{bytes} bytes exceed usize"))
    })
}

impl DeviceVm {
    pub(crate) fn new(support: Support, ordinal: usize) -> DeviceVm {
        DeviceVm {
            support,
            ordinal,
            granularity: None,
            ledger: VmLedger::new(BACKEND_NAME),
        }
    }

    /// True when the capability is declared.
    pub(crate) fn supported(&self) -> bool {
        matches!(self.support, Support::Yes)
    }

    /// True while a range, handle or mapping is held (the drop must release them).
    pub(crate) fn holds_anything(&self) -> bool {
        !self.ledger.is_empty()
    }

    /// True when `[start, end)` lies in mapped pages.
    pub(crate) fn covers(&self, start: u64, end: u64) -> bool {
        self.ledger.covers(start, end)
    }

    fn require(&self, call: &'static str) -> Result<(), BackendError> {
        match &self.support {
            Support::Yes => Ok(()),
            Support::No(why) => Err(BackendError::Unsupported {
                backend: BACKEND_NAME.to_owned(),
                call,
                reason: format!(
                    "{why}: no virtual-memory interface (needed by expandable_segments:True)"
                ),
            }),
        }
    }

    /// The minimum granularity of pinned memory on this device (asked once).
    pub(crate) fn granularity(&mut self) -> Result<u64, BackendError> {
        self.require("vm_granularity")?;
        if let Some(g) = self.granularity {
            return Ok(g);
        }
        let prop = properties(self.ordinal);
        let g = error::guard("cuMemGetAllocationGranularity", || {
            let mut g = 0usize;
            // SAFETY: both pointers are valid for the call; `prop` is fully initialised.
            unsafe {
                sys::cuMemGetAllocationGranularity(
                    &raw mut g,
                    &raw const prop,
                    sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )
            }
            .result()
            .map_err(|e| error::driver("cuMemGetAllocationGranularity", e))?;
            Ok(g as u64)
        })?;
        let g = check_granularity(g, &GRANULARITY_SOURCE)?;
        self.granularity = Some(g);
        Ok(g)
    }

    pub(crate) fn reserve(&mut self, bytes: u64) -> Result<DevicePtr, BackendError> {
        self.require("vm_reserve")?;
        let g = self.granularity()?;
        check_aligned(BACKEND_NAME, "vm_reserve", "size", bytes, g)?;
        let size = size_t("vm_reserve", bytes)?;
        let base = error::guard("cuMemAddressReserve", || {
            let mut p: sys::CUdeviceptr = 0;
            // SAFETY: `p` is a valid out-pointer; alignment 0 (the granularity), no fixed
            // address and flags 0 are the documented defaults.
            unsafe { sys::cuMemAddressReserve(&raw mut p, size, 0, 0, 0) }
                .result()
                .map_err(|e| error::out_of_memory_or("cuMemAddressReserve", bytes, e))?;
            Ok(p)
        })?;
        self.ledger.record_reserve(DevicePtr(base), bytes);
        Ok(DevicePtr(base))
    }

    pub(crate) fn release(&mut self, base: DevicePtr) -> Result<(), BackendError> {
        self.require("vm_release")?;
        let len = self.ledger.check_release(base)?;
        let size = size_t("vm_release", len)?;
        error::guard("cuMemAddressFree", || {
            // SAFETY: a live reservation of this device with nothing mapped, with its size.
            unsafe { sys::cuMemAddressFree(base.addr(), size) }
                .result()
                .map_err(|e| error::driver("cuMemAddressFree", e))
        })?;
        self.ledger.record_release(base);
        Ok(())
    }

    pub(crate) fn create_physical(&mut self, bytes: u64) -> Result<PhysicalHandle, BackendError> {
        self.require("vm_create_physical")?;
        let g = self.granularity()?;
        check_aligned(BACKEND_NAME, "vm_create_physical", "size", bytes, g)?;
        let size = size_t("vm_create_physical", bytes)?;
        let prop = properties(self.ordinal);
        let handle = error::guard("cuMemCreate", || {
            let mut h: sys::CUmemGenericAllocationHandle = 0;
            // SAFETY: `h` is a valid out-pointer, `prop` fully initialised; flags 0.
            unsafe { sys::cuMemCreate(&raw mut h, size, &raw const prop, 0) }
                .result()
                .map_err(|e| error::out_of_memory_or("cuMemCreate", bytes, e))?;
            Ok(h)
        })?;
        self.ledger.record_create(PhysicalHandle(handle), bytes);
        Ok(PhysicalHandle(handle))
    }

    pub(crate) fn release_physical(&mut self, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.require("vm_release_physical")?;
        self.ledger.check_release_physical(handle)?;
        error::guard("cuMemRelease", || {
            // SAFETY: a live, unmapped handle of this device, released once (forgotten
            // below).
            unsafe { sys::cuMemRelease(handle.0) }
                .result()
                .map_err(|e| error::driver("cuMemRelease", e))
        })?;
        self.ledger.record_release_physical(handle);
        Ok(())
    }

    pub(crate) fn map(
        &mut self,
        at: DevicePtr,
        handle: PhysicalHandle,
    ) -> Result<(), BackendError> {
        self.require("vm_map")?;
        let g = self.granularity()?;
        check_aligned(BACKEND_NAME, "vm_map", "address", at.addr(), g)?;
        let bytes = self.ledger.check_map(at, handle)?;
        let size = size_t("vm_map", bytes)?;
        let access = sys::CUmemAccessDesc {
            location: location(self.ordinal),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        error::guard("cuMemMap", || {
            // SAFETY: `at` lies in a live reservation with nothing mapped over the range; the
            // handle is live, unmapped and `size` bytes (offset 0, flags 0).
            unsafe { sys::cuMemMap(at.addr(), size, 0, handle.0, 0) }
                .result()
                // CUDA lists CUDA_ERROR_OUT_OF_MEMORY for cuMemMap: the allocator's retry
                // signal, as for cuMemCreate.
                .map_err(|e| error::out_of_memory_or("cuMemMap", bytes, e))?;
            // SAFETY: the range was mapped just now; `access` lives for the call (count 1).
            let access_set =
                unsafe { sys::cuMemSetAccess(at.addr(), size, &raw const access, 1) }.result();
            if let Err(e) = access_set {
                // Leave the state as it was: the mapping is undone.
                // SAFETY: the mapping made above, not yet used by anything.
                let _ = unsafe { sys::cuMemUnmap(at.addr(), size) };
                return Err(error::driver("cuMemSetAccess", e));
            }
            Ok(())
        })?;
        self.ledger.record_map(at, handle, bytes);
        Ok(())
    }

    pub(crate) fn unmap(&mut self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        self.require("vm_unmap")?;
        self.ledger.check_unmap(at, bytes)?;
        let size = size_t("vm_unmap", bytes)?;
        error::guard("cuMemUnmap", || {
            // SAFETY: exactly one live mapping of `size` bytes; the caller guarantees no
            // enqueued work still uses it (the `Backend::vm_unmap` contract).
            unsafe { sys::cuMemUnmap(at.addr(), size) }
                .result()
                .map_err(|e| error::driver("cuMemUnmap", e))
        })?;
        self.ledger.record_unmap(at);
        Ok(())
    }

    /// Unmaps, releases and frees everything still held; the device is idle. Errors cannot
    /// be reported from a drop and are ignored.
    pub(crate) fn release_all(&mut self) {
        let held = self.ledger.take_all();
        let _ = error::guard("release_all", || {
            for (at, len) in held.mappings {
                // SAFETY: a live mapping of this device, unmapped once (taken from the ledger);
                // the device was synchronized.
                let _ = unsafe { sys::cuMemUnmap(at.addr(), len as usize) };
            }
            for h in held.handles {
                // SAFETY: a live handle, now unmapped, released once.
                let _ = unsafe { sys::cuMemRelease(h.0) };
            }
            for (base, len) in held.ranges {
                // SAFETY: a live reservation, now empty, freed once.
                let _ = unsafe { sys::cuMemAddressFree(base.addr(), len as usize) };
            }
            Ok(())
        });
    }
}
