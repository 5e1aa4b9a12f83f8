//! Virtual memory management (`cuda.h` of CUDA 12.8): `cuMemGetAllocationGranularity`,
//! `cuMemAddressReserve`, `cuMemAddressFree`, `cuMemCreate`, `cuMemRelease`, `cuMemMap`,
//! `cuMemSetAccess`, `cuMemUnmap`, over the mock device's virtual memory (which keeps
//! reserved addresses apart from capacity and tells the race detector that a map is an
//! allocation and an unmap a free). Not exported by the `no-vm` install profile.
//!
//! | rule (driver API reference) | refused with |
//! | --- | --- |
//! | null out-pointer or descriptor; flags not 0; granularity option not MINIMUM/RECOMMENDED | `CUDA_ERROR_INVALID_VALUE` |
//! | prop: type `CU_MEM_ALLOCATION_TYPE_PINNED`, location `CU_MEM_LOCATION_TYPE_DEVICE` of a device that exists, handle type NONE or POSIX_FD, compression 0, usage 0, reserved bytes 0 | `CUDA_ERROR_INVALID_VALUE` (`CUDA_ERROR_INVALID_DEVICE` for a device that does not exist) |
//! | reserve / create / map / set-access / unmap / free sizes and addresses: non-zero multiples of the granularity (2 MiB) | `CUDA_ERROR_INVALID_VALUE` |
//! | reserve: alignment 0 or a power of two; beyond the granularity is not modelled | `CUDA_ERROR_INVALID_VALUE` / `CUDA_ERROR_NOT_SUPPORTED` |
//! | map: offset 0 ("currently must be zero"), a live handle mapped whole (size = its size), inside one reservation, over no mapping | `CUDA_ERROR_INVALID_VALUE` |
//! | map: a handle already mapped elsewhere (allowed by CUDA, not modelled) | `CUDA_ERROR_NOT_SUPPORTED` |
//! | set access: the range is mapped; location a device that exists; flags NONE, READ or READWRITE | `CUDA_ERROR_INVALID_VALUE` |
//! | device access (copies, memsets, collectives) to mapped pages before `cuMemSetAccess` gave READWRITE | `CUDA_ERROR_ILLEGAL_ADDRESS` (returned by the call, not sticky) |
//! | unmap: exactly whole mappings (no sub-range), nothing unmapped inside | `CUDA_ERROR_INVALID_VALUE` |
//! | address free: the base and size of a reservation with nothing mapped in it | `CUDA_ERROR_INVALID_VALUE` |
//! | release: a live handle (a mapped one is freed once its mapping goes, as documented) | `CUDA_ERROR_INVALID_VALUE` |
//! | create beyond the device's free bytes | `CUDA_ERROR_OUT_OF_MEMORY` |
//!
//! CUDA documents the rules; where it does not name the code, the code above is the
//! stand-in's choice. Every call also needs a current context (`CUDA_ERROR_INVALID_CONTEXT`),
//! whose device the reservations and mappings are looked up on.

#![allow(non_snake_case, clippy::missing_safety_doc)]
#![cfg_attr(feature = "no-vm", allow(dead_code, unused_imports))]

use std::collections::{BTreeMap, HashMap};

use memreuse_core::{Backend, DevicePtr, PhysicalHandle};
use parking_lot::Mutex;

use crate::codes;
use crate::state::{cu_code, current, device_at, device_count, driver, next_handle_key};

/// The granularity (minimum and recommended) of pinned device memory.
pub const GRANULARITY: u64 = 2 << 20;

/// `CUmemLocation` (`cuda.h` 12.8).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemLocation {
    type_: u32,
    id: i32,
}

/// `CUmemAllocationProp` (`cuda.h` 12.8).
#[repr(C)]
pub struct MemAllocationProp {
    type_: u32,
    requested_handle_types: u32,
    location: MemLocation,
    win32_handle_meta_data: *mut std::ffi::c_void,
    compression_type: u8,
    gpu_direct_rdma_capable: u8,
    usage: u16,
    reserved: [u8; 4],
}

/// `CUmemAccessDesc` (`cuda.h` 12.8).
#[repr(C)]
pub struct MemAccessDesc {
    location: MemLocation,
    flags: u32,
}

/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
pub const ALLOCATION_TYPE_PINNED: u32 = 1;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub const LOCATION_TYPE_DEVICE: u32 = 1;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` (NONE is 0).
pub const HANDLE_TYPE_POSIX_FD: u32 = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READ`.
pub const ACCESS_READ: u32 = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
pub const ACCESS_READWRITE: u32 = 3;

