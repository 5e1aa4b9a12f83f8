//! The state of one issued work: its end event, completion, error, and what its policy
//! holds. Below the shared state and the user's [`super::Work`] handle, which both hold it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::error::PgError;
use super::kind::CommKind;
use super::policy::Held;
use crate::backend::Backend;
use crate::ids::WorkId;

/// The state of one work, shared by the user's [`super::Work`] handle, the process group's
/// in-flight list and the watchdog.
pub(crate) struct WorkState<B: Backend> {
    pub(crate) id: WorkId,
    pub(crate) op: &'static str,
    pub(crate) kind: CommKind,
    pub(crate) end_event: B::Event,
    pub(crate) issued_at: Instant,
    /// `issued_at` on the allocator's trace clock ([`crate::allocator::trace_clock_us`]).
    pub(crate) issued_us: u64,
    /// What the policy holds for this work (shelf, tracked tensors).
    pub(crate) held: Held<B>,
    /// Set once the end event was observed complete (by anyone).
    pub(crate) completed: AtomicBool,
    pub(crate) error: Mutex<Option<PgError>>,
    /// When a host thread first saw it complete.
    pub(crate) seen_done_at: OnceLock<Instant>,
    /// Set once the never-waited warning was given.
    pub(crate) warned_unwaited: AtomicBool,
}

impl<B: Backend> WorkState<B> {
    /// Work `id`, issued now, holding nothing yet.
    pub(crate) fn new(id: WorkId, op: &'static str, kind: CommKind, end_event: B::Event) -> Self {
        WorkState {
            id,
            op,
            kind,
            end_event,
            issued_at: Instant::now(),
            issued_us: crate::allocator::trace_clock_us(),
            held: Held::default(),
            completed: AtomicBool::new(false),
            error: Mutex::new(None),
            seen_done_at: OnceLock::new(),
            warned_unwaited: AtomicBool::new(false),
        }
    }

    /// The error this work ended with, if one was observed.
    pub(crate) fn error(&self) -> Option<PgError> {
        self.error.lock().clone()
    }

    /// Whether some thread observed the end event complete.
    pub(crate) fn is_marked_completed(&self) -> bool {
        self.completed.load(Ordering::Acquire)
    }
}
