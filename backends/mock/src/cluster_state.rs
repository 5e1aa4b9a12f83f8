//! [`ClusterState`]: the state of one mock cluster, guarded by one mutex: devices (memory,
//! last errors), streams (queues, progress), joint-op groups, and the happens-before layer
//! (`memreuse_core::race::HappensBefore`: every stream's and host's clock, each device's
//! race detector).
//!
//! One lock for everything keeps the invariants simple: an op's clock, its place in the
//! stream queue and its entries in the access history are decided atomically, so the
//! detector's view of the order always matches the executor's. Data movement happens
//! outside the lock (see `executor.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memreuse_core::race::{HappensBefore, OpInfo, VClock};
use memreuse_core::{AccessKind, BackendError, StreamId};
use parking_lot::{Condvar, Mutex};

use crate::config::MockConfig;
use crate::memory::{Memory, Span};
use crate::region::JointBody;
use memreuse_core::testing::SplitMix64;

/// Shared by every handle of a cluster and by its worker threads.
pub(crate) struct Core {
    /// All mutable state.
    pub state: Mutex<ClusterState>,
    /// Signalled whenever an op is enqueued or finishes, or the cluster shuts down.
    pub cv: Condvar,
    /// The configuration the cluster was created with.
    pub config: MockConfig,
    /// Process-wide identity of the cluster (checks that handles belong to it).
    pub uid: u64,
}

/// One executed op, as logged for [`crate::MockDevice::execution_trace`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutedOp {
    /// Cluster-wide enqueue number of the op.
    pub seq: u64,
    /// The stream it ran on (a joint op is logged once per participant).
    pub stream: StreamId,
    /// Op kind and label.
    pub op: String,
}

/// Mutable state of the cluster.
pub(crate) struct ClusterState {
    pub devices: Vec<DeviceSlot>,
    pub streams: Vec<StreamState>,
    pub groups: Vec<GroupState>,
    /// Clocks and race detectors. A stream's component is its global index (both are
    /// assigned by `Owner::add_stream`, the one place streams are created), a device's
    /// index its slot. With [`MockConfig::race_detection`] off it keeps clocks only.
    pub hb: HappensBefore,
    /// Deterministic mode's generator; `None` in threaded mode.
    pub rng: Option<SplitMix64>,
    /// Deterministic mode: a host thread is running an op (only one may).
    pub driving: bool,
    pub shutdown: bool,
    pub trace: Vec<ExecutedOp>,
}

/// What the cluster keeps for one device slot besides its clocks (those are in
/// [`ClusterState::hb`]): its memory and its last op failure.
pub(crate) struct DeviceSlot {
    pub memory: Memory,
    /// Most recent op failure on this device, until taken.
    pub last_error: Option<BackendError>,
}

/// Per-stream state (its clock is in [`ClusterState::hb`]).
pub(crate) struct StreamState {
    pub device: usize,
    pub queue: VecDeque<Op>,
    /// Entries ever pushed onto / finished from `queue`: positions for events and syncs.
    pub enqueued: u64,
    pub completed: u64,
    /// The head entry was taken and is executing.
    pub running: bool,
    /// First failure not yet taken: its position and error.
    pub error: Option<(u64, BackendError)>,
    /// Where this stream's worker sleeps while its queue is empty: only a push onto this
    /// stream (or shutdown) can change that, so ops on the cluster's other streams need not
    /// wake it. With one condvar for all, every op woke every worker: thousands of
    /// streams (ranks x groups) made each op cost thousands of wakeups.
    pub wake: Arc<Condvar>,
}

impl StreamState {
    /// The error a wait for position `target` must report, if any.
    pub(crate) fn error_upto(&self, target: u64) -> Option<BackendError> {
        self.error
            .as_ref()
            .filter(|(pos, _)| *pos <= target)
            .map(|(_, e)| e.clone())
    }
}

/// One queue entry.
pub(crate) struct Op {
    pub info: Arc<OpInfo>,
    /// Injected busy period before the work.
    pub delay: Duration,
    pub work: Work,
}

/// A custom op's body (see [`crate::MockDevice::enqueue_custom`]).
pub(crate) type CustomBody = JointBody;

