//! memreuse-core: the backend traits, the stream-aware caching allocator, the multi-stream
//! reuse policies and the process group, written once for every accelerator.
//!
//! Layers, bottom up (`docs/design.md` in the repository explains each):
//! - [`Backend`] (static dispatch) and [`DynBackend`] / [`AnyBackend`] (chosen by name at
//!   run time through [`open_backend`] and the [`registered_backends`] a backend crate
//!   submits, or registers at run time): one device, its streams, events and
//!   stream-ordered operations; [`BackendError`] with the constructors every backend uses.
//! - [`virtual_memory`]: the optional reserve/map/unmap interface and the [`virtual_memory::VmLedger`]
//!   bookkeeping the CUDA and Ascend bindings share.
//! - [`race`]: the happens-before layer ([`race::HappensBefore`]: vector clocks per stream,
//!   "a map is an allocation, an unmap a free") that the mock's native detector and the
//!   [`race::RaceChecker`] adaptor both drive, the detector, the reports and the advice
//!   that tells a program's race from the allocator's.
//! - [`allocator`]: the caching allocator ([`CachingAllocator`]): the device-free index
//!   (every block decision, victim selection included, as functions on offsets), per-stream
//!   pools, split/merge, the pending frees and their events (one owner,
//!   `allocator::pending`), the OOM retry chain and its report (`allocator::oom`),
//!   PyTorch-named statistics and snapshots. A [`Storage`] is one tensor's block; dropping
//!   its last handle frees it.
//! - [`history`]: the allocator's event history (recorded, read back, validated).
//! - [`comm`]: the [`Communicator`] trait a backend implements (NCCL semantics: enqueued on
//!   a stream, matched in issue order), with [`DType`] and [`ReduceOp`].
//! - [`process_group`]: [`ProcessGroup`] over one communicator, with a comm stream, [`Work`]s
//!   with `wait()`, a watchdog, and the reuse policy of one [`ReuseMode`] (0-3, chosen by
//!   the builder or `MULTI_STREAM_MEMORY_REUSE`). Tensors are passed as [`CommBuffer`]s (a
//!   `&Storage` is all of it as `f32`). Its own files are layered too (its `mod.rs` lists
//!   them).
//! - [`observe`]: PyTorch memory-viewer snapshots, OOM snapshots, Chrome-trace timelines,
//!   Prometheus metrics, fragmentation, growth early warning; built on the allocator's
//!   public API.
//! - [`store`]: a small TCP key-value store and torchrun's launch variables, through which
//!   multi-process jobs share the NCCL unique id (or HCCL root info); [`find_world`] opens
//!   all ranks of a world inside one process instead.
//! - [`testing`]: [`testing::ManualBackend`] (streams that advance only when told) and the
//!   contract kits ([`testing::contract`] and the communicator's) every port runs first.
//!
//! Race reports ([`RaceReport`]) come from a backend's native detector where it has one
//! (the mock, and the stand-in libraries built on it) and from the [`race::RaceChecker`]
//! adaptor on every other backend.
//!
//! # The allocator on two streams
//!
//! A block is reused only by the stream it was allocated on; `record_stream` tells the
//! allocator another stream uses it, so freeing it waits for that stream's work.
//!
//! ```
//! use std::sync::Arc;
//! use memreuse_core::testing::ManualBackend;
//! use memreuse_core::{AllocatorConfig, Backend, CachingAllocator};
//!
//! let device = Arc::new(ManualBackend::new(1 << 30));
//! let allocator = CachingAllocator::new(Arc::clone(&device), AllocatorConfig::default());
//! let compute = device.default_stream();
//! let side = device.create_stream()?;
//!
//! let t = allocator.allocate(1 << 20, &compute)?;
//! allocator.record_stream(&t, &side); // `side` reads it too
//! let address = t.ptr();
//! drop(t); // `side` has not finished: the block waits in pending-free
//! assert_eq!(allocator.stats().pending_free_bytes, 1 << 20);
//! assert_ne!(allocator.allocate(1 << 20, &compute)?.ptr(), address);
//!
//! device.advance_all(); // the manual device's streams finish their work
//! allocator.process_events()?;
//! assert_eq!(allocator.allocate(1 << 20, &compute)?.ptr(), address); // reused
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # A process group in each mode
//!
//! Two ranks of the mock device (`memreuse-mock`), one thread each; the same code runs
//! on any backend's communicator.
//!
//! ```
//! use std::sync::Arc;
//! use memreuse_core::{AllocatorConfig, Backend, CachingAllocator, ProcessGroup, ReduceOp, ReuseMode};
//! use memreuse_mock::{MockConfig, open_mock_world};
//!
//! for mode in ReuseMode::ALL {
//!     let ranks = open_mock_world(2, MockConfig::with_capacity(16 << 20))?;
//!     let record_stream_calls = std::thread::scope(|scope| {
//!         let threads: Vec<_> = ranks
//!             .into_iter()
//!             .map(|(device, comm)| scope.spawn(move || {
//!                 let allocator =
//!                     CachingAllocator::new(Arc::new(device.clone()), AllocatorConfig::default());
//!                 let pg = ProcessGroup::builder(Arc::clone(&allocator), Box::new(comm))
//!                     .mode(mode)
//!                     .build()
//!                     .unwrap();
//!                 let current = device.default_stream();
//!                 let t = allocator.allocate(1024, &current).unwrap(); // 256 f32
//!                 pg.all_reduce(&t, ReduceOp::Sum, &current, true).unwrap().wait(&current).unwrap();
//!                 allocator.stats().record_stream_calls
//!             }))
//!             .collect();
//!         threads.into_iter().map(|t| t.join().unwrap()).collect::<Vec<u64>>()
//!     });
//!     // Mode 2 stashes the tensor on the work's shelf instead of calling record_stream.
//!     let expected = if mode == ReuseMode::AvoidRecordStream { 0 } else { 1 };
//!     assert_eq!(record_stream_calls, [expected, expected], "mode {mode}");
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Observability
//!
//! ```
//! use std::sync::Arc;
//! use memreuse_core::observe::{
//!     DeviceMetrics, EarlyWarning, EarlyWarningConfig, MetricsReport, ViewerSnapshot,
//!     render_metrics,
//! };
//! use memreuse_core::testing::ManualBackend;
//! use memreuse_core::{AllocatorConfig, Backend, CachingAllocator};
//!
//! let device = Arc::new(ManualBackend::new(1 << 30));
//! let config = AllocatorConfig::default().with_trace_capacity(1000);
//! let allocator = CachingAllocator::new(Arc::clone(&device), config);
//! let _t = allocator.allocate(3 << 20, &device.default_stream())?;
//!
//! // What PyTorch's memory viewer opens (`python -m torch.cuda._memory_viz trace_plot`).
//! let pickle = ViewerSnapshot::from_snapshot(0, &allocator.snapshot())?.to_pickle()?;
//! assert!(!pickle.is_empty());
//! // Prometheus text exposition of the statistics.
//! let report = MetricsReport { devices: vec![DeviceMetrics::collect(&allocator)], groups: vec![] };
//! assert!(render_metrics(&report).contains("memreuse_fragmentation_ratio"));
//! // Fragmentation per pool, in the stats: 3 MiB of a 20 MiB segment are in use.
//! assert_eq!(allocator.stats().fragmentation.large.total_free, 17 << 20);
//! // Growth early warning against the device's capacity.
//! let warning = EarlyWarning::for_allocator(&allocator, EarlyWarningConfig::default())?;
//! assert_eq!(warning.limit(), 1 << 30);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Opening a backend by name
//!
//! ```
//! use memreuse_core::{BackendOptions, OpenError, open_backend};
//!
//! // Only backends linked into the binary are registered (the `memreuse` facade links
//! // them by cargo feature and also names the feature a known backend needs).
//! match open_backend("no-such-device", &BackendOptions::default()) {
//!     Err(OpenError::Unknown { name, .. }) => assert_eq!(name, "no-such-device"),
//!     _ => unreachable!(),
//! }
//! ```

