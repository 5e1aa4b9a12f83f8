//! memreuse-ascend: the Ascend NPU backend of memreuse, over the ACL runtime
//! (`libascendcl.so`) and HCCL (`libhccl.so`), both opened at run time with libloading.
//!
//! | layer | module | what |
//! | --- | --- | --- |
//! | sys | [`sys`] | the exact C types, constants and function-pointer types of the ABI |
//! | loader | [`loader`] | finding the libraries (every path tried is recorded), resolving required and optional symbols |
//! | result | [`result`] | every status checked; ACL/HCCL codes as typed errors with their names; 207001 is `OutOfMemory` |
//! | safe | [`AscendDevice`], [`AscendCommunicator`] | RAII streams and events, the `Backend` and `Communicator` implementations |
//!
//! Registered as backend `ascend`, with an in-process world opener (one thread per rank);
//! [`launch::open_rank_from_env`] opens one rank per process (torchrun's variables, root
//! info through `memreuse_core::store::TcpStore`).
//! Without the libraries, `device_count` and `open` return `BackendError::Unavailable`
//! listing every path tried; nothing panics. CI exercises every line of this crate against
//! the stand-in library (`backends/ascend-hccl/standin`); it has not yet run on a real NPU.

pub mod comm;
pub mod device;
pub mod launch;
pub mod loader;
mod races;
pub mod registry;
pub mod result;
pub mod sys;

pub use comm::AscendCommunicator;
pub use device::{AscendDevice, AscendEvent, AscendStream};
pub use loader::{Api, LoadError, api};

use memreuse_core::BackendError;
use parking_lot::Mutex;

/// `aclInit(NULL)` once per loaded library set (a runtime that reports
/// `ACL_ERROR_REPEAT_INITIALIZE` counts as initialised).
pub fn init(api: &'static Api) -> Result<(), BackendError> {
    static DONE: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    let key = std::ptr::from_ref(api) as usize;
    let mut done = DONE.lock();
    if done.contains(&key) {
        return Ok(());
    }
    // SAFETY: a null config path is allowed by acl.h.
    let code = unsafe { (api.aclInit)(std::ptr::null()) };
    if code != sys::ACL_ERROR_REPEAT_INITIALIZE {
        result::acl_check(code, "aclInit", 0)?;
    }
    done.push(key);
    Ok(())
}
