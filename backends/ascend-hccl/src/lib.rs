//! memreuse-ascend: the Ascend NPU backend of memreuse, over the ACL runtime
//! (`libascendcl.so`) and HCCL (`libhccl.so`), both opened at run time with libloading.
//!
//! | layer | module | what |
//! | --- | --- | --- |
//! | sys | [`sys`] | the exact C types, constants and function-pointer types of the ABI |
//! | loader | [`loader`] | finding the libraries (every path tried is recorded), resolving required and optional symbols |
//! | result | [`result`] | every status checked; ACL/HCCL codes as typed errors with their names; 207001 / 207018 / `HCCL_E_OOM` are `OutOfMemory` |
//! | safe | [`AscendDevice`], [`AscendCommunicator`] | RAII streams, pooled SYNC events ([`events`]), pooled pinned staging, the `Backend` and `Communicator` implementations, fallbacks for optional symbols |
//! | safe | [`virtual_memory`] | the optional `vm_*` calls (expandable segments) over `aclrtReserveMemAddress` / `aclrtMallocPhysical` / `aclrtMapMem`, misuse refused before any FFI call |
//!
//! The runtime's usage rules this crate keeps, the symbol table (required or optional, which
//! CANN versions export each) and the test pinning each rule:
//! `backends/ascend-hccl/docs/usage-rules.md`. [`finalize`] resets the devices and calls
//! `aclFinalize` once (also at process exit).
//!
//! Registered as backend `ascend`, with an in-process world opener (one thread per rank);
//! [`launch::open_rank_from_env`] opens one rank per process (torchrun's variables, root
//! info through `memreuse_core::store::TcpStore`).
//! Without the libraries, `device_count` and `open` return `BackendError::Unavailable`
//! listing every path tried; nothing panics. CI exercises every line of this crate against
//! the stand-in library (`backends/ascend-hccl/standin`); it has not yet run on a real NPU.

pub mod comm;
pub mod device;
pub mod events;
mod family;
mod group;
pub mod launch;
pub mod loader;
mod races;
pub mod registry;
pub mod result;
mod staging;
mod stream;
pub mod sys;
pub mod virtual_memory;

pub use comm::AscendCommunicator;
pub use device::{AscendDevice, AscendEvent, AscendStream};
pub use loader::{Api, LoadError, api};

use memreuse_core::BackendError;
use parking_lot::Mutex;

/// What this process did with one loaded library set: initialised it, set these devices.
struct Lifecycle {
    api: usize,
    devices: Vec<i32>,
}

static LIFECYCLE: Mutex<Vec<Lifecycle>> = Mutex::new(Vec::new());

/// `aclInit(NULL)` once per loaded library set (a runtime that reports
/// `ACL_ERROR_REPEAT_INITIALIZE` counts as initialised). The first call registers a
/// process-exit hook that runs [`finalize`] for every library set still initialised.
pub fn init(api: &'static Api) -> Result<(), BackendError> {
    let key = std::ptr::from_ref(api) as usize;
    let mut done = LIFECYCLE.lock();
    if done.iter().any(|l| l.api == key) {
        return Ok(());
    }
    // SAFETY: a null config path is allowed by acl.h.
    let code = unsafe { (api.aclInit)(std::ptr::null()) };
    if code != sys::ACL_ERROR_REPEAT_INITIALIZE {
        result::acl_check(code, "aclInit", 0)?;
    }
    done.push(Lifecycle {
        api: key,
        devices: Vec::new(),
    });
    register_exit_hook();
    Ok(())
}

/// Remembers that `device` was set on some thread (it is reset by [`finalize`]).
pub(crate) fn note_device_set(api: &Api, device: i32) {
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
        // SAFETY: plain integer argument.
        let code = unsafe { (api.aclrtResetDevice)(d) };
        if let Err(e) = result::acl_check(code, "aclrtResetDevice", 0) {
            first_error.get_or_insert(e);
        }
    }
    // Every thread's cached binding is stale now.
    device::forget_binding();
    // SAFETY: no arguments; called once per initialisation, after every device was reset.
    let code = unsafe { (api.aclFinalize)() };
    result::acl_check(code, "aclFinalize", 0)?;
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
