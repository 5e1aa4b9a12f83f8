//! Stream uses: `record_stream` and the per-work erase of docs/design.md §3 rules 2, 4 and 5.

use crate::backend::Backend;
use crate::ids::{StreamId, WorkId};

use super::block::{StreamUse, UseOwner};
use super::index::{BlockRef, BlockState};
use super::state::State;

/// What an erase did.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum EraseOutcome {
    /// The work's use was removed (the block may still be protected by other owners).
    Erased,
    /// The use was removed, it was the last thing a pending-free block waited for, and the
    /// block went back to its pool.
    FreedNow,
    /// The block's allocation stream is not the caller's current stream: nothing changed
    /// (an allocation on the block's stream could still race the work).
    NotCurrentStream,
    /// The block holds no use of that stream by that work: nothing changed.
    NoSuchUse,
    /// The block reference is stale (the block went back to the pool, was merged, or the
    /// slot now holds another block), or belongs to another allocator: nothing changed.
    StaleBlock,
}

impl<B: Backend> State<B> {
    /// Adds a use of `stream` by `owner`; a no-op on the block's own stream and for a use
    /// already held by that owner. Counts the call either way.
    pub fn record_use(&mut self, r: BlockRef, stream: &B::Stream, id: StreamId, owner: UseOwner) {
        self.counts.record_stream_calls += 1;
        if self
            .index
            .resolve(r)
            .is_none_or(|b| !matches!(b.state, BlockState::Allocated { .. }) || b.stream == id)
        {
            return;
        }
        let d = self.dev_mut(r.id);
        if !d.uses.iter().any(|u| u.id == id && u.owner == owner) {
            d.uses.push(StreamUse {
                stream: stream.clone(),
                id,
                owner,
            });
        }
    }

    /// Removes `work`'s use of stream `id` from the block `r`, if the block's allocation
    /// stream is `current`. For a pending-free block, the event on that stream is dropped
    /// once no owner of the stream remains, and the block is freed when no event remains.
    pub fn erase(
        &mut self,
        r: BlockRef,
        work: WorkId,
        id: StreamId,
        current: StreamId,
    ) -> EraseOutcome {
        self.counts.erase_stream_calls += 1;
        let Some(b) = self.index.resolve(r) else {
            return EraseOutcome::StaleBlock;
        };
        if b.stream != current {
            return EraseOutcome::NotCurrentStream;
        }
        let pending = matches!(b.state, BlockState::PendingFree { .. });
        let Some(slot) = self.dev.get_mut(r.id as usize) else {
            return EraseOutcome::NoSuchUse;
        };
        let Some(i) = slot
            .uses
            .iter()
            .position(|u| u.id == id && u.owner == UseOwner::Work(work))
        else {
            return EraseOutcome::NoSuchUse;
        };
        slot.uses.swap_remove(i);
        // A quarantined block keeps waiting for a successful synchronize, whatever is erased.
        if !pending || slot.has_use_of(id) {
            return EraseOutcome::Erased;
        }
        if let Some(j) = slot.events.iter().position(|(s, _)| *s == id) {
            let (_, event) = slot.events.swap_remove(j);
            self.events.put(event);
            self.pending_events -= 1;
        }
        if !self.dev[r.id as usize].events.is_empty() {
            return EraseOutcome::Erased;
        }
        let Some(p) = self.pending.iter().position(|&s| s == r.id) else {
            return EraseOutcome::Erased;
        };
        self.pending.swap_remove(p);
        self.release_to_pool(r.id);
        EraseOutcome::FreedNow
    }
}
