//! The backend abstraction: one device of one accelerator kind.
//!
//! A backend is a type family in the manner of wgpu-hal's `Api`: the stream and event
//! handle types are associated types, so the allocator and the process group dispatch
//! statically on the hot path. [`crate::AnyBackend`] erases them for run-time selection by
//! name.
//!
//! # Contract
//! - Every device operation is *stream-ordered*: it runs after everything enqueued earlier
//!   on the same stream and before everything enqueued later. Operations on different
//!   streams are unordered unless an event orders them.
//! - Operations take raw device addresses. Backends check what they can (the mock checks
//!   every range against its live allocations) and report a refused argument as
//!   [`BackendError::InvalidArgument`]; no backend may cause host-side undefined behaviour
//!   for any address value.
//! - Handles (streams, events) must come from the same backend instance they are passed to.
//! - Every method may be called from any thread.
//! - `malloc` returns addresses aligned to at least
//!   [`Capabilities::allocation_alignment`] bytes (256 unless the backend declares more,
//!   CUDA's guarantee). `malloc(0)` must not misbehave: it either fails with an error
//!   other than [`BackendError::OutOfMemory`] ([`BackendError::InvalidArgument`] on the
//!   mock, the vendor's invalid-parameter status on Ascend) or returns a pointer that
//!   `free` accepts; the caching allocator never asks for zero bytes. The contract kit
//!   ([`crate::testing::contract`]) checks both.

use std::fmt::Debug;
use std::hash::Hash;

use crate::error::BackendError;
use crate::ids::{AllocationId, DevicePtr, MemoryInfo, StreamId};
use crate::race::RaceReport;
use crate::virtual_memory::{PhysicalHandle, unsupported};

/// What a backend can honour. Declared by [`Backend::capabilities`], read and reported by
/// the conformance runner: an option a backend cannot honour (`--deterministic`,
/// `--device-memory`) is recorded as ignored instead of silently dropped, and a schedule
/// whose point depends on one (the capacity of `oom-pressure`) is skipped with the reason.
///
/// `non_exhaustive`: later capabilities are added here. Outside this crate, start from [`Capabilities::default`] and set fields.
// Independent yes/no facts, not a state machine: bools read best.
#[allow(clippy::struct_excessive_bools)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Runs reproducibly from a seed (`BackendOptions::deterministic_seed`).
    pub deterministic_scheduling: bool,
    /// Has its own race detector: [`Backend::race_reports`] returns `Some`.
    pub native_race_detection: bool,
    /// Honours `BackendOptions::memory_capacity` (real devices have the memory they have).
    pub memory_capacity: bool,
    /// [`Backend::delay`] keeps the stream busy for exactly the time asked.
    pub exact_delays: bool,
    /// Every address `malloc` returns is a multiple of this (a power of two).
    pub allocation_alignment: u64,
    /// Implements the `vm_*` methods (reserve, map, unmap: see
    /// [`crate::virtual_memory`]), which `expandable_segments:True` needs.
    pub virtual_memory: bool,
}

impl Default for Capabilities {
    /// A real device: nothing simulated, 256-byte alignment.
    fn default() -> Self {
        Capabilities {
            deterministic_scheduling: false,
            native_race_detection: false,
            memory_capacity: false,
            exact_delays: false,
            allocation_alignment: 256,
            virtual_memory: false,
        }
    }
}

