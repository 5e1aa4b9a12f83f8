//! The runtime's documented usage rules on the device side, each refused by the stand-in the
//! way the runtime documents, each kept by the backend (`docs/usage-rules.md` lists which
//! test pins which rule).

mod common;

use std::ffi::c_void;
use std::time::Duration;

use common::{
    calls, configure, hook, lib_dir, live_streams, load_dir, serial, standin, standin_so,
};
use memreuse_ascend::{AscendDevice, sys};
use memreuse_core::{Backend, BackendError, find_backend};

fn delay(dev: &AscendDevice, stream: &memreuse_ascend::AscendStream, micros: u64) {
    dev.delay(micros, stream).unwrap();
}

/// Rule 1: waits need `ACL_EVENT_SYNC` events; the stand-in refuses others (207000).
#[test]
fn events_are_sync_events_so_streams_can_wait_on_them() {
    let _g = serial();
    configure(1, 1 << 20, 0);
    let api = standin(&[]);
    let dev = AscendDevice::open(api, 0).unwrap();
    let (a, b) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
    let e = dev.create_event().unwrap();
    dev.record_event(&e, &a).unwrap();
    dev.stream_wait_event(&b, &e).unwrap();
    dev.synchronize_stream(&b).unwrap();
    // The stand-in refuses a wait on a capture-progress event, as the runtime documents.
    let mut raw: sys::aclrtEvent = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the stand-in checks every handle.
    unsafe {
        let f = api.aclrtCreateEventExWithFlag.unwrap();
        assert_eq!(f(&raw mut raw, sys::ACL_EVENT_CAPTURE_STREAM_PROGRESS), 0);
        assert_eq!((api.aclrtRecordEvent)(raw, std::ptr::null_mut()), 0);
        assert_eq!(
            (api.aclrtStreamWaitEvent)(std::ptr::null_mut(), raw),
            207_000
        );
        assert_eq!((api.aclrtDestroyEvent)(raw), 0);
    }
}

/// Rule 1: SYNC events are a scarce resource (65,536 per device): raw events are pooled, so
/// creating and dropping many events one after another creates one raw event.
#[test]
fn events_are_pooled_so_raw_events_stay_few() {
    let _g = serial();
    configure(1, 1 << 20, 0);
    let dev = AscendDevice::open(standin(&[]), 0).unwrap();
    let s = dev.default_stream();
    let created = calls("aclrtCreateEventExWithFlag");
    for _ in 0..1000 {
        let e = dev.create_event().unwrap();
        dev.record_event(&e, &s).unwrap();
        dev.synchronize_event(&e).unwrap();
    }
    // A pooled handle whose recording completed is reused, and reads as unrecorded.
    let e = dev.create_event().unwrap();
    assert!(dev.query_event(&e).unwrap());
    assert!(calls("aclrtCreateEventExWithFlag") - created <= 2);
}

/// Rule 2: without `aclrtCreateEventExWithFlag`, events come from `aclrtCreateEventWithFlag`:
/// not documented as complete before their first record (the stand-in says NOT_READY) and
/// not re-recordable without `aclrtResetEvent` (the stand-in refuses a second record).
#[test]
fn events_without_the_ex_function_read_complete_and_are_reset_before_recording_again() {
    let _g = serial();
    configure(1, 1 << 20, 0);
    let api = standin(&["aclrtCreateEventExWithFlag"]);
    let dev = AscendDevice::open(api, 0).unwrap();
    let s = dev.create_stream().unwrap();
    let e = dev.create_event().unwrap();
    assert!(
        dev.query_event(&e).unwrap(),
        "an unrecorded event is complete"
    );
    let resets = calls("aclrtResetEvent");
    for _ in 0..3 {
        dev.record_event(&e, &s).unwrap();
        dev.synchronize_event(&e).unwrap();
        assert!(dev.query_event(&e).unwrap());
    }
    assert_eq!(calls("aclrtResetEvent") - resets, 2);
    // The stand-in refuses what the runtime does not document.
    let mut raw: sys::aclrtEvent = std::ptr::null_mut();
    // SAFETY: valid out-pointers; the stand-in checks every handle.
    unsafe {
        assert_eq!((api.aclrtCreateEventWithFlag)(&raw mut raw, 1), 0);
        let mut status = 7;
        assert_eq!((api.aclrtQueryEventStatus)(raw, &raw mut status), 0);
        assert_eq!(status, sys::ACL_EVENT_RECORDED_STATUS_NOT_READY);
        assert_eq!((api.aclrtRecordEvent)(raw, std::ptr::null_mut()), 0);
        assert_eq!((api.aclrtRecordEvent)(raw, std::ptr::null_mut()), 107_000);
        assert_eq!((api.aclrtResetEvent)(raw, std::ptr::null_mut()), 0);
        assert_eq!((api.aclrtRecordEvent)(raw, std::ptr::null_mut()), 0);
        assert_eq!((api.aclrtDestroyEvent)(raw), 0);
    }
}

/// Rule 6: a stream is destroyed only after its work finished (the stand-in refuses
/// `aclrtDestroyStream` on a busy stream with 507004, keeping the handle).
#[test]
fn a_stream_with_pending_work_is_synchronized_before_it_is_destroyed() {
    let _g = serial();
    configure(1, 1 << 20, 0);
    let dev = AscendDevice::open(standin(&[]), 0).unwrap();
    let before = live_streams();
    let s = dev.create_stream().unwrap();
    delay(&dev, &s, 20_000);
    drop(s);
    assert_eq!(
        live_streams(),
        before,
        "the stream was destroyed, not leaked"
    );
}

