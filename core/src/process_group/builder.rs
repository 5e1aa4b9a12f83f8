//! Building a process group: the policy choice and the settings sub-groups inherit.

use std::sync::Arc;
use std::time::Duration;

use super::error::PgError;
use super::group::ProcessGroup;
use super::mode::{ReuseMode, reuse_mode_from_env};
use super::policy::ReusePolicy;
use crate::allocator::CachingAllocator;
use crate::backend::Backend;
use crate::comm::Communicator;

/// Which policy a group runs: one of the public modes, or (with the `negative-control`
/// feature, for the conformance runner only) no protection at all.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PolicyChoice {
    /// A public reuse mode.
    Mode(ReuseMode),
    /// Neither `record_stream` nor shelf: the negative control.
    #[cfg(feature = "negative-control")]
    NegativeControl,
}

impl PolicyChoice {
    pub(super) fn instantiate<B: Backend>(self) -> Box<dyn ReusePolicy<B>> {
        use super::policy::{EraseAtWait, EraseAtWaitByBlock, RecordStream, Stash};
        match self {
            PolicyChoice::Mode(ReuseMode::RecordStream) => Box::new(RecordStream),
            PolicyChoice::Mode(ReuseMode::EraseRecordStream) => Box::new(EraseAtWait),
            PolicyChoice::Mode(ReuseMode::AvoidRecordStream) => Box::new(Stash),
            PolicyChoice::Mode(ReuseMode::EraseRecordStreamWithOptimize) => {
                Box::new(EraseAtWaitByBlock)
            }
            #[cfg(feature = "negative-control")]
            PolicyChoice::NegativeControl => Box::new(super::policy::Unguarded),
        }
    }
}

/// Settings shared by a group and the sub-groups created from it.
#[derive(Clone, Debug)]
pub(crate) struct PgSettings {
    pub(crate) policy: PolicyChoice,
    pub(crate) timeout: Duration,
    pub(crate) watchdog_interval: Option<Duration>,
    pub(crate) blocking_wait: bool,
    pub(crate) unwaited_warning_after: Duration,
}

/// Builds a [`ProcessGroup`].
pub struct ProcessGroupBuilder<B: Backend> {
    pub(super) allocator: Arc<CachingAllocator<B>>,
    pub(super) comm: Box<dyn Communicator<B>>,
    pub(super) mode: Option<PolicyChoice>,
    pub(super) timeout: Duration,
    pub(super) watchdog_interval: Option<Duration>,
    pub(super) blocking_wait: bool,
    pub(super) unwaited_warning_after: Duration,
}

impl<B: Backend> ProcessGroupBuilder<B> {
    /// Sets the reuse mode for this group; wins over `MULTI_STREAM_MEMORY_REUSE`.
    #[must_use]
    pub fn mode(mut self, mode: ReuseMode) -> Self {
        self.mode = Some(PolicyChoice::Mode(mode));
        self
    }

    /// Selects the negative-control policy (no protection). Conformance runner only.
    #[cfg(feature = "negative-control")]
    #[must_use]
    pub fn negative_control(mut self) -> Self {
        self.mode = Some(PolicyChoice::NegativeControl);
        self
    }

    /// How long a work may run before the watchdog (or a blocking wait) fails it.
    /// Default: 10 minutes, as NCCL process groups.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Watchdog polling interval; `None` disables the thread (completion is then
    /// observed only by the main thread's own polls, `wait()` and the OOM callback).
    #[must_use]
    pub fn watchdog(mut self, interval: Option<Duration>) -> Self {
        self.watchdog_interval = interval;
        self
    }

    /// With blocking wait, `wait()` also blocks the host until the work finished (up to the
    /// timeout), so a failed collective is reported by `wait()` itself.
    #[must_use]
    pub fn blocking_wait(mut self, on: bool) -> Self {
        self.blocking_wait = on;
        self
    }

    /// How long after a work was seen complete, never waited, while it still holds memory
    /// (its shelf, or work-owned stream uses on live tensors), the group warns about it,
    /// once per work (`PgStats::never_waited_warnings`). Default: 10 seconds.
    #[must_use]
    pub fn unwaited_warning_after(mut self, after: Duration) -> Self {
        self.unwaited_warning_after = after;
        self
    }

    /// Creates the group: its comm stream, its watchdog, and its free-memory callback.
    pub fn build(self) -> Result<ProcessGroup<B>, PgError> {
        let policy = match self.mode {
            Some(p) => p,
            None => PolicyChoice::Mode(reuse_mode_from_env()?),
        };
        let settings = PgSettings {
            policy,
            timeout: self.timeout,
            watchdog_interval: self.watchdog_interval,
            blocking_wait: self.blocking_wait,
            unwaited_warning_after: self.unwaited_warning_after,
        };
        ProcessGroup::create(self.allocator, self.comm, settings)
    }
}
