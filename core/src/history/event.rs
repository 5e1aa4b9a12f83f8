//! One request of an allocation history, and a whole validated history.

use crate::ids::StreamId;

use super::error::HistoryError;
use super::validate::Validator;

/// Whether an event hands memory out or gives it back.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum EventKind {
    /// The program asked for `size` bytes on `stream` (`alloc` in the text format).
    Alloc,
    /// The program freed the allocation `id` (`free` in the text format).
    Free,
}

impl EventKind {
    /// The word the text format uses: `alloc` or `free`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Alloc => "alloc",
            EventKind::Free => "free",
        }
    }
}

/// One request, as a line of `memreuse.trace/1` holds it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct HistoryEvent {
    /// Allocate or free.
    pub kind: EventKind,
    /// Names the allocation; unique among the allocations live at this point (an id may be
    /// used again after its free).
    pub id: u64,
    /// Bytes requested (on a free: the same as at its allocation).
    pub size: u64,
    /// The allocation stream (on a free: the same as at its allocation).
    pub stream: StreamId,
    /// Microseconds on the recording's clock, when it recorded one.
    pub time_us: Option<u64>,
}

/// A validated history: every free names a live allocation with the same size and stream,
/// no id is allocated twice while live. Allocations still live at the end are allowed (the
/// recording stopped while they were in use).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct AllocationHistory {
    comments: Vec<String>,
    events: Vec<HistoryEvent>,
    complete: bool,
}

impl AllocationHistory {
    /// Validates `events` (errors name them as `event N`, from 1) and keeps
    /// `comments` (free text, one string per comment line, without the `# `).
    pub fn new(comments: Vec<String>, events: Vec<HistoryEvent>) -> Result<Self, HistoryError> {
        let mut validator = Validator::new("event");
        for (index, event) in events.iter().enumerate() {
            validator.check(event, index as u64 + 1)?;
        }
        Ok(AllocationHistory {
            comments,
            events,
            complete: true,
        })
    }

    /// Built by the reader, which validated every event as it read it.
    pub(super) fn from_validated(
        comments: Vec<String>,
        events: Vec<HistoryEvent>,
        complete: bool,
    ) -> Self {
        AllocationHistory {
            comments,
            events,
            complete,
        }
    }

    /// The events, in order.
    pub fn events(&self) -> &[HistoryEvent] {
        &self.events
    }

    /// The comment lines, in order, without their leading `#` and one space.
    pub fn comments(&self) -> &[String] {
        &self.comments
    }

    /// True when the history is known to be whole: built in memory, or read from a file that
    /// ends with its `end` line (whose count matched). A file without one may have been cut
    /// at a line boundary.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Number of `alloc` events.
    pub fn alloc_count(&self) -> usize {
        self.events
            .iter()
            .filter(|e| e.kind == EventKind::Alloc)
            .count()
    }

    /// Highest sum of requested bytes live at once: the lower bound on memory any allocator
    /// needs for this history.
    pub fn live_peak_bytes(&self) -> u64 {
        let mut live = 0u64;
        let mut peak = 0u64;
        for event in &self.events {
            match event.kind {
                EventKind::Alloc => {
                    live += event.size;
                    peak = peak.max(live);
                }
                EventKind::Free => live -= event.size,
            }
        }
        peak
    }

    /// Requested bytes still live after the last event.
    pub fn live_bytes_at_end(&self) -> u64 {
        self.events.iter().fold(0u64, |live, e| match e.kind {
            EventKind::Alloc => live + e.size,
            EventKind::Free => live - e.size,
        })
    }

    /// The distinct streams, in order of first use.
    pub fn streams(&self) -> Vec<StreamId> {
        let mut seen = Vec::new();
        for event in &self.events {
            if !seen.contains(&event.stream) {
                seen.push(event.stream);
            }
        }
        seen
    }

    /// Gives the events back.
    pub fn into_events(self) -> Vec<HistoryEvent> {
        self.events
    }
}