const _: () = {
    use cudarc::driver::sys;
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<MemLocation>() == size_of::<sys::CUmemLocation>());
    assert!(offset_of!(MemLocation, id) == offset_of!(sys::CUmemLocation, id));
    assert!(size_of::<MemAllocationProp>() == size_of::<sys::CUmemAllocationProp>());
    assert!(align_of::<MemAllocationProp>() == align_of::<sys::CUmemAllocationProp>());
    assert!(
        offset_of!(MemAllocationProp, requested_handle_types)
            == offset_of!(sys::CUmemAllocationProp, requestedHandleTypes)
    );
    assert!(
        offset_of!(MemAllocationProp, location) == offset_of!(sys::CUmemAllocationProp, location)
    );
    assert!(
        offset_of!(MemAllocationProp, win32_handle_meta_data)
            == offset_of!(sys::CUmemAllocationProp, win32HandleMetaData)
    );
    assert!(
        offset_of!(MemAllocationProp, compression_type)
            == offset_of!(sys::CUmemAllocationProp, allocFlags)
    );
    assert!(size_of::<MemAccessDesc>() == size_of::<sys::CUmemAccessDesc>());
    assert!(offset_of!(MemAccessDesc, flags) == offset_of!(sys::CUmemAccessDesc, flags));
    assert!(
        sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED as u32 == ALLOCATION_TYPE_PINNED
    );
    assert!(sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32 == LOCATION_TYPE_DEVICE);
    assert!(
        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0
            == HANDLE_TYPE_POSIX_FD
    );
    assert!(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE.0 == 0);
    assert!(sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ as u32 == ACCESS_READ);
    assert!(sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE as u32 == ACCESS_READWRITE);
    assert!(
        sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED as u32 == 1
    );
};

struct Physical {
    device: usize,
    mock: PhysicalHandle,
    bytes: u64,
    mapped_at: Option<u64>,
    /// `cuMemRelease` was called while mapped: freed at its unmap.
    released: bool,
}

struct Mapping {
    handle: u64,
    bytes: u64,
    /// `cuMemSetAccess` gave READWRITE.
    access: bool,
}

#[derive(Default)]
struct Tables {
    /// (device, base) -> size.
    reserved: BTreeMap<(usize, u64), u64>,
    handles: HashMap<u64, Physical>,
    /// (device, address) -> mapping.
    mappings: BTreeMap<(usize, u64), Mapping>,
}

static TABLES: Mutex<Option<Tables>> = Mutex::new(None);

/// Forgets everything (a fresh cluster was configured).
pub(crate) fn reset() {
    *TABLES.lock() = None;
}

fn with_tables<T>(f: impl FnOnce(&mut Tables) -> T) -> T {
    f(TABLES.lock().get_or_insert_with(Tables::default))
}

/// `CUDA_ERROR_ILLEGAL_ADDRESS` when `[ptr, ptr + bytes)` touches mapped pages of `device`
/// that have no READWRITE access yet.
pub(crate) fn check_access(device: usize, ptr: u64, bytes: u64) -> Result<(), u32> {
    let end = ptr.saturating_add(bytes);
    with_tables(|t| {
        let hit = t
            .mappings
            .range((device, 0)..(device, end))
            .any(|(&(_, at), m)| at + m.bytes > ptr && !m.access);
        if hit {
            Err(codes::ILLEGAL_ADDRESS)
        } else {
            Ok(())
        }
    })
}

fn multiple(size: u64) -> Result<u64, u32> {
    if size == 0 || size % GRANULARITY != 0 {
        return Err(codes::INVALID_VALUE);
    }
    Ok(size)
}

/// Checks a location: a device that exists.
fn location(l: MemLocation) -> Result<usize, u32> {
    if l.type_ != LOCATION_TYPE_DEVICE {
        return Err(codes::INVALID_VALUE);
    }
    usize::try_from(l.id)
        .ok()
        .filter(|&i| i < device_count())
        .ok_or(codes::INVALID_DEVICE)
}

