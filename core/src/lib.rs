//! memreuse-core: the backend traits, the stream-aware caching allocator, the multi-stream
//! reuse policies and the process group, written once for every accelerator.
//!
//! Layers, bottom up:
//! - [`Backend`] (static dispatch) and [`DynBackend`] / [`AnyBackend`] (chosen by name at
//!   run time): one device, its streams, events and stream-ordered operations.
//! - The caching allocator (`allocator`): per-stream pools, split/merge, `record_stream`
//!   with pending-free events, per-work stream uses, OOM retry chain, stats and snapshots.
//! - [`store`]: a small TCP key-value store and torchrun's launch variables, through which
//!   multi-process jobs share the NCCL unique id (or HCCL root info).

pub mod allocator;
mod backend;
pub mod comm;
mod dyn_backend;
mod error;
mod ids;
pub mod observe;
pub mod process_group;
pub mod race;
mod registry;
pub mod store;
mod sync;
pub mod testing;
mod world;

pub use allocator::{
    AllocError, AllocatorConfig, AllocatorStats, BlockRef, CachingAllocator, CallbackId,
    ConfigError, EraseOutcome, OomInfo, OutOfMemory, Snapshot, Storage, WeakStorage,
};
pub use backend::{Backend, Capabilities};
pub use dyn_backend::{AnyBackend, DynBackend, DynEvent, DynStream};
pub use error::BackendError;
pub use ids::{AllocationId, DevicePtr, MemoryInfo, StreamId, WorkId};
pub use race::{AccessKind, RaceAccess, RaceKind, RaceReport};
pub use registry::{
    BackendOptions, BackendRegistration, OpenError, find_backend, open_backend, registered_backends,
};

pub use world::{RankEndpoint, WorldOptions, WorldRegistration, find_world};

/// Re-exported so backend crates can `memreuse_core::inventory::submit!` without their own
/// dependency on the exact version.
pub use inventory;
