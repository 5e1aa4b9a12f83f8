//! memreuse: a stream-aware caching allocator and the multi-stream reuse policies that
//! keep collective communication memory-safe, written once against small backend traits.
//!
//! This facade re-exports [`memreuse_core`] (so `memreuse::{ProcessGroup, ReuseMode,
//! ReduceOp, DType, CachingAllocator, ...}` are all here) and links the backends chosen by
//! cargo features (`mock`, on by default; `cuda`; `ascend`). [`open_backend`] opens one
//! device by name, [`open_world`] all ranks of a world in this process, and
//! [`open_backend_from_env`] the device `MEMREUSE_BACKEND` names. The repository's README
//! ("Use it as a library") walks through a whole program; `docs/design.md` explains the
//! allocator's rules and the reuse modes.
//!
//! # Opening a backend by name
//!
//! ```
//! use memreuse::{Backend, BackendOptions, OpenError, open_backend};
//!
//! let options = BackendOptions { memory_capacity: Some(64 << 20), ..BackendOptions::default() };
//! let device = open_backend("mock", &options)?;
//! assert_eq!(device.memory_info()?.total, 64 << 20);
//!
//! // A backend memreuse knows but this build does not link names its cargo feature.
//! # #[cfg(not(feature = "ascend"))]
//! match open_backend("ascend", &options) {
//!     Err(OpenError::NotCompiled { feature, .. }) => assert_eq!(feature, "ascend"),
//!     _ => unreachable!(),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The allocator and a two-rank process group, in every mode
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use memreuse::comm::{read_f64, write_f64};
//! use memreuse::{
//!     AllocatorConfig, Backend, BackendOptions, CachingAllocator, CommBuffer, DType,
//!     ProcessGroup, ReduceOp, ReuseMode, WorldOptions, open_world,
//! };
//!
//! let options = WorldOptions {
//!     world_size: 2,
//!     backend: BackendOptions::default(),
//!     timeout: Duration::from_secs(30),
//! };
//! for mode in ReuseMode::ALL {
//!     let ranks = open_world("mock", &options)?;
//!     std::thread::scope(|scope| {
//!         for endpoint in ranks {
//!             scope.spawn(move || {
//!                 let device = endpoint.backend;
//!                 let allocator =
//!                     CachingAllocator::new(Arc::new(device.clone()), AllocatorConfig::default());
//!                 let pg = ProcessGroup::builder(Arc::clone(&allocator), endpoint.communicator)
//!                     .mode(mode)
//!                     .build()
//!                     .unwrap();
//!                 let current = device.default_stream();
//!                 // Eight bf16 elements (2 bytes each) holding 0, 1, ..., 7.
//!                 let t = allocator.allocate(8 * 2, &current).unwrap();
//!                 let mut bytes = vec![0u8; 16];
//!                 for (i, e) in bytes.chunks_exact_mut(2).enumerate() {
//!                     write_f64(DType::BF16, i as f64, e);
//!                 }
//!                 device.copy_host_to_device(t.ptr(), &bytes, &current).unwrap();
//!                 // A bf16 all_reduce of only the first 4 of the 8 elements.
//!                 let first_half = CommBuffer::new(&t, DType::BF16).with_count(4);
//!                 let work = pg.all_reduce(first_half, ReduceOp::Sum, &current, true).unwrap();
//!                 work.wait(&current).unwrap();
//!                 let mut out = vec![0u8; 16];
//!                 device.copy_device_to_host(&mut out, t.ptr(), &current).unwrap();
//!                 let values: Vec<f64> = out
//!                     .chunks_exact(2)
//!                     .map(|c| read_f64(DType::BF16, c))
//!                     .collect();
//!                 assert_eq!(values, [0.0, 2.0, 4.0, 6.0, 4.0, 5.0, 6.0, 7.0], "mode {mode}");
//!             });
//!         }
//!     });
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Observability
//!
//! [`observe`] holds the entry points: memory-viewer snapshots and OOM snapshots, timelines,
//! Prometheus metrics, early warning.
//!
//! ```
//! use std::sync::Arc;
//! use memreuse::observe::{DeviceMetrics, MetricsReport, ViewerSnapshot, render_metrics};
//! use memreuse::{AllocatorConfig, Backend, BackendOptions, CachingAllocator, open_backend};
//!
//! let device = open_backend("mock", &BackendOptions::default())?;
//! let allocator = CachingAllocator::new(Arc::new(device.clone()), AllocatorConfig::default());
//! let _t = allocator.allocate(1 << 20, &device.default_stream())?;
//! let snapshot = ViewerSnapshot::from_snapshot(0, &allocator.snapshot())?;
//! assert!(snapshot.to_json()?.contains("segments"));
//! let report = MetricsReport { devices: vec![DeviceMetrics::collect(&allocator)], groups: vec![] };
//! assert!(render_metrics(&report).contains("memreuse_allocated_bytes"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

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
/// available. With feature `plugin`, `plugin:PATH` and the names `MEMREUSE_BACKEND_PLUGINS`
/// gives are loaded first (docs/plugin-abi.md); a plugin that cannot be loaded is
/// [`OpenError::Plugin`].
pub fn open_backend(name: &str, options: &BackendOptions) -> Result<AnyBackend, OpenError> {
    register_plugin(name)?;
    if find_backend(name).is_none() {
        return Err(not_linked(name));
    }
    memreuse_core::open_backend(name, options)
}

