//! The allocator's trace: a bounded ring buffer of what happened, in PyTorch's
//! `device_traces` vocabulary.

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
    /// Pages were mapped at the end of an expandable segment's mapped part (PyTorch's
    /// `segment_map`: address and bytes of the mapped range).
    SegmentMap,
    /// Free pages of an expandable segment were unmapped (PyTorch's `segment_unmap`).
    SegmentUnmap,
    /// An expandable segment's address range was reserved (address and bytes of the range;
    /// nothing mapped yet). memreuse's, not PyTorch's: the viewer export leaves it out.
    SegmentReserve,
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
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::SegmentReserve => "segment_reserve",
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

/// Ring buffer of the last `capacity` entries; capacity 0 (the default) records nothing.
/// Once full, pushing allocates nothing: the oldest entry is overwritten in place.
pub(crate) struct TraceBuffer {
    /// Entries in insertion order up to `capacity`; once full, `entries[head]` is the oldest.
    entries: Vec<TraceEntry>,
    head: usize,
    capacity: usize,
}

impl TraceBuffer {
    pub fn new(capacity: usize) -> Self {
        TraceBuffer {
            entries: Vec::new(),
            head: 0,
            capacity,
        }
    }

    /// Inlined so that, with tracing off, the hot path pays one predictable branch and no
    /// call; the clock read and the store stay out of line.
    #[inline]
    pub fn push(
        &mut self,
        action: TraceAction,
        addr: u64,
        size: u64,
        stream: StreamId,
        device_free: Option<u64>,
    ) {
        if self.capacity != 0 {
            self.record(TraceEntry {
                action,
                addr,
                size,
                stream,
                time_us: 0,
                device_free,
            });
        }
    }

    #[inline(never)]
    fn record(&mut self, mut entry: TraceEntry) {
        entry.time_us = trace_clock_us();
        if self.entries.len() < self.capacity {
            self.entries.push(entry);
        } else {
            self.entries[self.head] = entry;
            self.head = (self.head + 1) % self.capacity;
        }
    }

    /// Entries, oldest first.
    pub fn to_vec(&self) -> Vec<TraceEntry> {
        let (newer, older) = self.entries.split_at(self.head);
        older.iter().chain(newer).copied().collect()
    }
}
