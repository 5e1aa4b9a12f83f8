//! Point-to-point and groups of it: `HcclSend` / `HcclRecv`, `HcclGroupStart` /
//! `HcclGroupEnd` where the runtime has them, and batched point-to-point without them.
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
use std::sync::atomic::Ordering;

use memreuse_core::DevicePtr;
use memreuse_core::comm::{CommError, DType};

use crate::comm::{AscendCommunicator, bad, comm_err, stream_raw, vptr};
use crate::device::AscendStream;
use crate::result::hccl_check;
use crate::sys;

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

impl AscendCommunicator {
    /// `group_start`: `HcclGroupStart`, or an emulated group where the symbols are absent
    /// or answer `HCCL_E_NOT_SUPPORT`.
    pub(crate) fn open_group(&self) -> Result<(), CommError> {
        self.check_aborted()?;
        if !self.groups_emulated() {
            if let Some(f) = self.device.api().HcclGroupStart {
                // SAFETY: no arguments.
                match self.call_raw(|_| unsafe { f() })? {
                    sys::HCCL_SUCCESS => return Ok(()),
                    // Documented as unsupported on Atlas 910 and 310P parts.
                    sys::HCCL_E_NOT_SUPPORT => self.emulate_group.store(true, Ordering::Relaxed),
                    code => return hccl_check(code, "HcclGroupStart").map_err(comm_err),
                }
            }
        }
        self.group.lock().depth += 1;
        Ok(())
    }

    /// `group_end`: `HcclGroupEnd`, or the emulated group's operations in the
    /// deadlock-free order.
    pub(crate) fn close_group(&self) -> Result<(), CommError> {
        let emulated_open = self.group.lock().depth > 0;
        if !emulated_open {
            let Some(f) = self
                .device
                .api()
                .HcclGroupEnd
                .filter(|_| !self.groups_emulated())
            else {
                return Err(bad("group_end", "no group is open (group_start first)"));
            };
            // SAFETY: no arguments.
            return self.call("HcclGroupEnd", |_| unsafe { f() });
        }
        let queued = {
            let mut g = self.group.lock();
            g.depth -= 1;
            if g.depth > 0 {
                return Ok(());
            }
            std::mem::take(&mut g.queued)
        };
        self.check_aborted()?;
        self.issue_emulated(queued)
    }

    /// Issues the queued operations of an emulated group in the deadlock-free order.
    fn issue_emulated(&self, queued: Vec<Queued>) -> Result<(), CommError> {
        let ordered = deadlock_free_order(self.rank, queued, |q| (q.send, q.peer));
        for q in ordered {
            let api = self.device.api();
            let (f, names) = if q.send {
                (api.HcclSend, ("send", "HcclSend"))
            } else {
                (api.HcclRecv, ("recv", "HcclRecv"))
            };
            self.p2p_now(names, f, q.buf, q.count, q.dtype, q.peer, &q.stream)?;
        }
        Ok(())
    }

    /// `HcclSend` or `HcclRecv` (one C signature) of `count` elements at `buf` with `peer`;
    /// `names` is (the trait method, the HCCL symbol) for errors.
    #[expect(
        clippy::too_many_arguments,
        reason = "the trait method's five arguments plus the call and its names"
    )]
    pub(crate) fn p2p(
        &self,
        names: (&'static str, &'static str),
        f: sys::HcclSend,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        let (method, _) = names;
        self.check_peer(method, peer)?;
        Self::dtype(method, dtype)?;
        {
            let mut g = self.group.lock();
            if g.depth > 0 {
                self.check_aborted()?;
                g.queued.push(Queued {
                    send: method == "send",
                    buf,
                    count,
                    dtype,
                    peer,
                    stream: stream.clone(),
                });
                return Ok(());
            }
        }
        self.p2p_now(names, f, buf, count, dtype, peer, stream)
    }

    /// Issues one `HcclSend` / `HcclRecv` now.
    #[expect(
        clippy::too_many_arguments,
        reason = "the trait method's five arguments plus the call and its names"
    )]
    fn p2p_now(
        &self,
        names: (&'static str, &'static str),
        f: sys::HcclSend,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        let (method, symbol) = names;
        let t = Self::dtype(method, dtype)?;
        // SAFETY: as for all_reduce.
        self.call(symbol, |c| unsafe {
            f(
                vptr(buf),
                count as u64,
                t,
                peer as u32,
                c,
                stream_raw(stream),
            )
        })
    }

    fn check_peer(&self, call: &'static str, peer: usize) -> Result<(), CommError> {
        if peer >= self.size || peer == self.rank {
            return Err(bad(
                call,
                format!(
                    "peer {peer} is not another rank of this {}-rank group",
                    self.size
                ),
            ));
        }
        Ok(())
    }
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
