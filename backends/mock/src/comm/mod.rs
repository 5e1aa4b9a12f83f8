//! The mock communicator: N ranks in one process, one mock device each, with NCCL
//! semantics built on joint ops.
//!
//! - A collective is one joint op of the communicator's [`JointGroup`]: matched across the
//!   group in issue order, executed once every member's stream reached it, its reads and
//!   writes declared so the race detector sees them.
//! - Point-to-point uses one two-rank joint group per ordered (sender, receiver) pair, so
//!   the k-th send from a to b matches the k-th recv at b from a. `group_start` /
//!   `group_end` submit the pending sends and receives as one batch entry
//!   (`ncclGroupStart`/`ncclGroupEnd`): members of a batch never wait for each other.
//! - A member that never arrives turns the op into a timeout error (the cluster's
//!   `joint_timeout`), surfaced when the work's end event is queried; fault injection
//!   fails the k-th collective; `abort` fails everything pending.

mod body;
mod family;
mod world;

pub use family::MockCommunicator;
pub use world::open_mock_world;
