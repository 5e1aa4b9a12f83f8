//! What a group is configured with: the policy choice and the settings sub-groups inherit.

use std::time::Duration;

use super::mode::ReuseMode;
use super::policy::{Erase, RecordStream, ReusePolicy, Stash};
use super::sync_path::SyncCollectives;
use crate::backend::Backend;

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
    /// The policy object of this choice.
    pub(super) fn instantiate<B: Backend>(self) -> Box<dyn ReusePolicy<B>> {
        match self {
            PolicyChoice::Mode(ReuseMode::RecordStream) => Box::new(RecordStream),
            PolicyChoice::Mode(ReuseMode::EraseRecordStream) => Box::new(Erase { by_block: false }),
            PolicyChoice::Mode(ReuseMode::AvoidRecordStream) => Box::new(Stash),
            PolicyChoice::Mode(ReuseMode::EraseRecordStreamWithOptimize) => {
                Box::new(Erase { by_block: true })
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
    /// Where synchronous collectives run.
    pub(crate) sync_collectives: SyncCollectives,
}

impl PgSettings {
    /// Whether a synchronous operation runs on the caller's current stream. Always false
    /// for the negative control: its declared races (which schedules it must catch) are
    /// those of the comm-stream ordering, and on the current stream some become a matter
    /// of timing (fsdp's synchronous all_gather writing a gradient freed under its
    /// in-flight reduce_scatter is unordered there, and caught only when the host has not
    /// yet seen the reduce_scatter finish).
    pub(crate) fn sync_on_current_stream(&self) -> bool {
        #[cfg(feature = "negative-control")]
        if self.policy == PolicyChoice::NegativeControl {
            return false;
        }
        self.sync_collectives == SyncCollectives::CurrentStream
    }
}
