//! Where a synchronous collective (`async_op` false) runs: on the caller's current stream,
//! as PyTorch 2.8+ launches it, or on the group's comm stream, as PyTorch <= 2.7 and
//! torch_npu do.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// How a process group issues a synchronous collective ([`super::ProcessGroupBuilder::sync_collectives`]).
///
/// Asynchronous operations always go through the comm stream and the group's reuse
/// policy, whichever this is.
///
/// ```
/// use memreuse_core::process_group::SyncCollectives;
///
/// assert_eq!(SyncCollectives::default(), SyncCollectives::CurrentStream);
/// assert_eq!("comm-stream".parse::<SyncCollectives>(), Ok(SyncCollectives::CommStream));
/// let err = "nccl".parse::<SyncCollectives>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid synchronous-collective path \"nccl\": valid values are current-stream or comm-stream"
/// );
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum SyncCollectives {
    /// `current-stream` (default; PyTorch 2.8+, pytorch/pytorch#150398): the collective is
    /// enqueued on the caller's stream, so stream order alone protects its tensors: no
    /// comm-stream hop, no event for the hop, no `record_stream`, no stash, in every mode.
    #[default]
    CurrentStream,
    /// `comm-stream` (PyTorch <= 2.7, torch_npu): the collective hops to the comm stream
    /// under the group's reuse policy and is waited at once, like an asynchronous one.
    CommStream,
}

impl SyncCollectives {
    /// Both paths, the default first.
    pub const ALL: [SyncCollectives; 2] =
        [SyncCollectives::CurrentStream, SyncCollectives::CommStream];

    /// The name a command line or a report uses (`current-stream`, `comm-stream`).
    pub const fn name(self) -> &'static str {
        match self {
            SyncCollectives::CurrentStream => "current-stream",
            SyncCollectives::CommStream => "comm-stream",
        }
    }
}

impl fmt::Display for SyncCollectives {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SyncCollectives {
    type Err = ParseSyncCollectivesError;

    /// Exactly [`SyncCollectives::name`] of one path, surrounding whitespace allowed.
    fn from_str(text: &str) -> Result<SyncCollectives, ParseSyncCollectivesError> {
        let trimmed = text.trim();
        SyncCollectives::ALL
            .into_iter()
            .find(|p| p.name() == trimmed)
            .ok_or_else(|| ParseSyncCollectivesError {
                value: text.to_owned(),
            })
    }
}

/// Text that names no synchronous-collective path.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error(
    "invalid synchronous-collective path {value:?}: valid values are current-stream or comm-stream"
)]
pub struct ParseSyncCollectivesError {
    /// The text given.
    pub value: String,
}
