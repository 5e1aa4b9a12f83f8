//! Work: the user's handle to one issued collective (or batch). Above the shared state,
//! whose release paths `wait()` and polling run.

use std::sync::Arc;

use super::error::PgError;
use super::kind::CommKind;
use super::shared::PgShared;
use super::work_state::WorkState;
use crate::backend::Backend;
use crate::ids::WorkId;

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
