//! How a mock device (or a cluster of them) behaves: capacity, backing memory, injected
//! delays and faults, deterministic execution.

use std::time::Duration;

/// Default device capacity: 1 GiB.
pub const DEFAULT_CAPACITY: u64 = 1 << 30;

/// Configuration shared by every device of a [`crate::MockCluster`] (or one
/// [`crate::MockDevice`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MockConfig {
    /// Bytes each device can hand out through `malloc`.
    pub capacity: u64,
    /// `true`: raw allocations are real host memory and data ops move bytes. `false`:
    /// addresses are handed out without host memory (allocator benchmarks); data ops then
    /// only validate their ranges and joint/custom bodies do not run.
    pub backing: bool,
    /// Injected per-kind delays (real busy periods on the stream).
    pub delays: OpDelays,
    /// `Some(seed)`: deterministic mode. Ops run one at a time on the host thread that
    /// waits for them, in an order drawn from `seed` among the streams whose next op is
    /// ready, so the same seed and the same host program give the same execution order.
    /// Several host threads (one per rank) still interleave their calls as the OS
    /// schedules them, so only single-threaded host programs replay exactly.
    /// `None`: every stream runs on its own worker thread, concurrently.
    pub deterministic_seed: Option<u64>,
    /// Fail one raw `malloc` on purpose.
    pub malloc_fault: Option<MallocFault>,
    /// How long a host wait (synchronize, blocking copy) may take before it returns
    /// [`memreuse_core::BackendError::Timeout`] instead of hanging.
    pub sync_timeout: Duration,
    /// Timeout of joint ops submitted without an explicit one.
    pub joint_timeout: Duration,
    /// At most this many race reports are kept per device (later ones are counted only).
    pub max_race_reports: usize,
    /// `true` (the default): the happens-before race detector records every op's accesses
    /// and `annotate_allocation` tags byte ranges with their allocator hand-out, so races
    /// and reuse races are reported. `false` is **for benchmarks only**: no access history,
    /// no annotations (`annotate_allocation` returns without taking the device lock), so a
    /// benchmark of an allocator over the mock measures the allocator's bookkeeping, not
    /// the detector's. Races then go unreported; never turn it off in a test of
    /// race-freedom.
    pub race_detection: bool,
    /// Keep a log of executed ops ([`crate::MockDevice::execution_trace`]), capped at this
    /// many entries per cluster; 0 disables it.
    pub trace_capacity: usize,
    /// `device_index()` of the first device; later devices of a cluster count up from it.
    pub first_device_index: usize,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            capacity: DEFAULT_CAPACITY,
            backing: true,
            delays: OpDelays::default(),
            deterministic_seed: None,
            malloc_fault: None,
            sync_timeout: Duration::from_secs(120),
            joint_timeout: Duration::from_secs(60),
            max_race_reports: 1000,
            race_detection: true,
            trace_capacity: 0,
            first_device_index: 0,
        }
    }
}

impl MockConfig {
    /// The default configuration with `capacity` bytes per device.
    pub fn with_capacity(capacity: u64) -> MockConfig {
        MockConfig {
            capacity,
            ..MockConfig::default()
        }
    }

    /// This configuration in deterministic mode with `seed`.
    #[must_use]
    pub fn deterministic(mut self, seed: u64) -> MockConfig {
        self.deterministic_seed = Some(seed);
        self
    }
}

/// Extra time each kind of op keeps its stream busy before doing its work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpDelays {
    /// Every `memset_zero`.
    pub memset: Duration,
    /// Every host-to-device copy.
    pub h2d: Duration,
    /// Every device-to-host copy.
    pub d2h: Duration,
    /// Every device-to-device copy.
    pub d2d: Duration,
    /// Every custom op ([`crate::MockDevice::enqueue_custom`]).
    pub custom: Duration,
    /// Every joint op (slow collectives widen reuse-race windows).
    pub joint: Duration,
}

/// Which raw allocation fails, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MallocFault {
    /// 1-based: the `nth` raw `malloc` of the device fails (counting every call, failed
    /// ones included; `vm_create_physical` counts as a `malloc`).
    pub nth: u64,
    /// The error it fails with.
    pub kind: FaultKind,
}

/// The error an injected fault produces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FaultKind {
    /// [`memreuse_core::BackendError::OutOfMemory`] (detail says "injected"): drives the
    /// allocator's out-of-memory retry chain, like a real device running out.
    #[default]
    OutOfMemory,
    /// [`memreuse_core::BackendError::Injected`]: an unexpected device failure the
    /// allocator must pass through, not retry.
    Injected,
}
