//! Groups of point-to-point without the group symbols: the queue of an open group and the
//! order its operations are issued in (the communicator issues them:
//! `comm/point_to_point.rs`).
//!
//! The group symbols are absent from CANN 8.0-8.3 installs and documented as unsupported on
//! Atlas training (910) and Atlas inference (310P) parts. There, a communicator queues the
//! sends and receives issued between `group_start` and `group_end` and issues them one by one
//! at `group_end` in an order that cannot deadlock even though each one blocks its stream
//! until the peer's matching operation ran.
//!
//! The order: every operation gets the key `(lower rank, higher rank, sender, n)`, where `n`
//! counts the operations from that sender to that receiver in issue order, and every rank
//! issues its batch sorted by key. Both members of an operation compute the same key (the
//! sender's `n`-th send to a receiver is that receiver's `n`-th receive from it, which is
//! also how HCCL matches them), so every rank issues in one global order; then the smallest
//! unfinished operation has both members at it (everything before it in either member's
//! order is smaller, so finished), and it completes: no cycle of waits can form.

use std::collections::HashMap;

use memreuse_core::DevicePtr;
use memreuse_core::comm::DType;

use crate::device::AscendStream;

/// A send or receive queued until `group_end`.
#[derive(Debug, Clone)]
pub(crate) struct Queued {
    pub send: bool,
    pub buf: DevicePtr,
    pub count: usize,
    pub dtype: DType,
    pub peer: usize,
    pub stream: AscendStream,
}

/// The open group of a communicator that runs without the group symbols.
#[derive(Debug, Default)]
pub(crate) struct Emulated {
    /// Open `group_start` calls.
    pub depth: u32,
    /// Operations of the outermost group, in issue order.
    pub queued: Vec<Queued>,
}

/// `ops` (issued by `rank`, in issue order) in the deadlock-free global order; `what`
/// tells whether an op is a send and its peer.
pub(crate) fn deadlock_free_order<T>(
    rank: usize,
    ops: Vec<T>,
    what: impl Fn(&T) -> (bool, usize),
) -> Vec<T> {
    let mut seen: HashMap<(usize, usize), usize> = HashMap::new();
    let mut keyed: Vec<((usize, usize, usize, usize), T)> = ops
        .into_iter()
        .map(|op| {
            let (send, peer) = what(&op);
            let (sender, receiver) = if send { (rank, peer) } else { (peer, rank) };
            let n = seen.entry((sender, receiver)).or_insert(0);
            let key = (rank.min(peer), rank.max(peer), sender, *n);
            *n += 1;
            (key, op)
        })
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    keyed.into_iter().map(|(_, op)| op).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which (sender, receiver, n) each rank issues at each position, in the order
    /// `deadlock_free_order` gives.
    fn plan(rank: usize, ops: &[(bool, usize)]) -> Vec<(usize, usize, usize)> {
        let mut seen: HashMap<(usize, usize), usize> = HashMap::new();
        let tagged: Vec<(bool, usize, (usize, usize, usize))> = ops
            .iter()
            .map(|&(send, peer)| {
                let pair = if send { (rank, peer) } else { (peer, rank) };
                let n = seen.entry(pair).or_insert(0);
                *n += 1;
                (send, peer, (pair.0, pair.1, *n - 1))
            })
            .collect();
        deadlock_free_order(rank, tagged, |&(send, peer, _)| (send, peer))
            .into_iter()
            .map(|(_, _, t)| t)
            .collect()
    }

    /// Simulates blocking rendezvous: each rank runs its list in order; an op runs when
    /// both members are at it. True when every rank finishes.
    fn completes(lists: &[Vec<(usize, usize, usize)>]) -> bool {
        let mut pos = vec![0usize; lists.len()];
        loop {
            if pos.iter().zip(lists).all(|(&p, l)| p == l.len()) {
                return true;
            }
            let mut progressed = false;
            for r in 0..lists.len() {
                let Some(&op) = lists[r].get(pos[r]) else {
                    continue;
                };
                let other = if op.0 == r { op.1 } else { op.0 };
                if lists[other].get(pos[other]) == Some(&op) {
                    pos[r] += 1;
                    pos[other] += 1;
                    progressed = true;
                }
            }
            if !progressed {
                return false;
            }
        }
    }

    #[test]
    fn a_ring_issued_send_first_would_deadlock_and_the_order_does_not() {
        for n in 2..7 {
            let issued: Vec<Vec<(bool, usize)>> = (0..n)
                .map(|r| vec![(true, (r + 1) % n), (false, (r + n - 1) % n)])
                .collect();
            let naive: Vec<Vec<(usize, usize, usize)>> = issued
                .iter()
                .enumerate()
                .map(|(r, ops)| {
                    ops.iter()
                        .map(|&(s, p)| if s { (r, p, 0) } else { (p, r, 0) })
                        .collect()
                })
                .collect();
            if n > 2 {
                assert!(!completes(&naive), "naive ring of {n} must deadlock");
            }
            let ordered: Vec<_> = issued.iter().enumerate().map(|(r, o)| plan(r, o)).collect();
            assert!(completes(&ordered), "ordered ring of {n}");
        }
    }

    #[test]
    fn all_to_all_by_point_to_point_with_repeats_completes() {
        let n = 5;
        let issued: Vec<Vec<(bool, usize)>> = (0..n)
            .map(|r| {
                let mut ops = Vec::new();
                for k in 1..n {
                    ops.push((true, (r + k) % n));
                    ops.push((false, (r + n - k) % n));
                    ops.push((true, (r + k) % n));
                    ops.push((false, (r + n - k) % n));
                }
                ops
            })
            .collect();
        let ordered: Vec<_> = issued.iter().enumerate().map(|(r, o)| plan(r, o)).collect();
        assert!(completes(&ordered));
    }
}
