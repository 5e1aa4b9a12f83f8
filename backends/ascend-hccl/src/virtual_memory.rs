//! The optional virtual-memory interface (`memreuse_core::virtual_memory`) over ACL's
//! `aclrtReserveMemAddress` / `aclrtMallocPhysical` / `aclrtMapMem` family, which torch_npu's
//! expandable segments use.
//!
//! - **Optional symbols.** The six calls `aclrtReserveMemAddress`, `aclrtReleaseMemAddress`,
//!   `aclrtMallocPhysical`, `aclrtFreePhysical`, `aclrtMapMem`, `aclrtUnmapMem` must all be
//!   exported for [`memreuse_core::Capabilities::virtual_memory`] to be declared; without any
//!   one of them every `vm_*` call is [`BackendError::Unsupported`] naming the missing
//!   symbol. `aclrtMemGetAllocationGranularity` is optional on its own: without it the
//!   granularity is [`FALLBACK_GRANULARITY`] (the 2 MB page of `ACL_HBM_MEM_HUGE`).
//! - **Supported by the part.** A library may export the calls on a part or driver without
//!   virtual memory management, whose `aclrtReserveMemAddress` answers
//!   `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` (207000). So the first capability query or `vm_*`
//!   call reserves and releases one 2 MB page; a 207000 there declares no capability and
//!   makes every `vm_*` call `Unsupported` with that reason, so `expandable_segments:True`
//!   is refused when the allocator opens instead of failing its first allocation.
//! - **Arguments as the runtime documents them.** Reserve with alignment 0, `expectPtr`
//!   NULL, flags 0; physical memory is `ACL_MEM_HANDLE_TYPE_NONE`,
//!   `ACL_MEM_ALLOCATION_TYPE_PINNED`, `ACL_HBM_MEM_HUGE` on this device, flags 0, size a
//!   multiple of the granularity; a map covers the whole handle at offset 0, flags 0.
//! - **Checked before any FFI call.** ACL's `aclrtUnmapMem` takes only the address and the
//!   runtime's own refusals are status codes without a rule name, so each device keeps its
//!   reserved ranges, handles and mappings in the core's
//!   [`memreuse_core::virtual_memory::VmLedger`] and refuses misuse (unaligned size,
//!   unknown handle, a map outside a reserved range or over a mapping, a handle mapped
//!   twice, an unmap that is not exactly one mapping, releasing a mapped handle or a range
//!   with a mapping) with [`BackendError::InvalidArgument`] naming the rule. The ledger
//!   changes only after the runtime succeeded, so a failed call leaves the state as it was.
//! - **Errors** of the runtime go through [`crate::result::acl_check`]: 207001 / 207018 from
//!   `aclrtMallocPhysical` are `OutOfMemory`, so the allocator's free-and-retry chain runs.
//! - Handles and ranges still held when the last clone of the device drops are unmapped and
//!   released after the device was synchronized.

use memreuse_core::virtual_memory::{
    GranularitySource, VmLedger, check_aligned, check_granularity,
};
use memreuse_core::{BackendError, DevicePtr, PhysicalHandle};

use crate::loader::Api;
use crate::result::{BACKEND, vm};
use crate::sys;

/// The granularity used when the runtime lacks `aclrtMemGetAllocationGranularity`: the
/// 2 MB page of `ACL_HBM_MEM_HUGE`, the unit torch_npu maps.
pub const FALLBACK_GRANULARITY: u64 = 2 << 20;

/// Who reports the granularity, for the error when it breaks the core's rules (a power of
/// two and a multiple of the 256-byte allocation alignment): the runtime's value is
/// refused rather than passed on.
const GRANULARITY_SOURCE: GranularitySource = GranularitySource {
    backend: BACKEND,
    call: "aclrtMemGetAllocationGranularity",
    success_code: "ACL_SUCCESS",
    reporter: "runtime",
};

/// The symbols without which there is no virtual-memory interface.
pub const VM_SYMBOLS: [&str; 6] = [
    "aclrtReserveMemAddress",
    "aclrtReleaseMemAddress",
    "aclrtMallocPhysical",
    "aclrtFreePhysical",
    "aclrtMapMem",
    "aclrtUnmapMem",
];

/// The six required functions, resolved.
#[derive(Clone, Copy)]
struct Fns {
    reserve: sys::aclrtReserveMemAddress,
    release: sys::aclrtReleaseMemAddress,
    malloc_physical: sys::aclrtMallocPhysical,
    free_physical: sys::aclrtFreePhysical,
    map: sys::aclrtMapMem,
    unmap: sys::aclrtUnmapMem,
}

/// The first of [`VM_SYMBOLS`] the loaded runtime lacks, if any.
pub fn missing_symbol(api: &Api) -> Option<&'static str> {
    fns(api).err()
}

