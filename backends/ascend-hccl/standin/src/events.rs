//! The ACL event symbols, with the usage rules the runtime documents enforced:
//! - `aclrtStreamWaitEvent` refuses an event created without `ACL_EVENT_SYNC`
//!   (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`, 207000: the docs say "not supported");
//! - an event from `aclrtCreateEventWithFlag` (not `...ExWithFlag`) is recorded once; a
//!   second record without `aclrtResetEvent` in between is refused
//!   (`ACL_ERROR_RT_PARAM_INVALID`), and before its first record (or after a reset) it
//!   reports `NOT_READY`: only Ex events are documented as reporting complete then.
//!
//! The runtime documents the rules, not the codes it answers with; the codes here are the
//! stand-in's choice.
//!
//! # Safety (all functions)
//! As for `acl.rs`: out-pointers valid for one write (null is refused).

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use memreuse_core::Backend;

use crate::{
    EventH, Handle, acl_code, code, current, event_of, guard, insert_handle, remove_handle,
    stream_of,
};

/// `ACL_EVENT_SYNC`.
const SYNC: u32 = 0x1;
/// Every flag of `acl_rt.h` (SYNC, CAPTURE_STREAM_PROGRESS, TIME_LINE, DEVICE_USE_ONLY,
/// EXTERNAL, IPC).
const KNOWN: u32 = 0x1 | 0x2 | 0x8 | 0x10 | 0x20 | 0x40;

fn create_event(event: *mut *mut c_void, flag: u32, ex: bool) -> Result<(), i32> {
    if event.is_null() || flag == 0 || flag & !KNOWN != 0 {
        return Err(code::INVALID_PARAM);
    }
    let (_, device) = current()?;
    let e = device.create_event().map_err(|e| acl_code(&e))?;
    let key = insert_handle(Handle::Event(Arc::new(EventH {
        device,
        event: e,
        flags: flag,
        ex,
        recorded: AtomicBool::new(false),
    })));
    // SAFETY: not null (checked), valid for a write (contract).
    unsafe { event.write(key as *mut c_void) };
    Ok(())
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtCreateEventWithFlag(event: *mut *mut c_void, flag: u32) -> i32 {
    guard("aclrtCreateEventWithFlag", code::INTERNAL_ERROR, || {
        create_event(event, flag, false)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtCreateEventExWithFlag(event: *mut *mut c_void, flag: u32) -> i32 {
    guard("aclrtCreateEventExWithFlag", code::INTERNAL_ERROR, || {
        create_event(event, flag, true)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtDestroyEvent(event: *mut c_void) -> i32 {
    guard(
        "aclrtDestroyEvent",
        code::INTERNAL_ERROR,
        || match remove_handle(event as usize) {
            Some(Handle::Event(_)) => Ok(()),
            _ => Err(code::RT_PARAM_INVALID),
        },
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtRecordEvent(event: *mut c_void, stream: *mut c_void) -> i32 {
    guard("aclrtRecordEvent", code::INTERNAL_ERROR, || {
        let e = event_of(event)?;
        let s = stream_of(stream)?;
        if !e.ex && e.recorded.load(Ordering::Acquire) {
            // Only Ex events are re-recordable; others need aclrtResetEvent first.
            return Err(code::RT_PARAM_INVALID);
        }
        e.device
            .record_event(&e.event, &s.stream)
            .map_err(|err| acl_code(&err))?;
        e.recorded.store(true, Ordering::Release);
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtResetEvent(event: *mut c_void, stream: *mut c_void) -> i32 {
    guard("aclrtResetEvent", code::INTERNAL_ERROR, || {
        let e = event_of(event)?;
        stream_of(stream)?;
        e.recorded.store(false, Ordering::Release);
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtQueryEventStatus(event: *mut c_void, status: *mut i32) -> i32 {
    guard("aclrtQueryEventStatus", code::INTERNAL_ERROR, || {
        let e = event_of(event)?;
        if status.is_null() {
            return Err(code::INVALID_PARAM);
        }
        let done = if !e.ex && !e.recorded.load(Ordering::Acquire) {
            // Not documented as complete before its first record: say NOT_READY.
            false
        } else {
            e.device
                .query_event(&e.event)
                .map_err(|err| acl_code(&err))?
        };
        // aclrtEventRecordedStatus: NOT_READY = 0, COMPLETE = 1.
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { status.write(i32::from(done)) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtSynchronizeEvent(event: *mut c_void) -> i32 {
    guard("aclrtSynchronizeEvent", code::INTERNAL_ERROR, || {
        let e = event_of(event)?;
        e.device
            .synchronize_event(&e.event)
            .map_err(|err| acl_code(&err))
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn aclrtStreamWaitEvent(stream: *mut c_void, event: *mut c_void) -> i32 {
    guard("aclrtStreamWaitEvent", code::INTERNAL_ERROR, || {
        let s = stream_of(stream)?;
        let e = event_of(event)?;
        if e.flags & SYNC == 0 {
            // "not supported by aclrtStreamWaitEvent" without ACL_EVENT_SYNC.
            return Err(code::RT_FEATURE_NOT_SUPPORT);
        }
        s.device
            .stream_wait_event(&s.stream, &e.event)
            .map_err(|err| acl_code(&err))
    })
}
