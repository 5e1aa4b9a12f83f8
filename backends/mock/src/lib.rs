//! memreuse-mock: a strict simulated device for memreuse.
//!
//! What CI runs, so it is strict rather than permissive (`docs/design.md` §5):
//! - **Memory**: real host memory with a capacity ([`MockConfig::capacity`]); raw
//!   allocations beyond it fail with `OutOfMemory`; every op checks that its ranges lie in
//!   one live raw allocation (`InvalidArgument` otherwise). Addresses come from a fake
//!   per-device address space and are never reused. An injected fault fails the n-th
//!   `malloc` ([`MallocFault`]).
//! - **Streams**: each stream runs its ops asynchronously and in order on its own worker
//!   thread; events complete when the stream passes them; injected per-kind delays
//!   ([`OpDelays`]) make timing bugs real. Host waits time out instead of hanging.
//! - **Deterministic mode** ([`MockConfig::deterministic_seed`]): no worker threads; ops
//!   run one at a time on the host thread that waits for them, picked by a seeded
//!   generator among the streams whose head op is ready, so a single-threaded host
//!   program replays the same execution order from the same seed.
//! - **Race detector**: vector clocks per stream and per device host, checked at enqueue
//!   time for every declared access (core's `memreuse_core::race::HappensBefore`, the
//!   layer the `RaceChecker` adaptor drives too, kept in `cluster_state.rs`); reports are
//!   classified [`memreuse_core::RaceKind::Schedule`] or `Reuse` by the allocator's
//!   `annotate_allocation` ids.
//! - **Clusters and joint ops** ([`MockCluster`], [`JointGroup`], [`JointOp`]): ops
//!   spanning one stream on each of several devices, matched in issue order, NCCL-style,
//!   the base of the mock communicator: a missing rank times out into an error, batches
//!   ([`JointGroup::submit_batch`]) give `ncclGroupStart/End` semantics, groups can be
//!   aborted or made to fail. [`MockDevice::enqueue_custom`] is the one-device variant.
//! - **Communicator pieces** ([`collective`], [`PairGroups`]): the collectives' data
//!   movement and the point-to-point pair groups, public so that other communicators built
//!   on joint ops (the Ascend stand-in's HCCL) reuse them and stay bit-identical to
//!   [`MockCommunicator`].
//!
//! ```
//! use memreuse_core::Backend;
//! use memreuse_mock::{MockConfig, MockDevice};
//!
//! let dev = MockDevice::new(MockConfig::with_capacity(1 << 20)).unwrap();
//! let s = dev.default_stream();
//! let p = dev.malloc(4).unwrap();
//! dev.copy_host_to_device(p, &[1, 2, 3, 4], &s).unwrap();
//! let mut out = [0u8; 4];
//! dev.copy_device_to_host(&mut out, p, &s).unwrap();
//! assert_eq!(out, [1, 2, 3, 4]);
//! assert!(dev.race_reports().unwrap().is_empty());
//! ```

#![forbid(unsafe_code)]

// Layers, each importing only from those before it: `config`, `error`, `memory`, `region` ->
// `cluster_state`, `handles` -> `executor` -> `owner` -> `device_vm` -> `device` (+ `custom`,
// `diagnostics`) -> `joint` -> `cluster` -> `comm`, `registry`.
mod cluster;
mod cluster_state;
mod comm;
mod config;
mod custom;
mod device;
mod device_vm;
mod diagnostics;
mod error;
mod executor;
mod handles;
mod joint;
mod memory;
mod owner;
mod region;
mod registry;

pub use cluster::MockCluster;
pub use cluster_state::ExecutedOp;
pub use comm::{MockCommunicator, PairGroups, collective, open_mock_world};
pub use config::{DEFAULT_CAPACITY, FaultKind, MallocFault, MockConfig, OpDelays};
pub use device::MockDevice;
pub use error::BACKEND_NAME;
pub use handles::{MockEvent, MockStream};
pub use joint::{JointGroup, JointOp};
pub use memory::ALLOCATION_ALIGNMENT;
/// The stream id race reports use for the host (a raw `free` racing with device work).
pub use memreuse_core::race::HOST_STREAM;
pub use region::{JointBody, JointMemory, MemAccess};
