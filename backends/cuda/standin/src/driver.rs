//! Driver initialisation, devices, primary contexts and the thread's current context, and
//! the error-string calls (`cuda.h` of CUDA 12.8).
//!
//! # Safety (all functions)
//! Callers pass pointers as the driver API documents them: out-pointers valid for one
//! write (null is refused with `CUDA_ERROR_INVALID_VALUE`).

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint};
use std::sync::atomic::Ordering;

use memreuse_core::Backend;

use crate::codes;
use crate::state::{
    CURRENT, INITIALIZED, context_device, current, device_count, driver, guard, with_state,
    write_out,
};

/// `CU_DEVICE_ATTRIBUTE_*` values the stand-in answers.
pub(crate) mod attribute {
    /// `CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING`.
    pub const UNIFIED_ADDRESSING: i32 = 41;
    /// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
    pub const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    /// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
    pub const COMPUTE_CAPABILITY_MINOR: i32 = 76;
    /// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`.
    pub const VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: i32 = 102;
    /// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`.
    pub const MEMORY_POOLS_SUPPORTED: i32 = 115;
    /// `CU_DEVICE_ATTRIBUTE_MAX` of CUDA 12.8 (one past the last attribute).
    pub const MAX: i32 = 144;
}

/// The driver version `cuDriverGetVersion` reports (CUDA 12.8).
pub const DRIVER_VERSION: c_int = 12_080;

