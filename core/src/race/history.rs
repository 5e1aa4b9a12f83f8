//! The happens-before engine's per-allocation access history.
//!
//! Every access is stored with its *epoch*: the stream's clock component `comp` and the
//! value `tick` that component had right after the op ticked it. Because each stream is
//! totally ordered, a later op with clock `V` is ordered after the access iff
//! `V[comp] >= tick` (the `FastTrack` observation), so a check costs O(1) per overlapping
//! history entry instead of a vector comparison.
//!
//! History is kept per raw allocation in a map ordered by start address, with the longest
//! entry length remembered, so the entries overlapping a range are found in
//! O(log n + entries starting within `max_len` before it).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::clock::VClock;
use super::op::OpInfo;
use super::report::{AccessKind, RaceAccess};
use crate::ids::AllocationId;

/// One recorded access.
#[derive(Clone, Debug)]
pub(crate) struct Access {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Read or write.
    pub kind: AccessKind,
    /// The stream's clock component.
    pub comp: usize,
    /// The op's epoch on that component.
    pub tick: u64,
    /// The op.
    pub op: Arc<OpInfo>,
    /// Allocator hand-out owning the first byte at enqueue time.
    pub alloc: Option<AllocationId>,
}

impl Access {
    fn conflicts(&self, other: &Access) -> bool {
        (self.kind == AccessKind::Write || other.kind == AccessKind::Write)
            && self.start < other.end
            && other.start < self.end
    }

    pub(crate) fn to_race_access(&self) -> RaceAccess {
        RaceAccess {
            op: self.op.desc.clone(),
            stream: self.op.stream,
            kind: self.kind,
            allocation: self.alloc,
        }
    }
}

/// Accesses to one raw allocation that some clock has not yet passed.
#[derive(Default)]
pub(crate) struct History {
    entries: BTreeMap<(u64, u64), Access>,
    max_len: u64,
    next_key: u64,
}

impl History {
    /// Number of stored accesses.
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = (&(u64, u64), &Access)> {
        let from = start.saturating_sub(self.max_len);
        self.entries
            .range((from, 0)..(end, 0))
            .filter(move |(_, a)| a.end > start)
    }

    /// Pushes onto `out` every stored access that conflicts with `acc` and is not ordered
    /// before an op whose clock is `clock`.
    pub(crate) fn check<'a>(&'a self, acc: &Access, clock: &VClock, out: &mut Vec<&'a Access>) {
        for (_, e) in self.overlapping(acc.start, acc.end) {
            if e.conflicts(acc) && clock.get(e.comp) < e.tick {
                out.push(e);
            }
        }
    }

    /// Stores `acc`, dropping older entries of the same stream that it subsumes: any later
    /// op that is unordered with (or conflicts with) such an entry is also unordered with
    /// (and conflicts with) `acc`, so keeping both would only cost time.
    pub(crate) fn insert(&mut self, acc: Access) {
        let subsumed: Vec<(u64, u64)> = self
            .overlapping(acc.start, acc.end)
            .filter(|(_, e)| {
                e.comp == acc.comp
                    && e.start >= acc.start
                    && e.end <= acc.end
                    && (acc.kind == AccessKind::Write || e.kind == AccessKind::Read)
            })
            .map(|(k, _)| *k)
            .collect();
        for k in subsumed {
            self.entries.remove(&k);
        }
        self.max_len = self.max_len.max(acc.end - acc.start);
        self.next_key += 1;
        self.entries.insert((acc.start, self.next_key), acc);
    }

    /// Drops every access that all clocks have passed (`passed[comp] >= tick`); no op
    /// enqueued from now on can be unordered with them.
    pub(crate) fn prune(&mut self, passed: &VClock) {
        self.entries.retain(|_, a| passed.get(a.comp) < a.tick);
        self.max_len = self
            .entries
            .values()
            .map(|a| a.end - a.start)
            .max()
            .unwrap_or(0);
    }

    /// Every stored access (for the check at `free`).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Access> {
        self.entries.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::StreamId;
    use crate::race::AccessKind;

    fn acc(start: u64, end: u64, kind: AccessKind, comp: usize, tick: u64) -> Access {
        Access {
            start,
            end,
            kind,
            comp,
            tick,
            op: Arc::new(OpInfo {
                seq: tick,
                desc: format!("op{comp}.{tick}"),
                stream: StreamId(comp as u64),
            }),
            alloc: None,
        }
    }

    #[test]
    fn check_uses_epochs_and_kinds() {
        let mut h = History::default();
        h.insert(acc(0, 100, AccessKind::Write, 0, 1));
        let mut clock = VClock::default();
        let mut out = Vec::new();
        h.check(&acc(50, 60, AccessKind::Read, 1, 1), &clock, &mut out);
        assert_eq!(out.len(), 1);
        out.clear();
        h.check(&acc(100, 160, AccessKind::Write, 1, 1), &clock, &mut out);
        assert!(out.is_empty(), "adjacent ranges do not overlap");
        clock.tick(0);
        h.check(&acc(50, 60, AccessKind::Write, 1, 1), &clock, &mut out);
        assert!(out.is_empty(), "ordered after the write");
    }

    #[test]
    fn insert_subsumes_and_prune_drops_passed() {
        let mut h = History::default();
        h.insert(acc(10, 20, AccessKind::Read, 0, 1));
        h.insert(acc(0, 100, AccessKind::Write, 0, 2));
        assert_eq!(h.len(), 1);
        h.insert(acc(0, 100, AccessKind::Read, 1, 1));
        assert_eq!(h.len(), 2);
        let mut passed = VClock::default();
        passed.tick(0);
        passed.tick(0);
        h.prune(&passed);
        assert_eq!(h.len(), 1);
    }
}
