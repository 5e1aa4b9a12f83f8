//! Layer 3: the process-wide state of the ACL runtime, in one place: its lifecycle
//! (`aclInit` once per loaded library set, every device set reset and `aclFinalize` once
//! at the end), which device each thread bound, and whether the stand-in's devices were
//! last configured with their race detector.
//!
//! Binding follows torch_npu: every thread binds the device (`aclrtSetDevice`) before its
//! first ACL call for it (rank threads, the watchdog); the binding is cached per thread and
//! forgotten by every thread at once when the runtime was finalised or the stand-in
//! reconfigured.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use memreuse_core::BackendError;
use parking_lot::Mutex;

use crate::loader::Api;
use crate::result::acl;

/// What this process did with one loaded library set: initialised it, set these devices.
struct Lifecycle {
    api: usize,
    devices: Vec<i32>,
}

static LIFECYCLE: Mutex<Vec<Lifecycle>> = Mutex::new(Vec::new());

thread_local! {
    /// `(libraries, device, generation)` this thread last bound with `aclrtSetDevice`
    /// (device -1: none).
    static BOUND: Cell<(usize, i32, usize)> = const { Cell::new((0, -1, 0)) };
}

/// Bumped whenever every thread's binding becomes stale (finalize, stand-in reconfigure).
static GENERATION: AtomicUsize = AtomicUsize::new(1);

/// Whether the stand-in's devices were last configured with their race detector (off under
/// `BackendOptions::disable_native_race_detection`, i.e. `--race-check adaptor`).
static STANDIN_RACE_DETECTION: AtomicBool = AtomicBool::new(true);

/// `aclInit(NULL)` once per loaded library set (a runtime that reports
/// `ACL_ERROR_REPEAT_INITIALIZE` counts as initialised). The first call registers a
/// process-exit hook that runs [`finalize`] for every library set still initialised.
pub fn init(api: &'static Api) -> Result<(), BackendError> {
    let key = std::ptr::from_ref(api) as usize;
    let mut done = LIFECYCLE.lock();
    if done.iter().any(|l| l.api == key) {
        return Ok(());
    }
    acl::init(api)?;
    done.push(Lifecycle {
        api: key,
        devices: Vec::new(),
    });
    register_exit_hook();
    Ok(())
}

/// Remembers that `device` was set on some thread (it is reset by [`finalize`]).
fn note_device_set(api: &Api, device: i32) {
    let key = std::ptr::from_ref(api) as usize;
    if let Some(l) = LIFECYCLE.lock().iter_mut().find(|l| l.api == key) {
        if !l.devices.contains(&device) {
            l.devices.push(device);
        }
    }
}

/// Resets every device this process set through `api` (`aclrtResetDevice`), then calls
/// `aclFinalize` once, as torch_npu does at exit. A no-op when `api` is not initialised (or
/// was finalised already); a later [`init`] initialises it again. Runs at process exit by
/// itself; call it earlier only when no device, stream, event or communicator of `api` is
/// used any more.
pub fn finalize(api: &'static Api) -> Result<(), BackendError> {
    let key = std::ptr::from_ref(api) as usize;
    let entry = {
        let mut done = LIFECYCLE.lock();
        let Some(i) = done.iter().position(|l| l.api == key) else {
            return Ok(());
        };
        done.remove(i)
    };
    let mut first_error = None;
    for d in entry.devices {
        if let Err(e) = acl::reset_device(api, d) {
            first_error.get_or_insert(e);
        }
    }
    // Every thread's cached binding is stale now.
    forget_binding();
    acl::finalize(api)?;
    first_error.map_or(Ok(()), Err)
}

fn register_exit_hook() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    unsafe extern "C" {
        fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
    }
    extern "C" fn at_exit() {
        // Nothing may unwind out of an exit hook.
        let _ = std::panic::catch_unwind(|| {
            let apis: Vec<usize> = LIFECYCLE.lock().iter().map(|l| l.api).collect();
            for key in apis {
                // SAFETY: every key is the address of a `&'static Api` given to `init`.
                let api: &'static Api = unsafe { &*(key as *const Api) };
                if let Err(e) = finalize(api) {
                    tracing::warn!(%e, "finalizing the ACL runtime at exit failed");
                }
            }
        });
    }
    REGISTERED.call_once(|| {
        // SAFETY: `at_exit` is a plain `extern "C"` function that never unwinds.
        let _ = unsafe { atexit(at_exit) };
    });
}

/// Binds `device` to the calling thread (`aclrtSetDevice`), once per thread and device.
pub(crate) fn bind(api: &Api, device: i32) -> Result<(), BackendError> {
    let key = (
        std::ptr::from_ref(api) as usize,
        device,
        GENERATION.load(Ordering::Acquire),
    );
    if BOUND.with(Cell::get) == key {
        return Ok(());
    }
    acl::set_device(api, device)?;
    BOUND.with(|b| b.set(key));
    note_device_set(api, device);
    Ok(())
}

/// Forgets which device every thread bound (after the library was reconfigured or
/// finalised): each thread's next call sets its device again.
pub(crate) fn forget_binding() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Records whether the stand-in's devices were just configured with their race detector.
pub(crate) fn set_standin_race_detection(detect: bool) {
    STANDIN_RACE_DETECTION.store(detect, Ordering::Release);
}

/// Whether the stand-in's devices were last configured with their race detector.
pub(crate) fn standin_race_detection() -> bool {
    STANDIN_RACE_DETECTION.load(Ordering::Acquire)
}
