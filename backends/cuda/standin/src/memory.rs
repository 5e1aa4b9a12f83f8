//! Device memory and stream-ordered copies: `cuMemAlloc_v2`, `cuMemFree_v2`,
//! `cuMemGetInfo_v2`, `cuMemsetD8Async`, `cuMemcpyHtoDAsync_v2`, `cuMemcpyDtoHAsync_v2`,
//! `cuMemcpyDtoDAsync_v2`. Every access goes through the mock device (its race detector
//! and range checks); a range that touches virtual-memory pages without access
//! (`cuMemSetAccess`) is refused first.
//!
//! # Safety (all functions)
//! Out-pointers valid for one write (null refused); host buffers valid for the byte counts
//! given, as `cuda.h` requires.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::collections::HashMap;
use std::ffi::c_void;

use memreuse_core::{Backend, DevicePtr};
use memreuse_mock::MockDevice;
use parking_lot::Mutex;

use crate::codes;
use crate::state::{StreamH, cu_code, current, driver};

/// Live `cuMemAlloc` allocations: address -> owning context.
static ALLOCS: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

/// Forgets every allocation (a fresh cluster was configured).
pub(crate) fn reset() {
    *ALLOCS.lock() = None;
}

/// Live `cuMemAlloc` allocations (the harness's leak count).
pub(crate) fn live_allocations() -> u64 {
    ALLOCS.lock().as_ref().map_or(0, |m| m.len() as u64)
}

/// Frees what context `ctx` still holds (it was destroyed).
pub(crate) fn free_context(ctx: usize, device: &MockDevice) {
    let mine: Vec<u64> = ALLOCS.lock().as_mut().map_or_else(Vec::new, |m| {
        let v: Vec<u64> = m
            .iter()
            .filter(|(_, c)| **c == ctx)
            .map(|(p, _)| *p)
            .collect();
        for p in &v {
            m.remove(p);
        }
        v
    });
    for p in mine {
        let _ = device.free(DevicePtr(p));
    }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, bytesize: usize) -> u32 {
    driver("cuMemAlloc_v2", || {
        // cuda.h: "If bytesize is 0, cuMemAlloc() returns CUDA_ERROR_INVALID_VALUE."
        if dptr.is_null() || bytesize == 0 {
            return Err(codes::INVALID_VALUE);
        }
        let (ctx, _, device) = current()?;
        let p = device.malloc(bytesize as u64).map_err(|e| cu_code(&e))?;
        ALLOCS
            .lock()
            .get_or_insert_with(HashMap::new)
            .insert(p.addr(), ctx);
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { dptr.write(p.addr()) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemFree_v2(dptr: u64) -> u32 {
    driver("cuMemFree_v2", || {
        let (ctx, _, device) = current()?;
        // An address cuMemAlloc did not return in this context, or one already freed.
        let owner = ALLOCS.lock().as_ref().and_then(|m| m.get(&dptr).copied());
        if owner != Some(ctx) {
            return Err(codes::INVALID_VALUE);
        }
        device.free(DevicePtr(dptr)).map_err(|e| cu_code(&e))?;
        if let Some(m) = ALLOCS.lock().as_mut() {
            m.remove(&dptr);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> u32 {
    driver("cuMemGetInfo_v2", || {
        if free.is_null() || total.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let (_, _, device) = current()?;
        let info = device.memory_info().map_err(|e| cu_code(&e))?;
        let (f, t) = (info.free, info.total);
        // SAFETY: both not null (checked), valid for writes (contract).
        unsafe {
            free.write(f as usize);
            total.write(t as usize);
        }
        Ok(())
    })
}

/// The stream of a memory call: of the current context (`CUDA_ERROR_INVALID_HANDLE` for a
/// stream of another context or an unknown handle).
fn stream(raw: usize) -> Result<StreamH, u32> {
    let (ctx, _, _) = current()?;
    let s = crate::stream::stream_of(raw)?;
    if s.ctx != ctx {
        return Err(codes::INVALID_HANDLE);
    }
    Ok(s)
}

/// Refuses device ranges in virtual-memory pages without access, then lets the mock check
/// the rest.
fn accessible(s: &StreamH, ptr: u64, bytes: u64) -> Result<(), u32> {
    crate::vm::check_access(s.index, ptr, bytes)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemsetD8Async(dst: u64, uc: u8, n: usize, h_stream: usize) -> u32 {
    driver("cuMemsetD8Async", || {
        let s = stream(h_stream)?;
        if n == 0 {
            return Ok(());
        }
        accessible(&s, dst, n as u64)?;
        let ptr = DevicePtr(dst);
        let r = if uc == 0 {
            s.device.memset_zero(ptr, n as u64, &s.stream)
        } else {
            s.device.enqueue_custom(
                &s.stream,
                "cuMemsetD8Async",
                &[memreuse_mock::MemAccess::write(ptr, n as u64)],
                move |m| {
                    m.bytes_mut(0, 0)?.fill(uc);
                    Ok(())
                },
            )
        };
        r.map_err(|e| cu_code(&e))
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    bytes: usize,
    h_stream: usize,
) -> u32 {
    driver("cuMemcpyHtoDAsync_v2", || {
        if src.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let s = stream(h_stream)?;
        if bytes == 0 {
            return Ok(());
        }
        accessible(&s, dst, bytes as u64)?;
        // SAFETY: `src` is valid for reads of `bytes` bytes (contract); the mock stages the
        // bytes before returning.
        let data = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), bytes) };
        s.device
            .copy_host_to_device(DevicePtr(dst), data, &s.stream)
            .map_err(|e| cu_code(&e))
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: u64,
    bytes: usize,
    h_stream: usize,
) -> u32 {
    driver("cuMemcpyDtoHAsync_v2", || {
        if dst.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let s = stream(h_stream)?;
        if bytes == 0 {
            return Ok(());
        }
        accessible(&s, src, bytes as u64)?;
        // SAFETY: `dst` is valid for writes of `bytes` bytes (contract); the mock's copy
        // completes before it returns, so the slice does not outlive the call.
        let out = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), bytes) };
        s.device
            .copy_device_to_host(out, DevicePtr(src), &s.stream)
            .map_err(|e| cu_code(&e))
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: u64,
    src: u64,
    bytes: usize,
    h_stream: usize,
) -> u32 {
    driver("cuMemcpyDtoDAsync_v2", || {
        let s = stream(h_stream)?;
        if bytes == 0 {
            return Ok(());
        }
        accessible(&s, dst, bytes as u64)?;
        accessible(&s, src, bytes as u64)?;
        s.device
            .copy_device_to_device(DevicePtr(dst), DevicePtr(src), bytes as u64, &s.stream)
            .map_err(|e| cu_code(&e))
    })
}
