//! The mock communicator: N ranks in one process, one mock device each, with NCCL
//! semantics built on joint ops.
//!
//! - A collective is one joint op of the communicator's [`JointGroup`](crate::JointGroup):
//!   matched across the group in issue order, executed once every member's stream reached
//!   it, its reads and writes declared so the race detector sees them.
//! - Point-to-point uses one two-rank joint group per ordered (sender, receiver) pair
//!   ([`PairGroups`]), so the k-th send from a to b matches the k-th recv at b from a.
//!   `group_start` / `group_end` submit the pending sends and receives as one batch entry
//!   (`ncclGroupStart`/`ncclGroupEnd`): members of a batch never wait for each other.
//! - The data movement of every op is in [`collective`], shared with the Ascend stand-in.
//! - A member that never arrives turns the op into a timeout error (the cluster's
//!   `joint_timeout`), surfaced when the work's end event is queried; fault injection
//!   fails the k-th collective; `abort` fails everything pending.

pub mod collective;
mod family;
mod open;
mod pairs;

pub use family::MockCommunicator;
pub use open::open_mock_world;
pub use pairs::PairGroups;
