//! Process groups, works, reuse policies, the TensorShelf and the watchdog.
//!
//! A [`ProcessGroup`] owns one communicator and one comm stream and applies one reuse
//! policy (docs/design.md §4) to every tensor its communication touches. The policy is chosen
//! by [`ProcessGroupBuilder::mode`] or, when unset, by `MULTI_STREAM_MEMORY_REUSE`.

mod buffer;
mod builder;
mod counters;
mod error;
mod group;
pub mod handoff;
mod mode;
mod oom_explain;
mod policy;
mod shared;
mod shelf;
mod unwaited;
mod watchdog;
mod work;

pub use buffer::CommBuffer;
pub use builder::{PolicyChoice, ProcessGroupBuilder};
pub use counters::PgStats;
pub use error::PgError;
pub use group::{P2pOp, ProcessGroup};
pub use mode::{
    MULTI_STREAM_MEMORY_REUSE, ParseReuseModeError, ReuseMode, ReuseModeError, parse_reuse_mode,
    reuse_mode_from_env,
};
pub use shelf::TensorShelf;
pub use work::{CommKind, WORK_SPAN_CAPACITY, Work, WorkSpan};
