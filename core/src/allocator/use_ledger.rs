//! The allocator's record of which streams each recent hand-out was declared to be used on
//! (`record_stream`, or a process-group work's use): what
//! [`crate::race::advise`] needs to tell a program's missing `record_stream` from an
//! allocator or policy bug. Off by default (it costs a lock per hand-out); enabled with
//! [`super::CachingAllocator::enable_use_ledger`] by race-checked runs.

use std::collections::{HashMap, VecDeque};

use crate::ids::{AllocationId, StreamId};
use crate::race::UseLookup;

/// Declared stream uses of the last `capacity` hand-outs.
#[derive(Clone, Debug, Default)]
pub struct UseLedger {
    capacity: usize,
    order: VecDeque<AllocationId>,
    uses: HashMap<AllocationId, Vec<StreamId>>,
}

impl UseLedger {
    /// A ledger remembering the last `capacity` hand-outs (at least one).
    pub fn new(capacity: usize) -> UseLedger {
        UseLedger {
            capacity: capacity.max(1),
            ..UseLedger::default()
        }
    }

    /// A hand-out was made: known, with no declared use yet. The oldest one is forgotten
    /// past the capacity.
    pub fn handed_out(&mut self, id: AllocationId) {
        if self.order.len() == self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.uses.remove(&old);
        }
        self.order.push_back(id);
        self.uses.insert(id, Vec::new());
    }

    /// A use of `stream` was declared on hand-out `id` (ignored for a forgotten one).
    pub fn declared(&mut self, id: AllocationId, stream: StreamId) {
        if let Some(v) = self.uses.get_mut(&id)
            && !v.contains(&stream)
        {
            v.push(stream);
        }
    }
}

impl UseLookup for UseLedger {
    fn had_recorded_use(&self, allocation: AllocationId, stream: StreamId) -> Option<bool> {
        self.uses.get(&allocation).map(|v| v.contains(&stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_knows_declared_uses_and_forgets_the_oldest() {
        let mut l = UseLedger::new(2);
        l.handed_out(AllocationId(1));
        l.declared(AllocationId(1), StreamId(3));
        l.handed_out(AllocationId(2));
        assert_eq!(l.had_recorded_use(AllocationId(1), StreamId(3)), Some(true));
        assert_eq!(
            l.had_recorded_use(AllocationId(2), StreamId(3)),
            Some(false)
        );
        l.handed_out(AllocationId(4));
        assert_eq!(l.had_recorded_use(AllocationId(1), StreamId(3)), None);
        l.declared(AllocationId(1), StreamId(3)); // forgotten: ignored
        assert_eq!(l.had_recorded_use(AllocationId(1), StreamId(3)), None);
    }
}
