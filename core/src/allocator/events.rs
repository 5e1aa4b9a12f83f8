//! Pooled device events for pending frees.
//!
//! An event is taken from the pool (or created when the pool is empty) each time a block with
//! stream uses is freed, and returned when it completed or its use was erased. Re-recording
//! replaces an event's earlier recording, so returning one that has not completed is safe.

use crate::backend::Backend;
use crate::error::BackendError;

/// Idle events ready to be recorded again.
pub(crate) struct EventPool<B: Backend> {
    idle: Vec<B::Event>,
}

impl<B: Backend> EventPool<B> {
    pub fn new() -> Self {
        EventPool { idle: Vec::new() }
    }

    /// An event recorded at the current end of `stream`, reused from the pool when possible.
    pub fn record(&mut self, backend: &B, stream: &B::Stream) -> Result<B::Event, BackendError> {
        let event = match self.idle.pop() {
            Some(e) => e,
            None => backend.create_event()?,
        };
        match backend.record_event(&event, stream) {
            Ok(()) => Ok(event),
            Err(e) => {
                self.idle.push(event);
                Err(e)
            }
        }
    }

    /// Returns an event to the pool.
    pub fn put(&mut self, event: B::Event) {
        self.idle.push(event);
    }
}
