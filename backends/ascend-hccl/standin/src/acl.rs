//! The ACL runtime symbols (`acl.h`, `acl_rt.h`). Every function: C signature of the
//! reference ABI, panics caught, arguments checked before use.
//!
//! # Safety (all functions)
//! Callers pass pointers as the ACL documentation requires: out-pointers valid for one
//! write (or null, which is refused), host buffers valid for the byte counts given.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::alloc::{Layout, alloc, dealloc};
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::time::{Duration, Instant};

use memreuse_core::{Backend, DevicePtr};
use memreuse_mock::MemAccess;
use parking_lot::Mutex;

use crate::{
    CURRENT, Handle, StreamH, acl_code, code, current, device_at, device_count, get_handle, guard,
    insert_handle, remove_handle, stream_of, write_out,
};

const HOST_ALIGN: usize = 64;
static HOST_ALLOCS: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

#[unsafe(no_mangle)]
unsafe extern "C" fn aclInit(_config_path: *const c_char) -> i32 {
    // Reference-counted in current CANN (acl.h); the stand-in has nothing to set up.
    guard("aclInit", code::INTERNAL_ERROR, || Ok(()))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclFinalize() -> i32 {
    guard("aclFinalize", code::INTERNAL_ERROR, || Ok(()))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtSetDevice(device_id: i32) -> i32 {
    guard("aclrtSetDevice", code::INTERNAL_ERROR, || {
        let idx = usize::try_from(device_id).map_err(|_| code::INVALID_DEVICE)?;
        device_at(idx).ok_or(code::INVALID_DEVICE)?;
        CURRENT.with(|c| c.set(device_id));
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtResetDevice(device_id: i32) -> i32 {
    guard("aclrtResetDevice", code::INTERNAL_ERROR, || {
        if usize::try_from(device_id).map_or(true, |i| i >= device_count()) {
            return Err(code::INVALID_DEVICE);
        }
        CURRENT.with(|c| {
            if c.get() == device_id {
                c.set(-1);
            }
        });
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtGetDeviceCount(count: *mut u32) -> i32 {
    guard("aclrtGetDeviceCount", code::INTERNAL_ERROR, || {
        let n = u32::try_from(device_count()).unwrap_or(u32::MAX);
        // SAFETY: null or valid for a write (caller contract); null is refused.
        unsafe { write_out(count, n, code::INVALID_PARAM) }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtMallocHost(host_ptr: *mut *mut c_void, size: usize) -> i32 {
    guard("aclrtMallocHost", code::INTERNAL_ERROR, || {
        if host_ptr.is_null() || size == 0 {
            return Err(code::INVALID_PARAM);
        }
        let layout = Layout::from_size_align(size, HOST_ALIGN).map_err(|_| code::INVALID_PARAM)?;
        // SAFETY: the layout has a non-zero size (checked above).
        let p = unsafe { alloc(layout) };
        if p.is_null() {
            return Err(code::RT_MEMORY_ALLOCATION);
        }
        HOST_ALLOCS
            .lock()
            .get_or_insert_with(HashMap::new)
            .insert(p as usize, size);
        // SAFETY: host_ptr is not null (checked) and valid for a write (caller contract).
        unsafe { host_ptr.write(p.cast()) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtFreeHost(host_ptr: *mut c_void) -> i32 {
    guard("aclrtFreeHost", code::INTERNAL_ERROR, || {
        let size = HOST_ALLOCS
            .lock()
            .as_mut()
            .and_then(|m| m.remove(&(host_ptr as usize)))
            .ok_or(code::INVALID_PARAM)?;
        let layout = Layout::from_size_align(size, HOST_ALIGN).map_err(|_| code::INVALID_PARAM)?;
        // SAFETY: `host_ptr` was returned by `alloc` with this layout (found in the table,
        // removed from it so it cannot be freed twice).
        unsafe { dealloc(host_ptr.cast(), layout) };
        Ok(())
    })
}

fn malloc_impl(dev_ptr: *mut *mut c_void, size: usize, policy: i32, pad: bool) -> Result<(), i32> {
    if dev_ptr.is_null() || size == 0 || !(0..=7).contains(&policy) {
        return Err(code::INVALID_PARAM);
    }
    let (_, device) = current()?;
    // acl_rt.h: aclrtMalloc rounds up to 32 bytes and adds 32; aclrtMallocAlign32 only rounds.
    let rounded = (size as u64).next_multiple_of(32) + if pad { 32 } else { 0 };
    let p = device.malloc(rounded).map_err(|e| acl_code(&e))?;
    // SAFETY: dev_ptr is not null (checked) and valid for a write (caller contract).
    unsafe { dev_ptr.write(p.addr() as usize as *mut c_void) };
    Ok(())
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtMalloc(dev_ptr: *mut *mut c_void, size: usize, policy: i32) -> i32 {
    guard("aclrtMalloc", code::INTERNAL_ERROR, || {
        malloc_impl(dev_ptr, size, policy, true)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtMallocAlign32(
    dev_ptr: *mut *mut c_void,
    size: usize,
    policy: i32,
) -> i32 {
    guard("aclrtMallocAlign32", code::INTERNAL_ERROR, || {
        malloc_impl(dev_ptr, size, policy, false)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtFree(dev_ptr: *mut c_void) -> i32 {
    guard("aclrtFree", code::INTERNAL_ERROR, || {
        if dev_ptr.is_null() {
            return Err(code::INVALID_PARAM);
        }
        let (_, device) = current()?;
        device
            .free(DevicePtr(dev_ptr as usize as u64))
            .map_err(|e| acl_code(&e))
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtGetMemInfo(attr: i32, free: *mut usize, total: *mut usize) -> i32 {
    guard("aclrtGetMemInfo", code::INTERNAL_ERROR, || {
        if free.is_null() || total.is_null() || !(0..=1).contains(&attr) {
            return Err(code::INVALID_PARAM);
        }
        let (_, device) = current()?;
        let info = device.memory_info().map_err(|e| acl_code(&e))?;
        // SAFETY: both pointers are not null (checked) and valid for writes (contract).
        unsafe {
            free.write(info.free as usize);
            total.write(info.total as usize);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtCreateStream(stream: *mut *mut c_void) -> i32 {
    guard("aclrtCreateStream", code::INTERNAL_ERROR, || {
        if stream.is_null() {
            return Err(code::INVALID_PARAM);
        }
        let (_, device) = current()?;
        let s = device.create_stream().map_err(|e| acl_code(&e))?;
        let key = insert_handle(Handle::Stream(StreamH { device, stream: s }));
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { stream.write(key as *mut c_void) };
        Ok(())
    })
}

/// True when every op enqueued on the stream so far has finished.
fn stream_idle(s: &StreamH) -> Result<bool, i32> {
    let e = s.device.create_event().map_err(|e| acl_code(&e))?;
    s.device
        .record_event(&e, &s.stream)
        .map_err(|e| acl_code(&e))?;
    s.device.query_event(&e).map_err(|e| acl_code(&e))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtDestroyStream(stream: *mut c_void) -> i32 {
    guard("aclrtDestroyStream", code::INTERNAL_ERROR, || {
        let Some(Handle::Stream(s)) = get_handle(stream as usize) else {
            return Err(code::RT_PARAM_INVALID);
        };
        // The runtime requires the stream's work to be finished (synchronize first, or
        // aclrtDestroyStreamForce on abort paths); the handle stays valid.
        if !stream_idle(&s)? {
            return Err(code::RT_STREAM_NOT_COMPLETE);
        }
        remove_handle(stream as usize);
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtDestroyStreamForce(stream: *mut c_void) -> i32 {
    guard(
        "aclrtDestroyStreamForce",
        code::INTERNAL_ERROR,
        || match remove_handle(stream as usize) {
            Some(Handle::Stream(_)) => Ok(()),
            _ => Err(code::RT_PARAM_INVALID),
        },
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtSynchronizeStream(stream: *mut c_void) -> i32 {
    guard("aclrtSynchronizeStream", code::INTERNAL_ERROR, || {
        let s = stream_of(stream)?;
        s.device
            .synchronize_stream(&s.stream)
            .map_err(|e| acl_code(&e))
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtSynchronizeStreamWithTimeout(
    stream: *mut c_void,
    timeout_ms: i32,
) -> i32 {
    guard(
        "aclrtSynchronizeStreamWithTimeout",
        code::INTERNAL_ERROR,
        || {
            let s = stream_of(stream)?;
            if timeout_ms > 0 {
                let deadline = Instant::now() + Duration::from_millis(timeout_ms as u64);
                let mut pause = Duration::from_micros(100);
                while !stream_idle(&s)? {
                    if Instant::now() >= deadline {
                        return Err(code::RT_STREAM_SYNC_TIMEOUT);
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
            } else if timeout_ms < -1 {
                return Err(code::INVALID_PARAM);
            }
            // Done (or no limit): surfaces the stream's error, if any.
            s.device
                .synchronize_stream(&s.stream)
                .map_err(|e| acl_code(&e))
        },
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtSynchronizeDevice() -> i32 {
    guard("aclrtSynchronizeDevice", code::INTERNAL_ERROR, || {
        let (_, device) = current()?;
        device.synchronize_device().map_err(|e| acl_code(&e))
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtMemcpyAsync(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: i32,
    stream: *mut c_void,
) -> i32 {
    guard("aclrtMemcpyAsync", code::INTERNAL_ERROR, || {
        if dst.is_null() || src.is_null() || count > dest_max {
            return Err(code::INVALID_PARAM);
        }
        let s = stream_of(stream)?;
        if count == 0 {
            return Ok(());
        }
        let map = |e: memreuse_core::BackendError| acl_code(&e);
        match kind {
            0 => {
                // SAFETY: both host ranges are valid for `count` bytes (contract) and the
                // caller does not pass overlapping host ranges to a copy.
                unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), dst.cast::<u8>(), count) };
                Ok(())
            }
            1 => {
                // SAFETY: `src` is a host buffer valid for reads of `count` bytes (contract);
                // the mock stages it before returning.
                let bytes = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), count) };
                s.device
                    .copy_host_to_device(DevicePtr(dst as usize as u64), bytes, &s.stream)
                    .map_err(map)
            }
            2 => {
                // SAFETY: `dst` is a host buffer valid for writes of `count` bytes (contract);
                // the mock's copy completes before returning, so the slice does not outlive
                // the call.
                let bytes = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), count) };
                s.device
                    .copy_device_to_host(bytes, DevicePtr(src as usize as u64), &s.stream)
                    .map_err(map)
            }
            3 => {
                // acl_rt.h: on-chip device-to-device copies need 64-byte aligned addresses.
                if dst as usize % 64 != 0 || src as usize % 64 != 0 {
                    return Err(code::RT_PARAM_INVALID);
                }
                s.device
                    .copy_device_to_device(
                        DevicePtr(dst as usize as u64),
                        DevicePtr(src as usize as u64),
                        count as u64,
                        &s.stream,
                    )
                    .map_err(map)
            }
            _ => Err(code::INVALID_PARAM),
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtMemsetAsync(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
    stream: *mut c_void,
) -> i32 {
    guard("aclrtMemsetAsync", code::INTERNAL_ERROR, || {
        if dev_ptr.is_null() || count > max_count {
            return Err(code::INVALID_PARAM);
        }
        let s = stream_of(stream)?;
        if count == 0 {
            return Ok(());
        }
        let ptr = DevicePtr(dev_ptr as usize as u64);
        let result = if value == 0 {
            s.device.memset_zero(ptr, count as u64, &s.stream)
        } else {
            let byte = value as u8;
            s.device.enqueue_custom(
                &s.stream,
                "aclrtMemsetAsync",
                &[MemAccess::write(ptr, count as u64)],
                move |m| {
                    m.bytes_mut(0, 0)?.fill(byte);
                    Ok(())
                },
            )
        };
        result.map_err(|e| acl_code(&e))
    })
}