/// One device of one accelerator kind: raw memory, streams, events, and the stream-ordered
/// device operations the allocator and the conformance suite need.
pub trait Backend: Send + Sync + Sized + 'static {
    /// An ordered queue of device work. Cloning gives another handle to the same stream.
    type Stream: Clone + Eq + Hash + Debug + Send + Sync + 'static;
    /// A point on a stream: recorded, queried, waited on.
    type Event: Debug + Send + Sync + 'static;

    /// Short backend name (`mock`, `cuda`, `ascend`).
    fn name(&self) -> &str;

    /// Index of this device among the backend's devices.
    fn device_index(&self) -> usize;

    /// Free and total device memory.
    fn memory_info(&self) -> Result<MemoryInfo, BackendError>;

    /// What this backend can honour (see [`Capabilities`]). The default describes a real
    /// device with 256-byte alignment and no race detector.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// An error that happened asynchronously on the device, outside any call (a fault in
    /// device work, [`BackendError::DeviceLost`]), if the backend can tell. Non-blocking;
    /// `None` while healthy or when the backend cannot tell. Optional.
    fn async_error(&self) -> Option<BackendError> {
        None
    }

    /// Allocates `bytes` of raw device memory (synchronous; contents undefined), aligned to
    /// [`Capabilities::allocation_alignment`].
    ///
    /// Fails with [`BackendError::OutOfMemory`] when the device cannot provide them.
    /// `bytes == 0` either fails with an error other than `OutOfMemory` (preferably
    /// [`BackendError::InvalidArgument`]) or returns a pointer that [`Backend::free`]
    /// accepts.
    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError>;

    /// Returns memory obtained from [`Backend::malloc`] to the device (synchronous).
    ///
    /// The caller guarantees no enqueued work still uses it (the allocator synchronizes
    /// the segment's streams first).
    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError>;

    /// The stream work runs on when nothing else is said (`compute` in schedules).
    fn default_stream(&self) -> Self::Stream;

    /// Creates a new stream that does not synchronize implicitly with any other.
    fn create_stream(&self) -> Result<Self::Stream, BackendError>;

    /// The identity of a stream: equal for handles to the same stream.
    fn stream_id(&self, stream: &Self::Stream) -> StreamId;

    /// True when `stream` belongs to this device of this backend instance. The allocator
    /// refuses other streams (their ids could collide with this device's). Optional: the
    /// default accepts every stream, for backends whose handles cannot belong elsewhere.
    #[inline]
    fn owns_stream(&self, stream: &Self::Stream) -> bool {
        let _ = stream;
        true
    }

    /// Creates an event (unrecorded: querying it reports complete).
    fn create_event(&self) -> Result<Self::Event, BackendError>;

    /// Records `event` at the current end of `stream`, replacing any earlier recording.
    fn record_event(&self, event: &Self::Event, stream: &Self::Stream) -> Result<(), BackendError>;

    /// True once the work before the event's last recording has finished. Non-blocking.
    fn query_event(&self, event: &Self::Event) -> Result<bool, BackendError>;

    /// Blocks the host until the event completed.
    fn synchronize_event(&self, event: &Self::Event) -> Result<(), BackendError>;

    /// Makes all later work on `stream` wait for `event` (device-side; the host does not
    /// block).
    fn stream_wait_event(
        &self,
        stream: &Self::Stream,
        event: &Self::Event,
    ) -> Result<(), BackendError>;

    /// Blocks the host until all work enqueued on `stream` so far finished.
    fn synchronize_stream(&self, stream: &Self::Stream) -> Result<(), BackendError>;

    /// Blocks the host until all work on every stream of this device finished.
    fn synchronize_device(&self) -> Result<(), BackendError>;

    /// Enqueues: set `bytes` bytes at `ptr` to zero.
    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &Self::Stream,
    ) -> Result<(), BackendError>;

    /// Enqueues: copy `src` from the host to `dst`. `src` is staged before the call returns,
    /// so the caller may reuse its buffer at once.
    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &Self::Stream,
    ) -> Result<(), BackendError>;

    /// Enqueues a copy of `dst.len()` bytes at `src` to the host and blocks until it
    /// finished (the host has observed the read: later host-side decisions are ordered
    /// after it).
    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &Self::Stream,
    ) -> Result<(), BackendError>;

    /// Enqueues: copy `bytes` bytes from `src` to `dst` (ranges must not overlap).
    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &Self::Stream,
    ) -> Result<(), BackendError>;

    /// Enqueues a device-side busy period of `micros` microseconds (best effort on real
    /// devices; exact on the mock). Used by schedules to widen race windows.
    fn delay(&self, micros: u64, stream: &Self::Stream) -> Result<(), BackendError>;

    /// Tells the backend that `[ptr, ptr + bytes)` now belongs to allocation `id`.
    ///
    /// The caching allocator calls this each time it hands memory out. Optional: backends
    /// that do not check accesses ignore it.
    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        let _ = (ptr, bytes, id);
    }

    /// Gives the next enqueued operations a label for diagnostics (e.g. the schedule op
    /// being replayed). Optional.
    fn set_op_label(&self, label: &str) {
        let _ = label;
    }

    /// Races found so far, for backends with a race detector; `None` for backends without.
    fn race_reports(&self) -> Option<Vec<RaceReport>> {
        None
    }

    /// The size every `vm_*` size and address is a multiple of (a power of two). Optional,
    /// with the rest of [`crate::virtual_memory`]: the default is
    /// [`BackendError::Unsupported`].
    fn vm_granularity(&self) -> Result<u64, BackendError> {
        Err(unsupported(self.name(), "vm_granularity"))
    }

    /// Reserves `bytes` of device addresses (no memory behind them). Optional.
    fn vm_reserve(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        let _ = bytes;
        Err(unsupported(self.name(), "vm_reserve"))
    }

    /// Releases a range from [`Backend::vm_reserve`]; none of its pages may be mapped.
    /// Optional.
    fn vm_release(&self, base: DevicePtr) -> Result<(), BackendError> {
        let _ = base;
        Err(unsupported(self.name(), "vm_release"))
    }

    /// Creates `bytes` of physical memory (counted against the device's capacity: fails
    /// with [`BackendError::OutOfMemory`] when it cannot). Optional.
    fn vm_create_physical(&self, bytes: u64) -> Result<PhysicalHandle, BackendError> {
        let _ = bytes;
        Err(unsupported(self.name(), "vm_create_physical"))
    }

    /// Returns an unmapped physical handle's memory to the device. Optional.
    fn vm_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError> {
        let _ = handle;
        Err(unsupported(self.name(), "vm_release_physical"))
    }

    /// Maps the whole of `handle` at `at` (inside a reserved range, over unmapped pages)
    /// with read/write access for this device. Optional.
    fn vm_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<(), BackendError> {
        let _ = (at, handle);
        Err(unsupported(self.name(), "vm_map"))
    }

    /// Unmaps the `bytes` mapped at `at` by one earlier [`Backend::vm_map`]. The caller
    /// guarantees no enqueued work still uses them. Optional.
    fn vm_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        let _ = (at, bytes);
        Err(unsupported(self.name(), "vm_unmap"))
    }
}
