//! The ACL virtual-memory symbols (`acl_rt.h`): `aclrtReserveMemAddress`,
//! `aclrtReleaseMemAddress`, `aclrtMallocPhysical`, `aclrtFreePhysical`, `aclrtMapMem`,
//! `aclrtUnmapMem`, `aclrtMemGetAllocationGranularity`.
//!
//! Each call checks what the runtime documents, then runs the mock device's virtual-memory
//! call (`memreuse_mock`'s `vm_*`), which keeps reserved addresses apart from capacity (the
//! capacity limits physical bytes), refuses access to unmapped addresses and tells the race
//! detector that a map is an allocation and an unmap a free.
//!
//! | rule (runtime docs) | refused with |
//! | --- | --- |
//! | null out-pointer / pointer or handle argument (every call, as the ACL layer checks before the driver) | 100000 `ACL_ERROR_INVALID_PARAM` |
//! | reserve: alignment 0, `expectPtr` NULL, flags 0 (torch_npu passes 1: accepted) | 100000 |
//! | reserve / malloc-physical size a non-zero multiple of the granularity | 100000 |
//! | physical prop: handle type NONE, allocation type PINNED, `ACL_HBM_MEM_HUGE` (4) or `ACL_HBM_MEM_HUGE1G` (10), location a device that exists, `reserve` 0; flags 0 | 100000 |
//! | map: offset 0, flags 0, size equal to the handle's size | 100000 |
//! | map: a live handle, not already mapped, inside a range reserved on the handle's device, over no mapping | 107000 `ACL_ERROR_RT_PARAM_INVALID` |
//! | unmap: the address of a mapping | 107000 |
//! | free physical: a live handle that is not mapped | 107000 |
//! | release address: the base of a reservation with nothing mapped in it | 107000 |
//! | malloc physical beyond the device's free bytes | 207001 `ACL_ERROR_RT_MEMORY_ALLOCATION` |
//! | reserve / malloc physical under the `vm-unsupported` behaviour (a part without virtual memory management) | 207000 `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` |
//!
//! The runtime documents the rules, not which code each misuse gets: these codes are the
//! stand-in's choice within the families the runtime uses. Handles are table keys, so an
//! unknown handle is an error code, never undefined behaviour.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;

use memreuse_core::{Backend, DevicePtr, PhysicalHandle};
use memreuse_mock::MockDevice;
use parking_lot::Mutex;

use crate::hccl::{behaves, behaviour};
use crate::{acl_code, code, current, device_at, guard, next_handle_key, write_out};

/// `ACL_HBM_MEM_HUGE`: 2 MB pages.
const HBM_HUGE: i32 = 4;
/// `ACL_HBM_MEM_HUGE1G`: 1 GB pages.
const HBM_HUGE1G: i32 = 10;
/// The minimum granularity of 2 MB pages (also the mock's mapping granularity).
const GRANULARITY_2M: u64 = 2 << 20;
/// The granularity of 1 GB pages.
const GRANULARITY_1G: u64 = 1 << 30;

/// `aclrtPhysicalMemProp` (32 bytes), as `acl_rt.h` lays it out.
#[repr(C)]
pub struct PhysicalMemProp {
    handle_type: i32,
    allocation_type: i32,
    mem_attr: i32,
    location_id: u32,
    location_type: i32,
    reserve: u64,
}

const _: () = assert!(std::mem::size_of::<PhysicalMemProp>() == 32);

struct Reservation {
    device: usize,
    bytes: u64,
}

struct Physical {
    device: usize,
    mock: PhysicalHandle,
    bytes: u64,
    mapped_at: Option<u64>,
}

#[derive(Default)]
struct Tables {
    reserved: BTreeMap<u64, Reservation>,
    handles: HashMap<usize, Physical>,
    /// Mapped address -> handle key.
    mappings: BTreeMap<u64, usize>,
}

static TABLES: Mutex<Option<Tables>> = Mutex::new(None);