/// Checks a `CUmemAllocationProp`; returns the device.
///
/// # Safety
/// `prop` is null or valid for reads.
unsafe fn properties(prop: *const MemAllocationProp) -> Result<usize, u32> {
    if prop.is_null() {
        return Err(codes::INVALID_VALUE);
    }
    // SAFETY: not null (checked), valid for reads (contract).
    let p = unsafe { &*prop };
    if p.type_ != ALLOCATION_TYPE_PINNED
        || !(p.requested_handle_types == 0 || p.requested_handle_types == HANDLE_TYPE_POSIX_FD)
        || p.compression_type != 0
        || p.gpu_direct_rdma_capable > 1
        || p.usage != 0
        || p.reserved != [0; 4]
    {
        return Err(codes::INVALID_VALUE);
    }
    location(p.location)
}

#[cfg_attr(not(feature = "no-vm"), unsafe(no_mangle))]
unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const MemAllocationProp,
    option: u32,
) -> u32 {
    driver("cuMemGetAllocationGranularity", || {
        if granularity.is_null() || option > 1 {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: per this function's contract.
        unsafe { properties(prop) }?;
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { granularity.write(GRANULARITY as usize) };
        Ok(())
    })
}

#[cfg_attr(not(feature = "no-vm"), unsafe(no_mangle))]
unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut u64,
    size: usize,
    alignment: usize,
    _addr: u64,
    flags: u64,
) -> u32 {
    driver("cuMemAddressReserve", || {
        if ptr.is_null() || flags != 0 || (alignment != 0 && !alignment.is_power_of_two()) {
            return Err(codes::INVALID_VALUE);
        }
        if alignment as u64 > GRANULARITY {
            return Err(codes::NOT_SUPPORTED);
        }
        let bytes = multiple(size as u64)?;
        let (_, index, device) = current()?;
        // `addr` is a hint: the stand-in never honours it, as a driver may not.
        let base = device.vm_reserve(bytes).map_err(|e| cu_code(&e))?;
        with_tables(|t| t.reserved.insert((index, base.addr()), bytes));
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { ptr.write(base.addr()) };
        Ok(())
    })
}

#[cfg_attr(not(feature = "no-vm"), unsafe(no_mangle))]
unsafe extern "C" fn cuMemAddressFree(ptr: u64, size: usize) -> u32 {
    driver("cuMemAddressFree", || {
        let (_, index, device) = current()?;
        with_tables(|t| {
            if t.reserved.get(&(index, ptr)) != Some(&(size as u64)) {
                return Err(codes::INVALID_VALUE);
            }
            let end = ptr + size as u64;
            if t.mappings
                .range((index, ptr)..(index, end))
                .next()
                .is_some()
            {
                return Err(codes::INVALID_VALUE);
            }
            device.vm_release(DevicePtr(ptr)).map_err(|e| cu_code(&e))?;
            t.reserved.remove(&(index, ptr));
            Ok(())
        })
    })
}