/// What an op does.
pub(crate) enum Work {
    Memset(Span),
    HostToDevice(Span, Vec<u8>),
    DeviceToHost(Span, Arc<Mutex<Option<Vec<u8>>>>),
    DeviceToDevice {
        src: Span,
        dst: Span,
    },
    Delay(Duration),
    /// Device-side wait: ready once `stream` finished `target` entries.
    Wait {
        stream: usize,
        target: u64,
    },
    Custom {
        regions: Vec<Span>,
        body: Option<CustomBody>,
    },
    /// This stream's share of one or more joint ops (several for a batch of
    /// point-to-point ops issued together).
    Joint(JointEntry),
}

/// A queue entry taking part in joint ops. It stays at the head of its queue until every
/// item ran (or failed); items run one at a time, each once all of its participants have
/// it at their heads, so a batch never waits for its own members (no send/recv deadlock).
pub(crate) struct JointEntry {
    pub items: Vec<JointItem>,
    /// First failure among the items, reported when the entry completes.
    pub error: Option<BackendError>,
}

/// One joint op an entry takes part in.
pub(crate) struct JointItem {
    pub group: usize,
    pub k: u64,
    pub done: bool,
}

impl JointEntry {
    /// The not-yet-finished item `(group, k)`, if this entry has it.
    pub(crate) fn pending(&self, group: usize, k: u64) -> Option<usize> {
        self.items
            .iter()
            .position(|i| !i.done && i.group == group && i.k == k)
    }
}

/// A joint-op group: one participant device per rank.
pub(crate) struct GroupState {
    /// Device slot of each rank.
    pub devices: Vec<usize>,
    /// Next op number per rank (ops are matched by number, NCCL-style).
    pub submitted: Vec<u64>,
    /// Op numbers to fail on purpose once submitted ([`crate::JointGroup::inject_failure`]).
    pub injected: Vec<u64>,
    /// Set by [`crate::JointGroup::abort`]: every op not yet run fails with it.
    pub aborted: Option<BackendError>,
    pub slots: HashMap<u64, Slot>,
}

/// The `k`-th joint op of a group, while any rank still has it queued.
pub(crate) struct Slot {
    pub parts: Vec<Option<Part>>,
    /// Stream of each rank that submitted.
    pub streams: Vec<Option<usize>>,
    pub arrived: usize,
    /// When the first participant stream reached the op (starts the timeout).
    pub first_reached: Option<Instant>,
    pub timeout: Duration,
    pub failed: Option<BackendError>,
    /// Ranks whose queue entry finished.
    pub done: usize,
}

/// One rank's submission to a joint op.
pub(crate) struct Part {
    pub name: String,
    pub device: usize,
    pub regions: Vec<Span>,
    pub body: Option<JointBody>,
    pub clock: VClock,
}

impl ClusterState {
    /// Starts an op on stream `s` ([`HappensBefore::begin_op`]: orders it and checks and
    /// records `accesses`) and returns the op's identity.
    pub(crate) fn begin_op(
        &mut self,
        s: usize,
        kind: &str,
        accesses: &[(Span, AccessKind)],
    ) -> Arc<OpInfo> {
        // Byte ranges only serve the detector: with it off, none are built.
        let ranges: Vec<_> = if self.hb.detects() {
            accesses
                .iter()
                .map(|(span, kind)| {
                    let (start, end) = span.range();
                    (start..end, *kind)
                })
                .collect()
        } else {
            Vec::new()
        };
        self.hb.begin_op(s, kind, &ranges)
    }

    /// Appends `op` to stream `s`; returns its position (what a sync waits for).
    pub(crate) fn push(&mut self, s: usize, op: Op) -> u64 {
        let st = &mut self.streams[s];
        st.queue.push_back(op);
        st.enqueued += 1;
        st.wake.notify_one();
        st.enqueued
    }

    /// Records `err` as the failure of the entry at `pos` on stream `s`.
    pub(crate) fn fail_stream(&mut self, s: usize, pos: u64, err: BackendError) {
        let st = &mut self.streams[s];
        if st.error.is_none() {
            st.error = Some((pos, err.clone()));
        }
        tracing::warn!(target: "memreuse_mock", "stream {s}: {err}");
        self.devices[st.device].last_error = Some(err);
    }
}
