//! Streams, events and host functions: `cuStreamCreate`, `cuStreamDestroy_v2`,
//! `cuStreamSynchronize`, `cuStreamWaitEvent`, `cuLaunchHostFunc`, `cuEventCreate`,
//! `cuEventDestroy_v2`, `cuEventRecord`, `cuEventQuery`, `cuEventSynchronize`.
//!
//! Rules (`cuda.h` and the driver API reference): a current context is needed for every
//! call (`CUDA_ERROR_INVALID_CONTEXT`); work is enqueued only on a stream of the current
//! context, and an event is recorded only on a stream of its own context
//! (`CUDA_ERROR_INVALID_HANDLE`: the documentation states the rule, not the code); flags
//! outside the documented ones are `CUDA_ERROR_INVALID_VALUE`; `cuEventQuery` answers
//! `CUDA_ERROR_NOT_READY` while the recorded work runs and `CUDA_SUCCESS` for an event never
//! recorded; a destroyed stream or event is an unknown handle. The NULL stream and the
//! special handles `CU_STREAM_LEGACY` (1) and `CU_STREAM_PER_THREAD` (2) are not modelled:
//! they are answered with `CUDA_ERROR_NOT_SUPPORTED` (the backend never uses them).
//!
//! # Safety (all functions)
//! Out-pointers valid for one write (null refused).

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_uint, c_void};
use std::sync::Arc;

use memreuse_core::Backend;

use crate::codes;
use crate::state::{
    EventH, Handle, StreamH, cu_code, current, driver, get_handle, insert_handle, remove_handle,
};

/// `CU_STREAM_NON_BLOCKING`.
pub const STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_BLOCKING_SYNC`.
pub const EVENT_BLOCKING_SYNC: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`.
pub const EVENT_DISABLE_TIMING: c_uint = 2;
/// `CU_EVENT_INTERPROCESS`.
pub const EVENT_INTERPROCESS: c_uint = 4;

const _: () = {
    use cudarc::driver::sys;
    assert!(sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint == STREAM_NON_BLOCKING);
    assert!(sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as c_uint == EVENT_BLOCKING_SYNC);
    assert!(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint == EVENT_DISABLE_TIMING);
    assert!(sys::CUevent_flags::CU_EVENT_INTERPROCESS as c_uint == EVENT_INTERPROCESS);
    assert!(sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT as c_uint == 0);
};

/// The stream behind a handle (any context).
pub(crate) fn stream_of(raw: usize) -> Result<StreamH, u32> {
    if raw <= 2 {
        return Err(codes::NOT_SUPPORTED);
    }
    match get_handle(raw) {
        Some(Handle::Stream(s)) => Ok(s),
        _ => Err(codes::INVALID_HANDLE),
    }
}

/// A stream of the current context, for enqueuing work.
fn own_stream(raw: usize) -> Result<StreamH, u32> {
    let (ctx, _, _) = current()?;
    let s = stream_of(raw)?;
    if s.ctx != ctx {
        return Err(codes::INVALID_HANDLE);
    }
    Ok(s)
}

