//! Mapping cudarc's error newtypes to memreuse's errors, and the library probes.
//!
//! cudarc panics when `libcuda` or `libnccl` cannot be loaded (its `culib()` calls
//! `panic_no_lib_found`), and when a bound symbol is missing from the loaded library. This
//! module probes with `is_culib_present()` before any other call and runs every entry point
//! that may load a library or a symbol for the first time under [`guard`], so neither case
//! ever reaches a caller as a panic.

use std::panic::{AssertUnwindSafe, catch_unwind};

use cudarc::driver::DriverError;
use cudarc::driver::sys::CUresult;
use cudarc::nccl::result::NcclError;
use memreuse_core::BackendError;
use memreuse_core::comm::CommError;

/// The backend's name in registries, reports and errors.
pub const BACKEND_NAME: &str = "cuda";

/// An NCCL failure: cudarc's `NcclError` only implements `Debug`, so its code is carried
/// here with the name and NCCL's own explanation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed with {code_name} ({code}): {message}")]
pub struct NcclFailure {
    /// The NCCL call.
    pub call: &'static str,
    /// `ncclResult_t` as a number.
    pub code: i64,
    /// `ncclResult_t`'s name.
    pub code_name: String,
    /// `ncclGetErrorString`.
    pub message: String,
}

impl NcclFailure {
    /// Wraps cudarc's error of `call`.
    pub fn new(call: &'static str, e: &NcclError) -> NcclFailure {
        // SAFETY: `ncclGetErrorString` takes any `ncclResult_t` and returns a pointer to a
        // static NUL-terminated string (or null, handled below). The library is loaded:
        // an `NcclError` only exists after a call into it succeeded in loading it.
        let text = unsafe { cudarc::nccl::sys::ncclGetErrorString(e.0) };
        let message = if text.is_null() {
            "no description".to_owned()
        } else {
            // SAFETY: non-null, NUL-terminated and static per NCCL's documentation.
            unsafe { std::ffi::CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        NcclFailure {
            call,
            code: e.0 as i64,
            code_name: format!("{:?}", e.0),
            message,
        }
    }
}

impl From<NcclFailure> for BackendError {
    fn from(f: NcclFailure) -> BackendError {
        BackendError::Device {
            backend: BACKEND_NAME.to_owned(),
            call: f.call,
            code: f.code,
            code_name: f.code_name,
            message: f.message,
        }
    }
}

/// `BackendError` of a failed NCCL call.
pub(crate) fn nccl(call: &'static str, e: &NcclError) -> BackendError {
    NcclFailure::new(call, e).into()
}

/// `CommError` of a failed NCCL call.
pub(crate) fn nccl_comm(call: &'static str, e: &NcclError) -> CommError {
    CommError::Backend(nccl(call, e))
}

/// `BackendError` of a failed driver call; out of memory is [`BackendError::OutOfMemory`]
/// when `requested` is given.
pub(crate) fn driver(call: &'static str, e: DriverError) -> BackendError {
    let message = e.error_string().map_or_else(
        |_| "no description".to_owned(),
        |s| s.to_string_lossy().into_owned(),
    );
    BackendError::Device {
        backend: BACKEND_NAME.to_owned(),
        call,
        code: e.0 as i64,
        code_name: format!("{:?}", e.0),
        message,
    }
}

/// `cuMemAlloc`'s error: out of memory is the allocator's retry signal.
pub(crate) fn alloc(requested: u64, e: DriverError) -> BackendError {
    out_of_memory_or("cuMemAlloc", requested, e)
}

/// The error of a call that allocates (`cuMemAlloc`, `cuMemCreate`, `cuMemAddressReserve`):
/// `CUDA_ERROR_OUT_OF_MEMORY` is [`BackendError::OutOfMemory`], anything else a `Device`
/// error naming `call`.
pub(crate) fn out_of_memory_or(call: &'static str, requested: u64, e: DriverError) -> BackendError {
    if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        BackendError::out_of_memory(BACKEND_NAME, requested, format!("{call}: {:?}", e.0))
    } else {
        driver(call, e)
    }
}

pub(crate) fn unavailable(reason: impl Into<String>) -> BackendError {
    BackendError::Unavailable {
        backend: BACKEND_NAME.to_owned(),
        reason: reason.into(),
    }
}

/// Runs `f`, turning a panic (a library or symbol cudarc could not load) into
/// [`BackendError::Unavailable`].
pub(crate) fn guard<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, BackendError>,
) -> Result<T, BackendError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let detail = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("no message");
        Err(unavailable(format!(
            "{what}: the CUDA bindings panicked ({detail})"
        )))
    })
}

/// Where `dlopen` looked, in words.
fn search_path() -> String {
    std::env::var("LD_LIBRARY_PATH")
        .ok()
        .filter(|s| !s.is_empty())
        .map_or_else(
            || "the system loader paths (LD_LIBRARY_PATH is unset)".to_owned(),
            |p| format!("LD_LIBRARY_PATH={p} and the system loader paths"),
        )
}

/// cudarc's candidate file names for `lib`, without repeats.
fn candidates(lib: &str) -> String {
    let mut names = cudarc::get_lib_name_candidates(lib);
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names.join(", ")
}

/// Checks that the CUDA driver library can be loaded, without letting cudarc panic.
pub(crate) fn probe_driver() -> Result<(), BackendError> {
    // SAFETY: `is_culib_present` only tries `dlopen` on cudarc's candidate names and drops
    // what it opened; loading libcuda runs its initializers, which is what every later call
    // needs anyway.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        return Ok(());
    }
    Err(unavailable(format!(
        "the CUDA driver library (libcuda) was not found: tried {} in {}",
        candidates("cuda"),
        search_path()
    )))
}

/// Checks that the NCCL library can be loaded, without letting cudarc panic.
pub(crate) fn probe_nccl() -> Result<(), BackendError> {
    // SAFETY: as in `probe_driver`, a `dlopen` probe of cudarc's candidate names.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Ok(());
    }
    Err(unavailable(format!(
        "the NCCL library was not found: tried {} in {} (PyTorch's nvidia-nccl wheel ships \
         libnccl.so.2: put a libnccl.so symlink to it on LD_LIBRARY_PATH)",
        candidates("nccl"),
        search_path()
    )))
}
