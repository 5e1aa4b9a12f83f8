//! Process groups, works, reuse policies, the TensorShelf and the watchdog.
//!
//! A [`ProcessGroup`] owns one communicator and one comm stream and applies one reuse
//! policy (docs/design.md §4) to every tensor its communication touches. The policy is chosen
//! by [`ProcessGroupBuilder::mode`] or, when unset, by `MULTI_STREAM_MEMORY_REUSE`.

// The layers, lowest first; a file names only files of its own layer or below (checked
// by `.ci/import-circles`):
// 1. plain types: buffer, checks, counters, error, handoff, kind, mode, shelf, span,
//    sync_path;
// 2. the policies (`policy/`): a work seen only as its id and what the policy holds;
// 3. settings (the policy choice), work_state;
// 4. shared (with its impl files oom_explain, pressure and unwaited);
// 5. work (the user's handle), watchdog;
// 6. group, with collectives and p2p, its operations;
// 7. builder.
mod buffer;
mod builder;
mod checks;
mod collectives;
mod counters;
mod error;
mod group;
pub mod handoff;
mod kind;
mod mode;
mod oom_explain;
mod p2p;
mod policy;
mod pressure;
mod settings;
mod shared;
mod shelf;
mod span;
mod sync_path;
mod unwaited;
mod watchdog;
mod work;
mod work_state;

pub use buffer::CommBuffer;
pub use builder::ProcessGroupBuilder;
pub use counters::PgStats;
pub use error::PgError;
pub use group::ProcessGroup;
pub use kind::CommKind;
pub use mode::{
    MULTI_STREAM_MEMORY_REUSE, ParseReuseModeError, ReuseMode, ReuseModeError, parse_reuse_mode,
    reuse_mode_from_env,
};
pub use p2p::P2pOp;
pub use settings::PolicyChoice;
pub use shelf::TensorShelf;
pub use span::{WORK_SPAN_CAPACITY, WorkSpan};
pub use sync_path::{ParseSyncCollectivesError, SyncCollectives};
pub use work::Work;