fn fns(api: &Api) -> Result<Fns, &'static str> {
    Ok(Fns {
        reserve: api.aclrtReserveMemAddress.ok_or(VM_SYMBOLS[0])?,
        release: api.aclrtReleaseMemAddress.ok_or(VM_SYMBOLS[1])?,
        malloc_physical: api.aclrtMallocPhysical.ok_or(VM_SYMBOLS[2])?,
        free_physical: api.aclrtFreePhysical.ok_or(VM_SYMBOLS[3])?,
        map: api.aclrtMapMem.ok_or(VM_SYMBOLS[4])?,
        unmap: api.aclrtUnmapMem.ok_or(VM_SYMBOLS[5])?,
    })
}

/// `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`: what `aclrtReserveMemAddress` answers on a part or
/// driver without virtual memory management, although the library exports the symbol (the
/// ACL layer has a branch of its own for it).
const ACL_ERROR_RT_FEATURE_NOT_SUPPORT: i32 = 207_000;

/// Whether the runtime manages virtual memory on the bound device: one granule reserved
/// and released. `Err` (why, in words) only for `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`; any
/// other answer is no verdict, and the real calls report their own errors.
fn probe(f: &Fns) -> Result<(), String> {
    // 2 MB is one page of `ACL_HBM_MEM_HUGE`.
    match vm::reserve_mem_address(f.reserve, 2 << 20) {
        Err(e) if e.0 == ACL_ERROR_RT_FEATURE_NOT_SUPPORT => Err(format!(
            "answers aclrtReserveMemAddress with ACL_ERROR_RT_FEATURE_NOT_SUPPORT ({})",
            e.0
        )),
        // The reservation made just now, never mapped, released once.
        Ok(base) if base != 0 => {
            let _ = vm::release_mem_address(f.release, base);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// What one device's virtual memory needs beyond the runtime: the probe's answer, the
/// granularity and the core's ledger of ranges, handles and mappings (see the module docs).
pub(crate) struct DeviceVm {
    /// The [`probe`]'s answer, once asked.
    probed: Option<Result<(), String>>,
    granularity: Option<u64>,
    ledger: VmLedger,
}

impl Default for DeviceVm {
    fn default() -> DeviceVm {
        DeviceVm {
            probed: None,
            granularity: None,
            ledger: VmLedger::new(BACKEND),
        }
    }
}

fn size_t(call: &'static str, bytes: u64) -> Result<usize, BackendError> {
    usize::try_from(bytes).map_err(|_| {
        BackendError::invalid_argument(BACKEND, call, format!("{bytes} bytes exceed size_t"))
    })
}

/// The properties of `device`'s memory in 2 MB pages.
fn huge_pages_of(
    call: &'static str,
    device: i32,
) -> Result<sys::aclrtPhysicalMemProp, BackendError> {
    let id = u32::try_from(device)
        .map_err(|_| BackendError::invalid_argument(BACKEND, call, format!("device {device}")))?;
    Ok(sys::aclrtPhysicalMemProp::device_huge(id))
}

impl DeviceVm {
    /// The six functions, if the runtime exports them and does not refuse virtual memory
    /// on this device ([`probe`], asked once); else `Unsupported` saying why.
    fn require(&mut self, api: &Api, call: &'static str) -> Result<Fns, BackendError> {
        let unsupported = |why: String| {
            BackendError::unsupported(
                BACKEND,
                call,
                format!(
                    "the ACL runtime loaded from {} {why}, so this device has no \
                     virtual-memory interface (needed by expandable_segments:True)",
                    api.source
                ),
            )
        };
        let f = fns(api).map_err(|symbol| unsupported(format!("does not export `{symbol}`")))?;
        match self.probed.get_or_insert_with(|| probe(&f)) {
            Ok(()) => Ok(f),
            Err(why) => Err(unsupported(why.clone())),
        }
    }

    /// True when every `vm_*` call may run: the capability (probes once; the device is
    /// bound).
    pub(crate) fn supported(&mut self, api: &Api) -> bool {
        self.require(api, "capabilities").is_ok()
    }

    /// The granularity (asked once): `aclrtMemGetAllocationGranularity` with the minimum
    /// option for `ACL_HBM_MEM_HUGE` memory of `device`, else [`FALLBACK_GRANULARITY`].
    pub(crate) fn granularity(&mut self, api: &Api, device: i32) -> Result<u64, BackendError> {
        self.require(api, "vm_granularity")?;
        if let Some(g) = self.granularity {
            return Ok(g);
        }
        let g = match api.aclrtMemGetAllocationGranularity {
            None => FALLBACK_GRANULARITY,
            Some(f) => {
                let mut prop = huge_pages_of("vm_granularity", device)?;
                vm::mem_get_allocation_granularity(
                    f,
                    &mut prop,
                    sys::ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
                )? as u64
            }
        };
        let g = check_granularity(g, &GRANULARITY_SOURCE)?;
        self.granularity = Some(g);
        Ok(g)
    }

    fn aligned(
        &mut self,
        api: &Api,
        device: i32,
        call: &'static str,
        what: &str,
        value: u64,
    ) -> Result<u64, BackendError> {
        let g = self.granularity(api, device)?;
        check_aligned(BACKEND, call, what, value, g)?;
        Ok(g)
    }

    /// `aclrtReserveMemAddress(&p, bytes, 0, NULL, 0)`.
    pub(crate) fn reserve(
        &mut self,
        api: &Api,
        device: i32,
        bytes: u64,
    ) -> Result<DevicePtr, BackendError> {
        let f = self.require(api, "vm_reserve")?;
        self.aligned(api, device, "vm_reserve", "size", bytes)?;
        let size = size_t("vm_reserve", bytes)?;
        let base = vm::reserve_mem_address(f.reserve, size)
            .map_err(|e| e.into_backend("aclrtReserveMemAddress", bytes))?;
        self.ledger.record_reserve(DevicePtr(base), bytes);
        Ok(DevicePtr(base))
    }

    /// `aclrtReleaseMemAddress` of a reserved range with no mapping.
    pub(crate) fn release(&mut self, api: &Api, base: DevicePtr) -> Result<(), BackendError> {
        let f = self.require(api, "vm_release")?;
        self.ledger.check_release(base)?;
        // `base` is a live reservation of this runtime with nothing mapped in it.
        vm::release_mem_address(f.release, base.addr())?;
        self.ledger.record_release(base);
        Ok(())
    }

    /// `aclrtMallocPhysical` of `bytes` of `ACL_HBM_MEM_HUGE` memory on `device`.
    pub(crate) fn create_physical(
        &mut self,
        api: &Api,
        device: i32,
        bytes: u64,
    ) -> Result<PhysicalHandle, BackendError> {
        let f = self.require(api, "vm_create_physical")?;
        self.aligned(api, device, "vm_create_physical", "size", bytes)?;
        let size = size_t("vm_create_physical", bytes)?;
        let prop = huge_pages_of("vm_create_physical", device)?;
        let id = vm::malloc_physical(f.malloc_physical, size, &prop, bytes)?;
        self.ledger.record_create(PhysicalHandle(id), bytes);
        Ok(PhysicalHandle(id))
    }

    /// `aclrtFreePhysical` of an unmapped handle.
    pub(crate) fn release_physical(
        &mut self,
        api: &Api,
        handle: PhysicalHandle,
    ) -> Result<(), BackendError> {
        let f = self.require(api, "vm_release_physical")?;
        self.ledger.check_release_physical(handle)?;
        // A live, unmapped handle of this runtime, freed once (removed below).
        vm::free_physical(f.free_physical, handle.0)?;
        self.ledger.record_release_physical(handle);
        Ok(())
    }

    /// `aclrtMapMem(at, size of handle, 0, handle, 0)` inside a reserved range, over
    /// unmapped pages.
    pub(crate) fn map(
        &mut self,
        api: &Api,
        device: i32,
        at: DevicePtr,
        handle: PhysicalHandle,
    ) -> Result<(), BackendError> {
        let f = self.require(api, "vm_map")?;
        self.aligned(api, device, "vm_map", "address", at.addr())?;
        let bytes = self.ledger.check_map(at, handle)?;
        let size = size_t("vm_map", bytes)?;
        // `at` lies in a live reservation with no mapping over the range, the handle is
        // live and unmapped, and the size is the handle's.
        vm::map_mem(f.map, at.addr(), size, handle.0)?;
        self.ledger.record_map(at, handle, bytes);
        Ok(())
    }

    /// `aclrtUnmapMem` of exactly one earlier mapping (`bytes` must be its size).
    pub(crate) fn unmap(
        &mut self,
        api: &Api,
        at: DevicePtr,
        bytes: u64,
    ) -> Result<(), BackendError> {
        let f = self.require(api, "vm_unmap")?;
        self.ledger.check_unmap(at, bytes)?;
        // `at` is a live mapping of this runtime; the caller guarantees no enqueued work
        // still uses it (the `Backend::vm_unmap` contract).
        vm::unmap_mem(f.unmap, at.addr())?;
        self.ledger.record_unmap(at);
        Ok(())
    }

    /// Unmaps, frees and releases everything still held (the device was synchronized).
    /// Failures are logged: nothing can be reported from a drop.
    pub(crate) fn release_all(&mut self, api: &Api) {
        // Through the checked calls, not `VmLedger::take_all`: a mapping the runtime failed
        // to unmap keeps its handle and range from being freed under it.
        let mappings: Vec<(DevicePtr, u64)> = self.ledger.mappings().collect();
        for (at, len) in mappings {
            if let Err(e) = self.unmap(api, at, len) {
                tracing::warn!(%e, "unmapping a page left mapped at drop failed");
            }
        }
        let handles: Vec<PhysicalHandle> = self.ledger.handles().collect();
        for h in handles {
            if let Err(e) = self.release_physical(api, h) {
                tracing::warn!(%e, "freeing a physical handle left at drop failed");
            }
        }
        let ranges: Vec<(DevicePtr, u64)> = self.ledger.ranges().collect();
        for (base, _) in ranges {
            if let Err(e) = self.release(api, base) {
                tracing::warn!(%e, "releasing a range left reserved at drop failed");
            }
        }
    }
}