/// Rules 5 and 6: a hung stream is a `Timeout` (507046 from
/// `aclrtSynchronizeStreamWithTimeout`), and a stream that could not be synchronized is
/// destroyed with `aclrtDestroyStreamForce`.
#[test]
fn a_hung_stream_times_out_and_is_force_destroyed() {
    let _g = serial();
    configure(1, 1 << 20, 0);
    let dev = AscendDevice::open(standin(&[]), 0).unwrap();
    dev.set_sync_timeout(Some(Duration::from_millis(20)));
    let before = (live_streams(), calls("aclrtDestroyStreamForce"));
    let s = dev.create_stream().unwrap();
    delay(&dev, &s, 1_000_000);
    let e = dev.synchronize_stream(&s).unwrap_err();
    assert!(matches!(e, BackendError::Timeout { .. }), "{e:?}");
    assert!(
        e.to_string().contains("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"),
        "{e}"
    );
    drop(s);
    assert_eq!(live_streams(), before.0);
    assert_eq!(calls("aclrtDestroyStreamForce"), before.1 + 1);
}

/// Rule 6: host copies stage through pooled pinned buffers, not one `aclrtMallocHost` each.
#[test]
fn host_copies_reuse_pooled_pinned_buffers() {
    let _g = serial();
    configure(1, 1 << 20, 0);
    let dev = AscendDevice::open(standin(&[]), 0).unwrap();
    let s = dev.default_stream();
    let p = dev.malloc(1024).unwrap();
    let before = calls("aclrtMallocHost");
    for i in 0..100u8 {
        dev.copy_host_to_device(p, &[i; 1024], &s).unwrap();
        let mut out = [0u8; 1024];
        dev.copy_device_to_host(&mut out, p, &s).unwrap();
        assert_eq!(out, [i; 1024]);
    }
    assert!(calls("aclrtMallocHost") - before <= 2);
    dev.free(p).unwrap();
}

/// Rule 6: `aclFinalize` once, after every device this process set was reset.
#[test]
fn finalize_resets_each_device_then_finalizes_once() {
    let _g = serial();
    configure(2, 1 << 20, 0);
    let api = standin(&[]);
    let (d0, d1) = (
        AscendDevice::open(api, 0).unwrap(),
        AscendDevice::open(api, 1).unwrap(),
    );
    drop((d0, d1));
    let before = (calls("aclrtResetDevice"), calls("aclFinalize"));
    memreuse_ascend::finalize(api).unwrap();
    memreuse_ascend::finalize(api).unwrap();
    assert_eq!(
        (calls("aclrtResetDevice"), calls("aclFinalize")),
        (before.0 + 2, before.1 + 1)
    );
    // Initialised again on the next open, and usable.
    let d = AscendDevice::open(api, 0).unwrap();
    let p = d.malloc(64).unwrap();
    d.free(p).unwrap();
}

/// Rule 6: current installs' `/usr/local/Ascend/cann/lib64` is searched.
#[test]
fn the_current_cann_install_directory_is_searched() {
    let reg = find_backend("ascend").expect("registered");
    match (reg.device_count)() {
        Err(BackendError::Unavailable { reason, .. }) => {
            assert!(reason.contains("/usr/local/Ascend/cann/lib64"), "{reason}");
        }
        Ok(n) => eprintln!("Ascend libraries present on this machine ({n} devices): skipped"),
        Err(e) => panic!("expected Unavailable, got {e}"),
    }
}

/// `MEMREUSE_ASCEND_DISABLE_SYMBOLS` covers optional symbols only: a required or unknown
/// name is an error saying which names are valid, not silently ignored.
#[test]
fn disabling_a_required_or_unknown_symbol_is_an_error() {
    let so = standin_so();
    let dir = lib_dir(&so, &so);
    for name in ["aclrtMalloc", "aclrtMallocAlign31"] {
        let Err(err) = load_dir(&dir, &[name]) else {
            panic!("disabling {name} must be refused");
        };
        let shown = err.to_string();
        assert!(shown.contains(name), "{shown}");
        assert!(shown.contains("aclrtCreateEventExWithFlag"), "{shown}");
    }
    assert!(load_dir(&dir, &["HcclBarrier", "aclrtMallocAlign32"]).is_ok());
}

/// The stand-in's own refusals that the backend never triggers, checked directly.
#[test]
fn the_standin_refuses_destroying_a_busy_stream_and_force_destroys_it() {
    let _g = serial();
    configure(1, 1 << 20, 0);
    let api = standin(&[]);
    let dev = AscendDevice::open(api, 0).unwrap();
    dev.bind().unwrap();
    let delay: unsafe extern "C" fn(*mut c_void, u64) -> i32 = hook("memreuse_standin_delay");
    let mut raw: sys::aclrtStream = std::ptr::null_mut();
    // SAFETY: valid out-pointer and handles; the stand-in checks every handle.
    unsafe {
        assert_eq!((api.aclrtCreateStream)(&raw mut raw), 0);
        assert_eq!(delay(raw, 1_000_000), 0);
        assert_eq!((api.aclrtDestroyStream)(raw), 507_004);
        assert_eq!((api.aclrtDestroyStreamForce.unwrap())(raw), 0);
        assert_eq!((api.aclrtSynchronizeStream)(raw), 107_000, "gone");
    }
}
