//! Building a process group: [`ProcessGroup::builder`] and the options it takes. The top
//! layer of the process group, above the group itself.

use std::sync::Arc;
use std::time::Duration;

use super::error::PgError;
use super::group::ProcessGroup;
use super::mode::{ReuseMode, reuse_mode_from_env};
use super::settings::{PgSettings, PolicyChoice};
use super::sync_path::SyncCollectives;
use crate::allocator::CachingAllocator;
use crate::backend::Backend;
use crate::comm::Communicator;

/// Builds a [`ProcessGroup`].
pub struct ProcessGroupBuilder<B: Backend> {
    allocator: Arc<CachingAllocator<B>>,
    comm: Box<dyn Communicator<B>>,
    mode: Option<PolicyChoice>,
    timeout: Duration,
    watchdog_interval: Option<Duration>,
    blocking_wait: bool,
    unwaited_warning_after: Duration,
    sync_collectives: SyncCollectives,
}

impl<B: Backend> ProcessGroup<B> {
    /// Starts building a group over `comm`, allocating through `allocator`.
    pub fn builder(
        allocator: Arc<CachingAllocator<B>>,
        comm: Box<dyn Communicator<B>>,
    ) -> ProcessGroupBuilder<B> {
        ProcessGroupBuilder {
            allocator,
            comm,
            mode: None,
            timeout: Duration::from_secs(600),
            watchdog_interval: Some(Duration::from_millis(2)),
            blocking_wait: false,
            unwaited_warning_after: Duration::from_secs(10),
            sync_collectives: SyncCollectives::default(),
        }
    }
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

    /// Where synchronous collectives (`async_op` false, and `barrier`) run. Default
    /// [`SyncCollectives::CurrentStream`], as PyTorch 2.8+: on the caller's stream, with
    /// no comm-stream hop and nothing for the reuse policy to protect.
    /// [`SyncCollectives::CommStream`] keeps the path of PyTorch <= 2.7 and torch_npu
    /// (hop to the comm stream under the policy, then an immediate `wait()`). Asynchronous
    /// operations are the same either way. Sub-groups inherit it. The negative control
    /// (conformance runner only) keeps the comm-stream path, whose ordering its declared
    /// races describe.
    #[must_use]
    pub fn sync_collectives(mut self, path: SyncCollectives) -> Self {
        self.sync_collectives = path;
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
            sync_collectives: self.sync_collectives,
        };
        ProcessGroup::create(self.allocator, self.comm, settings)
    }
}