pub(crate) fn event_of(raw: usize) -> Result<Arc<EventH>, u32> {
    match get_handle(raw) {
        Some(Handle::Event(e)) => Ok(e),
        _ => Err(codes::INVALID_HANDLE),
    }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuStreamCreate(ph_stream: *mut usize, flags: c_uint) -> u32 {
    driver("cuStreamCreate", || {
        if ph_stream.is_null() || flags & !STREAM_NON_BLOCKING != 0 {
            return Err(codes::INVALID_VALUE);
        }
        let (ctx, index, device) = current()?;
        let stream = device.create_stream().map_err(|e| cu_code(&e))?;
        let key = insert_handle(Handle::Stream(StreamH {
            ctx,
            index,
            device,
            stream,
        }));
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { ph_stream.write(key) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuStreamDestroy_v2(h_stream: usize) -> u32 {
    driver("cuStreamDestroy_v2", || {
        current()?;
        stream_of(h_stream)?;
        // cuda.h: work still queued completes; the handle is gone at once.
        remove_handle(h_stream);
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuStreamSynchronize(h_stream: usize) -> u32 {
    driver("cuStreamSynchronize", || {
        current()?;
        let s = stream_of(h_stream)?;
        s.device
            .synchronize_stream(&s.stream)
            .map_err(|e| cu_code(&e))
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuStreamWaitEvent(h_stream: usize, h_event: usize, flags: c_uint) -> u32 {
    driver("cuStreamWaitEvent", || {
        // CU_EVENT_WAIT_DEFAULT only (CU_EVENT_WAIT_EXTERNAL is for graphs).
        if flags != 0 {
            return Err(codes::INVALID_VALUE);
        }
        let s = own_stream(h_stream)?;
        let e = event_of(h_event)?;
        // The event may belong to another context (documented); the mock orders only
        // within one device, so a cross-device wait is not modelled.
        if e.ctx != s.ctx {
            return Err(codes::NOT_SUPPORTED);
        }
        s.device
            .stream_wait_event(&s.stream, &e.event)
            .map_err(|err| cu_code(&err))
    })
}

/// A host function and its argument, carried to the stream (plain values).
struct HostCall {
    f: unsafe extern "C" fn(*mut c_void),
    arg: usize,
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuLaunchHostFunc(
    h_stream: usize,
    f: Option<unsafe extern "C" fn(*mut c_void)>,
    user_data: *mut c_void,
) -> u32 {
    driver("cuLaunchHostFunc", || {
        let f = f.ok_or(codes::INVALID_VALUE)?;
        let s = own_stream(h_stream)?;
        let call = HostCall {
            f,
            arg: user_data as usize,
        };
        s.device
            .enqueue_custom(&s.stream, "cuLaunchHostFunc", &[], move |_| {
                // SAFETY: the caller's host function with its own argument, run in stream
                // order as cuLaunchHostFunc documents (it must not call CUDA).
                unsafe { (call.f)(call.arg as *mut c_void) };
                Ok(())
            })
            .map_err(|e| cu_code(&e))
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuEventCreate(ph_event: *mut usize, flags: c_uint) -> u32 {
    driver("cuEventCreate", || {
        let known = EVENT_BLOCKING_SYNC | EVENT_DISABLE_TIMING | EVENT_INTERPROCESS;
        // cuda.h: CU_EVENT_INTERPROCESS requires CU_EVENT_DISABLE_TIMING.
        if ph_event.is_null()
            || flags & !known != 0
            || (flags & EVENT_INTERPROCESS != 0 && flags & EVENT_DISABLE_TIMING == 0)
        {
            return Err(codes::INVALID_VALUE);
        }
        let (ctx, _, device) = current()?;
        let event = device.create_event().map_err(|e| cu_code(&e))?;
        let key = insert_handle(Handle::Event(Arc::new(EventH { ctx, device, event })));
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { ph_event.write(key) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuEventDestroy_v2(h_event: usize) -> u32 {
    driver("cuEventDestroy_v2", || {
        current()?;
        event_of(h_event)?;
        remove_handle(h_event);
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuEventRecord(h_event: usize, h_stream: usize) -> u32 {
    driver("cuEventRecord", || {
        let e = event_of(h_event)?;
        let s = own_stream(h_stream)?;
        if e.ctx != s.ctx {
            return Err(codes::INVALID_HANDLE);
        }
        e.device
            .record_event(&e.event, &s.stream)
            .map_err(|err| cu_code(&err))
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuEventQuery(h_event: usize) -> u32 {
    driver("cuEventQuery", || {
        current()?;
        let e = event_of(h_event)?;
        match e.device.query_event(&e.event) {
            Ok(true) => Ok(()),
            Ok(false) => Err(codes::NOT_READY),
            Err(err) => Err(cu_code(&err)),
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn cuEventSynchronize(h_event: usize) -> u32 {
    driver("cuEventSynchronize", || {
        current()?;
        let e = event_of(h_event)?;
        e.device
            .synchronize_event(&e.event)
            .map_err(|err| cu_code(&err))
    })
}
