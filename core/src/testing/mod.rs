//! A backend for tests and benchmarks of code generic over [`crate::Backend`], in the manner
//! of wgpu-hal's `noop` backend: it really works, but only as far as the allocator and the
//! process group need.
//!
//! [`ManualBackend`] hands out device addresses without host memory (so benchmarks can
//! allocate terabytes of "device" memory for free), and its streams never make progress on
//! their own: work enqueued on a stream, event recordings included, completes only when the
//! test calls [`ManualBackend::advance`] / [`ManualBackend::advance_all`] or something
//! synchronizes on the host. Tests therefore decide exactly when "the collective finished".
//!
//! Not for production: it checks handles and addresses, but copies move no data
//! (`copy_device_to_host` writes zeros).
//!
//! [`contract`] holds the device-level checks every backend (and every port to a new
//! accelerator) must pass; [`comm_contract`] the communicator-level ones, run on N ranks.

pub mod comm_contract;
mod comm_contract_ranks;
mod comm_contract_types;
pub mod contract;
mod contract_vm;
mod manual;
mod require_device;
mod rng;
mod stale_page;

pub use manual::{MANUAL_VM_GRANULARITY, ManualBackend, ManualCounters, ManualEvent, ManualStream};
pub use require_device::{REQUIRE_DEVICE_VAR, device_required, skip_without_device};
pub use rng::SplitMix64;
pub use stale_page::check_stale_page_unmap;