#[unsafe(no_mangle)]
unsafe extern "C" fn cuInit(flags: c_uint) -> u32 {
    guard("cuInit", codes::UNKNOWN, || {
        // cuda.h: "Flags - Initialization flag for CUDA." Currently must be 0.
        if flags != 0 {
            return Err(codes::INVALID_VALUE);
        }
        with_state(|_| ())?;
        INITIALIZED.store(true, Ordering::Release);
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> u32 {
    // Documented as callable before cuInit.
    // SAFETY: null or valid for a write (contract); null is refused.
    guard("cuDriverGetVersion", codes::UNKNOWN, || unsafe {
        write_out(version, DRIVER_VERSION, codes::INVALID_VALUE)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> u32 {
    driver("cuDeviceGetCount", || {
        let n = c_int::try_from(device_count()).unwrap_or(c_int::MAX);
        // SAFETY: null or valid for a write (contract); null is refused.
        unsafe { write_out(count, n, codes::INVALID_VALUE) }
    })
}

fn ordinal(dev: c_int) -> Result<usize, u32> {
    usize::try_from(dev)
        .ok()
        .filter(|&i| i < device_count())
        .ok_or(codes::INVALID_DEVICE)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal_: c_int) -> u32 {
    driver("cuDeviceGet", || {
        if device.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        ordinal(ordinal_)?;
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { device.write(ordinal_) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> u32 {
    driver("cuDeviceGetName", || {
        let capacity = usize::try_from(len).map_err(|_| codes::INVALID_VALUE)?;
        if name.is_null() || capacity == 0 {
            return Err(codes::INVALID_VALUE);
        }
        let text = format!("memreuse CUDA stand-in {}\0", ordinal(dev)?);
        // Truncated to `len` bytes, NUL-terminated, as the driver does.
        let n = text.len().min(capacity);
        // SAFETY: `name` is valid for writes of `len` bytes (contract) and `n <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), name.cast::<u8>(), n);
            name.add(n - 1).write(0);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGetAttribute(pi: *mut c_int, attrib: c_int, dev: c_int) -> u32 {
    driver("cuDeviceGetAttribute", || {
        if pi.is_null() || !(1..attribute::MAX).contains(&attrib) {
            return Err(codes::INVALID_VALUE);
        }
        ordinal(dev)?;
        let value = match attrib {
            attribute::UNIFIED_ADDRESSING => 1,
            attribute::COMPUTE_CAPABILITY_MAJOR => 8,
            attribute::VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED => {
                i32::from(cfg!(not(feature = "no-vm")))
            }
            // Compute capability x.0; no stream-ordered allocator (cuMemAllocAsync is not
            // exported).
            attribute::COMPUTE_CAPABILITY_MINOR | attribute::MEMORY_POOLS_SUPPORTED => 0,
            // A valid attribute the stand-in does not model: refused rather than invented.
            _ => return Err(codes::NOT_SUPPORTED),
        };
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { pi.write(value) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut usize, dev: c_int) -> u32 {
    driver("cuDevicePrimaryCtxRetain", || {
        if pctx.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let i = ordinal(dev)?;
        let handle = with_state(|s| {
            s.extra[i].1 += 1;
            s.extra[i].0
        })?;
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { pctx.write(handle) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> u32 {
    driver("cuDevicePrimaryCtxRelease_v2", || {
        let i = ordinal(dev)?;
        // cuda.h: releasing a primary context that is not retained is INVALID_CONTEXT.
        let destroyed = with_state(|s| match s.extra[i].1 {
            0 => Err(codes::INVALID_CONTEXT),
            1 => {
                s.extra[i].1 = 0;
                Ok(Some((s.extra[i].0, s.devices[i].clone())))
            }
            _ => {
                s.extra[i].1 -= 1;
                Ok(None)
            }
        })??;
        if let Some((ctx, device)) = destroyed {
            // The last release destroys the context: its streams, events and memory go.
            for s in crate::state::context_streams(ctx) {
                let _ = s.device.synchronize_stream(&s.stream);
            }
            crate::state::remove_context_handles(ctx);
            // A new context of the device starts without the old one's errors.
            let _ = device.take_last_error();
            crate::memory::free_context(ctx, &device);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut usize) -> u32 {
    driver("cuCtxGetCurrent", || {
        let ctx = CURRENT.with(std::cell::Cell::get);
        // SAFETY: null or valid for a write (contract); null is refused.
        unsafe { write_out(pctx, ctx, codes::INVALID_VALUE) }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuCtxSetCurrent(ctx: usize) -> u32 {
    driver("cuCtxSetCurrent", || {
        // NULL unbinds; anything else must be a live (retained) context.
        if ctx != 0 && context_device(ctx).is_none() {
            return Err(codes::INVALID_CONTEXT);
        }
        CURRENT.with(|c| c.set(ctx));
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuCtxSynchronize() -> u32 {
    driver("cuCtxSynchronize", || {
        // The context's own streams (not every stream the mock device ever had: those of
        // a destroyed context are gone, with their errors).
        let (ctx, _, _) = current()?;
        let mut first = Ok(());
        for s in crate::state::context_streams(ctx) {
            if let Err(e) = s.device.synchronize_stream(&s.stream) {
                first = first.and(Err(crate::state::cu_code(&e)));
            }
        }
        first
    })
}

/// Looks `error` up; `CUDA_ERROR_INVALID_VALUE` (and `*p = NULL`) for another value.
///
/// # Safety
/// `p` is null or valid for a write.
unsafe fn error_text(error: c_uint, p: *mut *const c_char, name: bool) -> Result<(), u32> {
    if p.is_null() {
        return Err(codes::INVALID_VALUE);
    }
    let found = codes::DRIVER_TEXTS
        .iter()
        .find(|(c, _, _)| *c == error)
        .map(|(_, n, t)| if name { n.as_ptr() } else { t.as_ptr() });
    // SAFETY: not null (checked), valid for a write (contract).
    unsafe { p.write(found.unwrap_or(std::ptr::null())) };
    found.map(|_| ()).ok_or(codes::INVALID_VALUE)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuGetErrorString(error: c_uint, p_str: *mut *const c_char) -> u32 {
    // Documented as usable before cuInit.
    // SAFETY: per this function's contract.
    guard("cuGetErrorString", codes::UNKNOWN, || unsafe {
        error_text(error, p_str, false)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuGetErrorName(error: c_uint, p_str: *mut *const c_char) -> u32 {
    // SAFETY: per this function's contract.
    guard("cuGetErrorName", codes::UNKNOWN, || unsafe {
        error_text(error, p_str, true)
    })
}