pub mod allocator;
mod backend;
pub mod comm;
mod dyn_backend;
mod error;
pub mod history;
mod ids;
pub mod observe;
pub mod output;
pub mod process_group;
pub mod race;
mod registry;
mod runtime_backend;
pub mod store;
mod sync;
pub mod testing;
pub mod virtual_memory;
mod world;

pub use allocator::{
    AllocError, AllocatorConfig, AllocatorStats, BlockRef, CachingAllocator, CallbackId,
    ConfigError, DEFAULT_TRACE_CAPACITY, EraseOutcome, OomInfo, OutOfMemory, Snapshot, Storage,
    WeakStorage,
};
pub use backend::{Backend, Capabilities};
pub use comm::{CommError, Communicator, DType, ReduceOp};
pub use dyn_backend::{AnyBackend, DynBackend, DynEvent, DynStream};
pub use error::BackendError;
pub use ids::{AllocationId, DevicePtr, MemoryInfo, StreamId, WorkId};
pub use process_group::{
    CommBuffer, P2pOp, ParseReuseModeError, PgError, PgStats, ProcessGroup, ProcessGroupBuilder,
    ReuseMode, ReuseModeError, SyncCollectives, Work,
};
pub use race::{AccessKind, RaceAccess, RaceKind, RaceReport};
pub use registry::{
    BackendOptions, BackendRegistration, OpenError, find_backend, open_backend, registered_backends,
};
pub use runtime_backend::{
    DeviceCountFn, MAX_RUNTIME_BACKENDS, OpenFn, OpenWorldFn, RegisterError, RuntimeBackend,
    register_backend,
};
pub use virtual_memory::PhysicalHandle;

pub use world::{RankEndpoint, WorldOptions, WorldRegistration, find_world};

/// Re-exported so backend crates can `memreuse_core::inventory::submit!` without their own
/// dependency on the exact version.
pub use inventory;