/// Opens `options.world_size` ranks of the backend called `name` inside this process, one
/// device each (rank `r` on device `r`), with one world communicator: the single-process
/// multi-device job, and what the conformance runner replays schedules on.
///
/// Unknown and not-compiled names are errors as in [`open_backend`]; too few devices is
/// [`OpenError::Backend`] with [`BackendError::Unavailable`].
pub fn open_world(name: &str, options: &WorldOptions) -> Result<Vec<RankEndpoint>, OpenError> {
    register_plugin(name)?;
    match find_world(name) {
        Some(registration) => Ok((registration.open_world)(options)?),
        None if find_backend(name).is_some() => {
            Err(OpenError::Backend(BackendError::Unavailable {
                backend: name.to_owned(),
                reason: "this backend opens single devices only (no world registration)".to_owned(),
            }))
        }
        None => Err(not_linked(name)),
    }
}

/// The error for a name no linked backend has: [`OpenError::NotCompiled`] for a backend
/// memreuse knows (naming its cargo feature), else [`OpenError::Unknown`].
/// With feature `plugin`: loads `plugin:PATH` names and the plugins `MEMREUSE_BACKEND_PLUGINS`
/// names, so they open like compiled-in backends.
#[cfg(feature = "plugin")]
fn register_plugin(name: &str) -> Result<(), OpenError> {
    memreuse_plugin::ensure_registered(name)
        .map(|_| ())
        .map_err(|e| OpenError::Plugin {
            name: name.to_owned(),
            reason: e.to_string(),
        })
}

/// Without feature `plugin` nothing is loaded at run time.
#[cfg(not(feature = "plugin"))]
#[expect(
    clippy::unnecessary_wraps,
    reason = "the same signature as with feature `plugin`"
)]
fn register_plugin(_name: &str) -> Result<(), OpenError> {
    Ok(())
}

fn not_linked(name: &str) -> OpenError {
    let available: Vec<String> = registered_backends()
        .iter()
        .map(|r| r.name.to_owned())
        .collect();
    if name.starts_with("plugin:") && cfg!(not(feature = "plugin")) {
        return OpenError::NotCompiled {
            name: name.to_owned(),
            feature: "plugin".to_owned(),
            available,
        };
    }
    match KNOWN_BACKENDS.iter().find(|(n, _)| *n == name) {
        Some((_, feature)) => OpenError::NotCompiled {
            name: name.to_owned(),
            feature: (*feature).to_owned(),
            available,
        },
        None => OpenError::Unknown {
            name: name.to_owned(),
            available,
        },
    }
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