/// Forgets every reservation, handle and mapping (the harness configured a fresh cluster,
/// whose devices know none of them).
pub(crate) fn reset() {
    *TABLES.lock() = None;
}

fn with_tables<T>(f: impl FnOnce(&mut Tables) -> T) -> T {
    f(TABLES.lock().get_or_insert_with(Tables::default))
}

fn device(index: usize) -> Result<MockDevice, i32> {
    device_at(index).ok_or(code::RT_PARAM_INVALID)
}

/// The granularity of `mem_attr` memory, or `ACL_ERROR_INVALID_PARAM` for another attribute.
fn granularity_of(mem_attr: i32) -> Result<u64, i32> {
    match mem_attr {
        HBM_HUGE => Ok(GRANULARITY_2M),
        HBM_HUGE1G => Ok(GRANULARITY_1G),
        _ => Err(code::INVALID_PARAM),
    }
}

fn multiple(size: usize, granularity: u64) -> Result<u64, i32> {
    let size = size as u64;
    if size == 0 || size % granularity != 0 {
        return Err(code::INVALID_PARAM);
    }
    Ok(size)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtMemGetAllocationGranularity(
    prop: *mut PhysicalMemProp,
    option: i32,
    granularity: *mut usize,
) -> i32 {
    guard(
        "aclrtMemGetAllocationGranularity",
        code::INTERNAL_ERROR,
        || {
            if prop.is_null() || !(0..=1).contains(&option) {
                return Err(code::INVALID_PARAM);
            }
            // SAFETY: not null (checked); the caller passes a valid prop (contract).
            let attr = unsafe { (*prop).mem_attr };
            let g = granularity_of(attr)?;
            // SAFETY: null or valid for a write (contract); null is refused.
            unsafe { write_out(granularity, g as usize, code::INVALID_PARAM) }
        },
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtReserveMemAddress(
    vir_ptr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    expect_ptr: *mut c_void,
    flags: u64,
) -> i32 {
    guard("aclrtReserveMemAddress", code::INTERNAL_ERROR, || {
        if vir_ptr.is_null() || alignment != 0 || !expect_ptr.is_null() || flags > 1 {
            return Err(code::INVALID_PARAM);
        }
        if behaves(behaviour::VM_UNSUPPORTED) {
            return Err(code::RT_FEATURE_NOT_SUPPORT);
        }
        let bytes = multiple(size, GRANULARITY_2M)?;
        let (index, dev) = current()?;
        let base = dev.vm_reserve(bytes).map_err(|e| acl_code(&e))?;
        with_tables(|t| {
            t.reserved.insert(
                base.addr(),
                Reservation {
                    device: index,
                    bytes,
                },
            );
        });
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { vir_ptr.write(base.addr() as usize as *mut c_void) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtReleaseMemAddress(vir_ptr: *mut c_void) -> i32 {
    guard("aclrtReleaseMemAddress", code::INTERNAL_ERROR, || {
        // The ACL layer refuses a null pointer before the driver sees it.
        if vir_ptr.is_null() {
            return Err(code::INVALID_PARAM);
        }
        let base = vir_ptr as usize as u64;
        with_tables(|t| {
            let r = t.reserved.get(&base).ok_or(code::RT_PARAM_INVALID)?;
            if t.mappings.range(base..base + r.bytes).next().is_some() {
                return Err(code::RT_PARAM_INVALID);
            }
            device(r.device)?
                .vm_release(DevicePtr(base))
                .map_err(|e| acl_code(&e))?;
            t.reserved.remove(&base);
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtMallocPhysical(
    handle: *mut *mut c_void,
    size: usize,
    prop: *const PhysicalMemProp,
    flags: u64,
) -> i32 {
    guard("aclrtMallocPhysical", code::INTERNAL_ERROR, || {
        if handle.is_null() || prop.is_null() || flags != 0 {
            return Err(code::INVALID_PARAM);
        }
        // SAFETY: not null (checked); the caller passes a valid prop (contract).
        let p = unsafe { &*prop };
        if p.handle_type != 0 || p.allocation_type != 0 || p.location_type != 1 || p.reserve != 0 {
            return Err(code::INVALID_PARAM);
        }
        let bytes = multiple(size, granularity_of(p.mem_attr)?)?;
        if behaves(behaviour::VM_UNSUPPORTED) {
            return Err(code::RT_FEATURE_NOT_SUPPORT);
        }
        let index = usize::try_from(p.location_id).map_err(|_| code::INVALID_PARAM)?;
        let dev = device_at(index).ok_or(code::INVALID_PARAM)?;
        let mock = dev.vm_create_physical(bytes).map_err(|e| acl_code(&e))?;
        let key = next_handle_key();
        with_tables(|t| {
            t.handles.insert(
                key,
                Physical {
                    device: index,
                    mock,
                    bytes,
                    mapped_at: None,
                },
            );
        });
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { handle.write(key as *mut c_void) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtFreePhysical(handle: *mut c_void) -> i32 {
    guard("aclrtFreePhysical", code::INTERNAL_ERROR, || {
        if handle.is_null() {
            return Err(code::INVALID_PARAM);
        }
        let key = handle as usize;
        with_tables(|t| {
            let p = t.handles.get(&key).ok_or(code::RT_PARAM_INVALID)?;
            if p.mapped_at.is_some() {
                return Err(code::RT_PARAM_INVALID);
            }
            device(p.device)?
                .vm_release_physical(p.mock)
                .map_err(|e| acl_code(&e))?;
            t.handles.remove(&key);
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtMapMem(
    vir_ptr: *mut c_void,
    size: usize,
    offset: usize,
    handle: *mut c_void,
    flags: u64,
) -> i32 {
    guard("aclrtMapMem", code::INTERNAL_ERROR, || {
        if vir_ptr.is_null() || handle.is_null() || offset != 0 || flags != 0 {
            return Err(code::INVALID_PARAM);
        }
        let at = vir_ptr as usize as u64;
        let key = handle as usize;
        with_tables(|t| {
            let p = t.handles.get(&key).ok_or(code::RT_PARAM_INVALID)?;
            if size as u64 != p.bytes {
                return Err(code::INVALID_PARAM);
            }
            if p.mapped_at.is_some() {
                return Err(code::RT_PARAM_INVALID);
            }
            let end = at.checked_add(p.bytes).ok_or(code::INVALID_PARAM)?;
            let inside = t
                .reserved
                .range(..=at)
                .next_back()
                .is_some_and(|(&base, r)| r.device == p.device && end <= base + r.bytes);
            if !inside {
                return Err(code::RT_PARAM_INVALID);
            }
            // Overlap with another mapping: the mock refuses it (InvalidArgument -> 107000).
            device(p.device)?
                .vm_map(DevicePtr(at), p.mock)
                .map_err(|e| acl_code(&e))?;
            t.mappings.insert(at, key);
            if let Some(p) = t.handles.get_mut(&key) {
                p.mapped_at = Some(at);
            }
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtUnmapMem(vir_ptr: *mut c_void) -> i32 {
    guard("aclrtUnmapMem", code::INTERNAL_ERROR, || {
        if vir_ptr.is_null() {
            return Err(code::INVALID_PARAM);
        }
        let at = vir_ptr as usize as u64;
        with_tables(|t| {
            let key = *t.mappings.get(&at).ok_or(code::RT_PARAM_INVALID)?;
            let p = t.handles.get_mut(&key).ok_or(code::RT_INTERNAL_ERROR)?;
            device(p.device)?
                .vm_unmap(DevicePtr(at), p.bytes)
                .map_err(|e| acl_code(&e))?;
            p.mapped_at = None;
            t.mappings.remove(&at);
            Ok(())
        })
    })
}
