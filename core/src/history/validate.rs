//! The rules every history keeps, checked one event at a time (by the reader as it reads,
//! and by [`super::AllocationHistory::new`]).

use std::collections::HashMap;

use crate::ids::StreamId;

use super::error::HistoryError;
use super::event::{EventKind, HistoryEvent};

/// What an `alloc` left for its `free` to match.
struct Live {
    size: u64,
    stream: StreamId,
    entry: u64,
}

/// Live allocations by id.
pub(super) struct Validator {
    live: HashMap<u64, Live>,
    /// How errors name an entry: `line` or `event`.
    unit: &'static str,
}

impl Validator {
    /// A validator whose errors name entries as `unit` (`line` or `event`).
    pub fn new(unit: &'static str) -> Self {
        Validator {
            live: HashMap::new(),
            unit,
        }
    }

    /// Checks one event; `entry` is its line (reader) or 1-based position (in memory).
    pub fn check(&mut self, event: &HistoryEvent, entry: u64) -> Result<(), HistoryError> {
        match event.kind {
            EventKind::Alloc => {
                let live = Live {
                    size: event.size,
                    stream: event.stream,
                    entry,
                };
                if let Some(first) = self.live.insert(event.id, live) {
                    return Err(HistoryError::DuplicateId {
                        unit: self.unit,
                        entry,
                        id: event.id,
                        alloc_entry: first.entry,
                    });
                }
            }
            EventKind::Free => {
                let Some(live) = self.live.remove(&event.id) else {
                    return Err(HistoryError::UnknownId {
                        unit: self.unit,
                        entry,
                        id: event.id,
                    });
                };
                let mismatch = if live.size != event.size {
                    Some(("size", live.size, event.size))
                } else if live.stream != event.stream {
                    Some(("stream", live.stream.0, event.stream.0))
                } else {
                    None
                };
                if let Some((field, at_alloc, at_free)) = mismatch {
                    return Err(HistoryError::FreeMismatch {
                        unit: self.unit,
                        entry,
                        id: event.id,
                        field,
                        at_alloc,
                        at_free,
                        alloc_entry: live.entry,
                    });
                }
            }
        }
        Ok(())
    }
}