#[cfg_attr(not(feature = "no-vm"), unsafe(no_mangle))]
unsafe extern "C" fn cuMemCreate(
    handle: *mut u64,
    size: usize,
    prop: *const MemAllocationProp,
    flags: u64,
) -> u32 {
    driver("cuMemCreate", || {
        if handle.is_null() || flags != 0 {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: per this function's contract.
        let index = unsafe { properties(prop) }?;
        let bytes = multiple(size as u64)?;
        current()?;
        let device = device_at(index).ok_or(codes::INVALID_DEVICE)?;
        let mock = device.vm_create_physical(bytes).map_err(|e| cu_code(&e))?;
        let key = next_handle_key() as u64;
        with_tables(|t| {
            t.handles.insert(
                key,
                Physical {
                    device: index,
                    mock,
                    bytes,
                    mapped_at: None,
                    released: false,
                },
            )
        });
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { handle.write(key) };
        Ok(())
    })
}

#[cfg_attr(not(feature = "no-vm"), unsafe(no_mangle))]
unsafe extern "C" fn cuMemRelease(handle: u64) -> u32 {
    driver("cuMemRelease", || {
        current()?;
        with_tables(|t| {
            let p = t.handles.get_mut(&handle).ok_or(codes::INVALID_VALUE)?;
            if p.released {
                return Err(codes::INVALID_VALUE);
            }
            if p.mapped_at.is_some() {
                // Documented: the memory is freed once its mappings are unmapped.
                p.released = true;
                return Ok(());
            }
            let device = device_at(p.device).ok_or(codes::INVALID_VALUE)?;
            device
                .vm_release_physical(p.mock)
                .map_err(|e| cu_code(&e))?;
            t.handles.remove(&handle);
            Ok(())
        })
    })
}

#[cfg_attr(not(feature = "no-vm"), unsafe(no_mangle))]
unsafe extern "C" fn cuMemMap(
    ptr: u64,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> u32 {
    driver("cuMemMap", || {
        if offset != 0 || flags != 0 {
            return Err(codes::INVALID_VALUE);
        }
        let bytes = multiple(size as u64)?;
        multiple(ptr).map_err(|_| codes::INVALID_VALUE)?;
        let (_, index, device) = current()?;
        with_tables(|t| {
            let p = t.handles.get(&handle).ok_or(codes::INVALID_VALUE)?;
            if p.released || p.bytes != bytes || p.device != index {
                return Err(codes::INVALID_VALUE);
            }
            if p.mapped_at.is_some() {
                return Err(codes::NOT_SUPPORTED);
            }
            let end = ptr.checked_add(bytes).ok_or(codes::INVALID_VALUE)?;
            let inside = t
                .reserved
                .range((index, 0)..=(index, ptr))
                .next_back()
                .is_some_and(|(&(_, base), &len)| end <= base + len);
            let overlaps = t
                .mappings
                .range((index, 0)..(index, end))
                .any(|(&(_, at), m)| at + m.bytes > ptr);
            if !inside || overlaps {
                return Err(codes::INVALID_VALUE);
            }
            let mock = p.mock;
            device
                .vm_map(DevicePtr(ptr), mock)
                .map_err(|e| cu_code(&e))?;
            t.mappings.insert(
                (index, ptr),
                Mapping {
                    handle,
                    bytes,
                    access: false,
                },
            );
            if let Some(p) = t.handles.get_mut(&handle) {
                p.mapped_at = Some(ptr);
            }
            Ok(())
        })
    })
}

/// The mappings that exactly tile `[ptr, ptr + size)`, or `CUDA_ERROR_INVALID_VALUE`.
fn tiling(t: &Tables, index: usize, ptr: u64, size: u64) -> Result<Vec<u64>, u32> {
    let end = ptr.checked_add(size).ok_or(codes::INVALID_VALUE)?;
    let mut at = ptr;
    let mut found = Vec::new();
    while at < end {
        let m = t.mappings.get(&(index, at)).ok_or(codes::INVALID_VALUE)?;
        found.push(at);
        at += m.bytes;
    }
    if at != end || size == 0 {
        return Err(codes::INVALID_VALUE);
    }
    Ok(found)
}

#[cfg_attr(not(feature = "no-vm"), unsafe(no_mangle))]
unsafe extern "C" fn cuMemSetAccess(
    ptr: u64,
    size: usize,
    desc: *const MemAccessDesc,
    count: usize,
) -> u32 {
    driver("cuMemSetAccess", || {
        if desc.is_null() || count == 0 {
            return Err(codes::INVALID_VALUE);
        }
        let (_, index, _) = current()?;
        // SAFETY: `desc` is valid for `count` descriptors (contract), not null (checked).
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        let mut readwrite = false;
        for d in descs {
            let at = location(d.location)?;
            if ![0, ACCESS_READ, ACCESS_READWRITE].contains(&d.flags) {
                return Err(codes::INVALID_VALUE);
            }
            // Peer access from another device is not modelled.
            if at != index {
                return Err(codes::NOT_SUPPORTED);
            }
            readwrite = d.flags == ACCESS_READWRITE;
        }
        with_tables(|t| {
            for at in tiling(t, index, ptr, size as u64)? {
                if let Some(m) = t.mappings.get_mut(&(index, at)) {
                    m.access = readwrite;
                }
            }
            Ok(())
        })
    })
}

#[cfg_attr(not(feature = "no-vm"), unsafe(no_mangle))]
unsafe extern "C" fn cuMemUnmap(ptr: u64, size: usize) -> u32 {
    driver("cuMemUnmap", || {
        let (_, index, device) = current()?;
        with_tables(|t| {
            for at in tiling(t, index, ptr, size as u64)? {
                let Some(m) = t.mappings.get(&(index, at)) else {
                    return Err(codes::UNKNOWN);
                };
                let handle = m.handle;
                device
                    .vm_unmap(DevicePtr(at), m.bytes)
                    .map_err(|e| cu_code(&e))?;
                t.mappings.remove(&(index, at));
                let release = t.handles.get_mut(&handle).is_some_and(|p| {
                    p.mapped_at = None;
                    p.released
                });
                if release && let Some(p) = t.handles.remove(&handle) {
                    device
                        .vm_release_physical(p.mock)
                        .map_err(|e| cu_code(&e))?;
                }
            }
            Ok(())
        })
    })
}
