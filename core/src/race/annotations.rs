//! Which allocator hand-out owns each byte of one raw allocation (from
//! [`crate::Backend::annotate_allocation`]): tells a reuse race (two hand-outs sharing
//! memory) from a schedule race (one hand-out).

use std::collections::BTreeMap;

use crate::ids::AllocationId;

/// Which [`AllocationId`] owns each annotated byte range of one raw allocation: disjoint
/// intervals keyed by start, each `(end, id)`.
#[derive(Default)]
pub(crate) struct Annotations(BTreeMap<u64, (u64, AllocationId)>);

impl Annotations {
    /// `[start, end)` now belongs to `id`; overlapped parts of older intervals are cut away.
    /// Allocates nothing beyond the map's own nodes.
    pub(crate) fn annotate(&mut self, start: u64, end: u64, id: AllocationId) {
        if start >= end {
            return;
        }
        // The common case: a cached block handed out again at the same address and size.
        // Intervals are disjoint, so one that starts at `start` and ends at `end` is the
        // only one touching the range: relabel it in place.
        if let Some(v) = self.0.get_mut(&start)
            && v.0 == end
        {
            v.1 = id;
            return;
        }
        // An interval that begins before `start` and reaches into it keeps its head.
        if let Some((&s, &(e, old))) = self.0.range(..start).next_back()
            && e > start
        {
            self.0.insert(s, (start, old));
            if e > end {
                self.0.insert(end, (e, old));
            }
        }
        // Intervals beginning inside the range go, one at a time (no collected list); a
        // tail reaching past `end` is re-inserted at `end`, outside the scanned range.
        while let Some((&s, &(e, old))) = self.0.range(start..end).next() {
            self.0.remove(&s);
            if e > end {
                self.0.insert(end, (e, old));
            }
        }
        self.0.insert(start, (end, id));
    }

    /// The allocation owning byte `addr`, if annotated.
    pub(crate) fn owner(&self, addr: u64) -> Option<AllocationId> {
        self.0
            .range(..=addr)
            .next_back()
            .filter(|(_, (end, _))| *end > addr)
            .map(|(_, (_, id))| *id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_split_and_replace() {
        let mut a = Annotations::default();
        a.annotate(0, 100, AllocationId(1));
        a.annotate(40, 60, AllocationId(2));
        assert_eq!(a.owner(39), Some(AllocationId(1)));
        assert_eq!(a.owner(40), Some(AllocationId(2)));
        assert_eq!(a.owner(59), Some(AllocationId(2)));
        assert_eq!(a.owner(60), Some(AllocationId(1)));
        assert_eq!(a.owner(100), None);
        a.annotate(0, 100, AllocationId(3));
        assert_eq!(a.0.len(), 1);
        assert_eq!(a.owner(50), Some(AllocationId(3)));
        // Same range again: relabelled in place.
        a.annotate(0, 100, AllocationId(4));
        assert_eq!(a.0.len(), 1);
        assert_eq!(a.owner(99), Some(AllocationId(4)));
        // A range covering several intervals and cutting the last one.
        a.annotate(0, 10, AllocationId(5));
        a.annotate(10, 20, AllocationId(6));
        a.annotate(5, 15, AllocationId(7));
        assert_eq!(a.owner(4), Some(AllocationId(5)));
        assert_eq!(a.owner(5), Some(AllocationId(7)));
        assert_eq!(a.owner(14), Some(AllocationId(7)));
        assert_eq!(a.owner(15), Some(AllocationId(6)));
        assert_eq!(a.owner(20), Some(AllocationId(4)));
        assert_eq!(a.owner(99), Some(AllocationId(4)));
    }
}
