//! What kind of communication a work performs, the one fact about an operation the
//! policies branch on.

/// What kind of communication a work performs; policies treat point-to-point differently
/// (nothing obliges a user to wait on an `isend`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CommKind {
    /// A collective (all_reduce, all_gather, ...).
    Collective,
    /// Point-to-point (send, recv, a batch of them).
    PointToPoint,
}
