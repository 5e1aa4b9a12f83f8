//! memreuse: a stream-aware caching allocator and the multi-stream reuse policies that
//! keep collective communication memory-safe, written once against small backend traits.
//!
//! This facade re-exports [`memreuse_core`] and links the backends chosen by cargo
//! features (`mock`, on by default). [`open_backend`] and [`open_backend_from_env`] pick
//! one by name at run time.

pub use memreuse_core::*;

#[cfg(feature = "mock")]
pub use memreuse_mock as mock;

/// The CUDA backend (cudarc driver + NCCL, loaded at run time), with feature `cuda`.
#[cfg(feature = "cuda")]
pub use memreuse_cuda as cuda;

/// The Ascend backend (ACL runtime + HCCL, loaded at run time), with feature `ascend`.
#[cfg(feature = "ascend")]
pub use memreuse_ascend as ascend;

/// The Vulkan backend (ash, loader opened at run time; CI runs it on lavapipe), with
/// feature `vulkan`.
#[cfg(feature = "vulkan")]
pub use memreuse_vulkan as vulkan;

/// The variable that names the backend [`open_backend_from_env`] opens.
pub const MEMREUSE_BACKEND: &str = "MEMREUSE_BACKEND";

/// The backend used when `MEMREUSE_BACKEND` is unset.
pub const DEFAULT_BACKEND: &str = "mock";

/// Backends memreuse knows about, with the cargo feature that links each.
pub const KNOWN_BACKENDS: &[(&str, &str)] = &[
    ("mock", "mock"),
    ("cuda", "cuda"),
    ("ascend", "ascend"),
    ("vulkan", "vulkan"),
];

/// Opens device `options.device` of the backend called `name`.
///
/// A known backend that this build does not link is [`OpenError::NotCompiled`] (naming the
/// cargo feature); any other unknown name is [`OpenError::Unknown`]; both list what is
/// available.
pub fn open_backend(name: &str, options: &BackendOptions) -> Result<AnyBackend, OpenError> {
    if find_backend(name).is_none() {
        let available: Vec<String> = registered_backends()
            .iter()
            .map(|r| r.name.to_owned())
            .collect();
        if let Some((_, feature)) = KNOWN_BACKENDS.iter().find(|(n, _)| *n == name) {
            return Err(OpenError::NotCompiled {
                name: name.to_owned(),
                feature: (*feature).to_owned(),
                available,
            });
        }
        return Err(OpenError::Unknown {
            name: name.to_owned(),
            available,
        });
    }
    memreuse_core::open_backend(name, options)
}

/// The backend name from `MEMREUSE_BACKEND` (trimmed), or [`DEFAULT_BACKEND`] when unset.
/// A value that is empty or not UTF-8 is an error naming the variable.
pub fn backend_name_from_env() -> Result<String, OpenError> {
    match std::env::var_os(MEMREUSE_BACKEND) {
        None => Ok(DEFAULT_BACKEND.to_owned()),
        Some(raw) => {
            let available: Vec<String> = registered_backends()
                .iter()
                .map(|r| r.name.to_owned())
                .collect();
            match raw.to_str().map(str::trim) {
                Some(name) if !name.is_empty() => Ok(name.to_owned()),
                _ => Err(OpenError::Unknown {
                    name: format!("{MEMREUSE_BACKEND}={}", raw.to_string_lossy()),
                    available,
                }),
            }
        }
    }
}

/// Opens the backend named by `MEMREUSE_BACKEND` (default `mock`).
pub fn open_backend_from_env(options: &BackendOptions) -> Result<AnyBackend, OpenError> {
    open_backend(&backend_name_from_env()?, options)
}
