//! The allocator's trace: a bounded ring buffer of what happened, in PyTorch's
//! `device_traces` vocabulary.

use std::collections::VecDeque;
use std::sync::OnceLock;
use std::time::Instant;

use crate::ids::StreamId;

/// What a trace entry records (PyTorch's `TraceEntry::Action`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum TraceAction {
    /// A block was handed out.
    Alloc,
    /// The user freed a block (it may still wait on events).
    FreeRequested,
    /// A block went back to its pool.
    FreeCompleted,
    /// A segment was obtained from the device.
    SegmentAlloc,
    /// A segment was returned to the device.
    SegmentFree,
    /// A snapshot was taken.
    Snapshot,
    /// An allocation failed with out-of-memory.
    Oom,
}

impl TraceAction {
    /// PyTorch's name (`alloc`, `free_requested`, ...), as the memory visualizer reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::Snapshot => "snapshot",
            TraceAction::Oom => "oom",
        }
    }
}

/// One trace entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TraceEntry {
    /// What happened.
    pub action: TraceAction,
    /// Block or segment address (0 for `snapshot` and `oom`).
    pub addr: u64,
    /// Requested bytes (alloc, frees, oom), segment bytes (segment actions), active bytes
    /// (snapshot).
    pub size: u64,
    /// The stream involved.
    pub stream: StreamId,
    /// Microseconds since the process-wide trace clock started (one monotonic clock shared
    /// by every allocator, so traces of several devices line up).
    pub time_us: u64,
    /// Free device memory, on `oom` entries.
    pub device_free: Option<u64>,
}

/// Microseconds on the process-wide monotonic trace clock.
pub fn trace_clock_us() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// Ring buffer of the last `capacity` entries. Once full, pushing allocates nothing.
pub(crate) struct TraceBuffer {
    entries: VecDeque<TraceEntry>,
    capacity: usize,
}

impl TraceBuffer {
    pub fn new(capacity: usize) -> Self {
        TraceBuffer {
            entries: VecDeque::new(),
            capacity,
        }
    }

    pub fn push(
        &mut self,
        action: TraceAction,
        addr: u64,
        size: u64,
        stream: StreamId,
        device_free: Option<u64>,
    ) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back(TraceEntry {
            action,
            addr,
            size,
            stream,
            time_us: trace_clock_us(),
            device_free,
        });
    }

    pub fn to_vec(&self) -> Vec<TraceEntry> {
        self.entries.iter().copied().collect()
    }
}
