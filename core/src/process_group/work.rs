//! Work: one issued collective (or batch), its end event and what its policy holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::error::PgError;
use super::shared::PgShared;
use super::shelf::TensorShelf;
use crate::allocator::{BlockRef, WeakStorage};
use crate::backend::Backend;
use crate::ids::WorkId;

/// What kind of communication a work performs; policies treat point-to-point differently
/// (nothing obliges a user to wait on an `isend`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CommKind {
    /// A collective (all_reduce, all_gather, ...).
    Collective,
    /// Point-to-point (send, recv, a batch of them).
    PointToPoint,
}

/// How many finished work spans a group keeps for
/// [`super::ProcessGroup::work_spans`].
pub const WORK_SPAN_CAPACITY: usize = 4096;

/// A finished work as a time span on the allocator's trace clock
/// ([`crate::allocator::trace_clock_us`]), for timelines.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct WorkSpan {
    /// The work.
    pub id: WorkId,
    /// The operation's name.
    pub op: &'static str,
    /// Collective or point-to-point.
    pub kind: CommKind,
    /// When the host issued it (µs on the trace clock).
    pub start_us: u64,
    /// When a host thread first observed it complete (µs on the trace clock): an upper
    /// bound of the device end, as precise as the polling that observed it.
    pub end_us: u64,
    /// Whether it ended with an error.
    pub failed: bool,
}

/// A tensor a mode-1/3 work tracks without keeping it alive.
pub(crate) struct Tracked<B: Backend> {
    pub(crate) weak: WeakStorage<B>,
    pub(crate) block: BlockRef,
}

/// The state of one work, shared by the user's [`Work`] handle, the process group's
/// in-flight list and the watchdog.
pub(crate) struct WorkState<B: Backend> {
    pub(crate) id: WorkId,
    pub(crate) op: &'static str,
    pub(crate) kind: CommKind,
    pub(crate) end_event: B::Event,
    pub(crate) issued_at: Instant,
    /// `issued_at` on the allocator's trace clock ([`crate::allocator::trace_clock_us`]).
    pub(crate) issued_us: u64,
    /// Mode 2: strong handles until wait / completion.
    pub(crate) shelf: TensorShelf<B>,
    /// Modes 1 and 3: weak handles to erase at wait.
    pub(crate) tracked: Mutex<Vec<Tracked<B>>>,
    /// Set once the end event was observed complete (by anyone).
    pub(crate) completed: AtomicBool,
    pub(crate) error: Mutex<Option<PgError>>,
    /// When a host thread first saw it complete.
    pub(crate) seen_done_at: std::sync::OnceLock<Instant>,
    /// Set once the never-waited warning was given.
    pub(crate) warned_unwaited: AtomicBool,
}

impl<B: Backend> WorkState<B> {
    pub(crate) fn error(&self) -> Option<PgError> {
        self.error.lock().clone()
    }

    pub(crate) fn is_marked_completed(&self) -> bool {
        self.completed.load(Ordering::Acquire)
    }
}

/// Handle to an issued communication: wait for it, poll it, or drop it.
///
/// Dropping a `Work` without waiting is allowed (PyTorch users do it): the process group
/// still releases what the policy holds once the work completes.
pub struct Work<B: Backend> {
    pub(crate) state: Arc<WorkState<B>>,
    pub(crate) group: Arc<PgShared<B>>,
}

impl<B: Backend> Work<B> {
    /// The work's identity (the owner of the stream uses it recorded).
    pub fn id(&self) -> WorkId {
        self.state.id
    }

    /// The operation's name (`all_reduce`, `batch_isend_irecv`, ...).
    pub fn op(&self) -> &'static str {
        self.state.op
    }

    /// Collective or point-to-point.
    pub fn kind(&self) -> CommKind {
        self.state.kind
    }

    /// Makes `current` wait for the work on the device, then runs the policy's release
    /// step (erase this work's stream uses, or unstash its shelf). Strictly in that order:
    /// releasing first would let `current` reuse memory the collective still uses.
    ///
    /// With blocking wait configured, the host also waits (up to the group's timeout) and
    /// a failed or timed-out collective is returned here.
    pub fn wait(&self, current: &B::Stream) -> Result<(), PgError> {
        self.group.wait_work(&self.state, current)
    }

    /// True once the work finished on the device. An error if it failed.
    pub fn is_completed(&self) -> Result<bool, PgError> {
        self.group.poll_work(&self.state)
    }

    /// The error this work ended with, if any was observed so far.
    pub fn error(&self) -> Option<PgError> {
        self.state.error()
    }
}

impl<B: Backend> std::fmt::Debug for Work<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("id", &self.state.id)
            .field("op", &self.state.op)
            .field("completed", &self.state.is_marked_completed())
            .finish_non_exhaustive()
    }
}
