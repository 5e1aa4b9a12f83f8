//! The pending-free lifecycle, owned by one type: [`PendingFrees`] holds the stream uses of
//! every block, the blocks freed by the user that wait for events on those streams, the
//! events themselves (and their pool), and the quarantined blocks.
//!
//! # Transitions (each one method)
//! - [`PendingFrees::record_use`]: another stream uses an allocated block.
//! - [`PendingFrees::free`]: the user freed a block with stream uses: one event per used
//!   stream is recorded and the block waits ([`Freed::Pending`]), or it is free at once
//!   ([`Freed::Now`]), or no event and no synchronize could order the free after the uses
//!   ([`Freed::Quarantined`]).
//! - [`PendingFrees::poll`]: completed events go back to the pool; a block with none left
//!   is free; a failed query quarantines the block.
//! - [`PendingFrees::synchronize_all`]: every pending event is waited for on the host.
//! - [`PendingFrees::erase`]: a work's use is removed; the block is free once nothing it
//!   waits for remains.
//! - [`PendingFrees::release_quarantined`]: a quarantined block whose streams all
//!   synchronize is free.
//!
//! The index (`index/`) keeps the matching block state and figures; this type never touches
//! it. A transition that frees or quarantines a block reports it as a [`Change`], which the
//! caller applies to the index in the order given (the trace records that order).
//!
//! # Quarantine
//! A pending-free block whose event query (or synchronization) fails cannot be proven
//! unused: the device may still be working on it, or may never say. Such a block is
//! *quarantined*: it leaves the pending list, it counts in `quarantined_bytes` instead of
//! `pending_free_bytes`, and it is never reused while quarantined. The failure itself is not
//! the allocator's to report: the operation that failed (a work's `wait`, the stream's
//! synchronize) already returned it to its caller, so `allocate`, `process_events` and
//! `empty_cache` keep succeeding (a request the allocator can serve is served) and the
//! quarantine is logged once per block (`tracing` warning) instead of failing unrelated
//! calls. It returns to the pool only after a synchronize of every stream that used it
//! succeeds ([`super::CachingAllocator::release_quarantined`], `empty_cache`, or the
//! synchronizing step of a failing allocation).

use crate::backend::Backend;
use crate::error::BackendError;
use crate::ids::{StreamId, WorkId};

use super::events::EventPool;
use super::stream_use::{DeviceSlot, StreamUse, UseOwner};

/// A block that left the pending-free lifecycle, for the caller to apply to the index.
pub(crate) enum Change {
    /// The block is free: back to its pool.
    Free(u32),
    /// The block cannot be proven unused: quarantined. `error` is the failure that made it
    /// so (logged once by the caller).
    Quarantined { slot: u32, error: BackendError },
}

/// What [`PendingFrees::free`] did with a block the user freed.
pub(crate) enum Freed {
    /// No event was needed: the block is free now.
    Now,
    /// The block waits for its events.
    Pending,
    /// Neither an event nor a synchronize of some stream that used it succeeded: the block
    /// is quarantined, and `error` (the last synchronize failure) must be reported later.
    Quarantined(BackendError),
}

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

/// Stream uses, pending-free blocks, their events, and quarantine (see the module docs).
pub(crate) struct PendingFrees<B: Backend> {
    /// Uses and events per slot of the index (grown on demand).
    slots: Vec<DeviceSlot<B>>,
    /// Slots of pending-free blocks whose events are being waited for.
    pending: Vec<u32>,
    /// Events in flight over all pending blocks.
    in_flight: usize,
    /// Slots of quarantined blocks (see [`super::CachingAllocator`]'s docs).
    quarantined: Vec<u32>,
    events: EventPool<B>,
    /// Events recorded for pending frees (`reuse_events_created`).
    events_recorded: u64,
    /// Calls of [`PendingFrees::synchronize_all`] (`num_sync_all_streams`).
    sync_all_calls: u64,
}

impl<B: Backend> PendingFrees<B> {
    pub fn new() -> Self {
        PendingFrees {
            slots: Vec::new(),
            pending: Vec::new(),
            in_flight: 0,
            quarantined: Vec::new(),
            events: EventPool::new(),
            events_recorded: 0,
            sync_all_calls: 0,
        }
    }

    /// True when no block is pending-free.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Events in flight over all pending blocks.
    #[inline]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// True when no block is quarantined.
    pub fn none_quarantined(&self) -> bool {
        self.quarantined.is_empty()
    }

    /// Events recorded for pending frees so far.
    pub fn events_recorded(&self) -> u64 {
        self.events_recorded
    }

    /// Calls of [`PendingFrees::synchronize_all`] so far.
    pub fn sync_all_calls(&self) -> u64 {
        self.sync_all_calls
    }

    /// True when the block in `slot` has no stream uses.
    #[inline]
    pub fn has_no_uses(&self, slot: u32) -> bool {
        self.slots
            .get(slot as usize)
            .is_none_or(|d| d.uses.is_empty())
    }

    /// The uses of `slot`, created on first use; `capacity` is the index's slot count, so
    /// the vector grows once for every slot in use.
    fn slot_mut(&mut self, slot: u32, capacity: usize) -> &mut DeviceSlot<B> {
        let i = slot as usize;
        if i >= self.slots.len() {
            self.slots
                .resize_with(capacity.max(i + 1), DeviceSlot::default);
        }
        &mut self.slots[i]
    }

    /// Adds a use of `stream` (`id`) by `owner` to the allocated block in `slot`, unless
    /// that owner holds it already.
    pub fn record_use(
        &mut self,
        slot: u32,
        capacity: usize,
        stream: &B::Stream,
        id: StreamId,
        owner: UseOwner,
    ) {
        let d = self.slot_mut(slot, capacity);
        if !d.uses.iter().any(|u| u.id == id && u.owner == owner) {
            d.uses.push(StreamUse {
                stream: stream.clone(),
                id,
                owner,
            });
        }
    }

    /// The user freed the block in `slot`, which has stream uses: records one event per
    /// used stream (however many owners), or waits for a stream whose event cannot be
    /// recorded.
    #[cold]
    pub fn free(&mut self, backend: &B, slot: u32, capacity: usize) -> Freed {
        // Move the vectors out (keeping their capacity) to record events while borrowing the
        // event pool.
        let d = self.slot_mut(slot, capacity);
        let uses = std::mem::take(&mut d.uses);
        let mut events = std::mem::take(&mut d.events);
        let mut stuck = None;
        for (i, u) in uses.iter().enumerate() {
            if uses[..i].iter().any(|earlier| earlier.id == u.id) {
                continue; // one event per stream, however many owners
            }
            match self.events.record(backend, &u.stream) {
                Ok(e) => {
                    events.push((u.id, e));
                    self.events_recorded += 1;
                }
                // No event: wait for the stream now instead. If even that fails, the block
                // cannot be proven unused: quarantined.
                Err(err) => {
                    if let Err(sync_err) = backend.synchronize_stream(&u.stream) {
                        tracing::error!(%err, %sync_err, "memreuse allocator: cannot order a free after its stream uses; block quarantined");
                        stuck = Some(sync_err);
                    }
                }
            }
        }
        let d = &mut self.slots[slot as usize];
        d.uses = uses;
        d.events = events;
        if let Some(error) = stuck {
            self.return_events(slot);
            self.quarantined.push(slot);
            Freed::Quarantined(error)
        } else if self.slots[slot as usize].events.is_empty() {
            self.slots[slot as usize].uses.clear();
            Freed::Now
        } else {
            self.in_flight += self.slots[slot as usize].events.len();
            self.push_pending(slot);
            Freed::Pending
        }
    }

    /// Every event of `slot` back to the pool (re-recording replaces a failed or pending
    /// recording, so any event may go back).
    fn return_events(&mut self, slot: u32) {
        for (_, e) in self.slots[slot as usize].events.drain(..) {
            self.events.put(e);
        }
    }

    /// `slot` joins the pending list (its position kept in its [`DeviceSlot`]).
    fn push_pending(&mut self, slot: u32) {
        self.slots[slot as usize].pending_at = Some(self.pending.len());
        self.pending.push(slot);
    }

    /// Removes `pending[i]` (swapping the last entry into its place, whose kept position
    /// follows); returns its slot.
    fn swap_remove_pending(&mut self, i: usize) -> u32 {
        let slot = self.pending.swap_remove(i);
        self.slots[slot as usize].pending_at = None;
        if let Some(&moved) = self.pending.get(i) {
            self.slots[moved as usize].pending_at = Some(i);
        }
        slot
    }

    /// The pending block at `pending[i]` leaves the pending list with its events.
    fn take_pending(&mut self, i: usize) -> u32 {
        let slot = self.swap_remove_pending(i);
        self.in_flight -= self.slots[slot as usize].events.len();
        self.return_events(slot);
        slot
    }

    /// The pending block at `pending[i]` into quarantine.
    fn quarantine_pending(&mut self, i: usize, error: BackendError, on: &mut impl FnMut(Change)) {
        let slot = self.take_pending(i);
        self.quarantined.push(slot);
        on(Change::Quarantined { slot, error });
    }

    /// The block in `slot`, which waits for nothing any more, is free: its uses end.
    fn freed(&mut self, slot: u32, on: &mut impl FnMut(Change)) {
        let d = &mut self.slots[slot as usize];
        debug_assert!(d.events.is_empty());
        d.uses.clear();
        on(Change::Free(slot));
    }

    /// Frees every pending block whose events all completed (PyTorch's `process_events`);
    /// a block whose event query fails is quarantined, and every other pending block is
    /// still processed.
    pub fn poll(&mut self, backend: &B, mut on: impl FnMut(Change)) {
        let mut i = 0;
        while i < self.pending.len() {
            let slot = self.pending[i];
            let d = &mut self.slots[slot as usize];
            let mut j = 0;
            let mut failed = None;
            while j < d.events.len() {
                match backend.query_event(&d.events[j].1) {
                    Ok(true) => {
                        let (_, e) = d.events.swap_remove(j);
                        self.events.put(e);
                        self.in_flight -= 1;
                    }
                    Ok(false) => j += 1,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if let Some(error) = failed {
                self.quarantine_pending(i, error, &mut on);
            } else if d.events.is_empty() {
                self.swap_remove_pending(i);
                self.freed(slot, &mut on);
            } else {
                i += 1;
            }
        }
    }

    /// Waits for every pending event on the host and frees the blocks (PyTorch's
    /// `synchronize_and_free_events`, counted in `num_sync_all_streams`): first the blocks
    /// whose event cannot be waited for are quarantined, then every other one is freed.
    pub fn synchronize_all(&mut self, backend: &B, mut on: impl FnMut(Change)) {
        self.sync_all_calls += 1;
        let mut i = 0;
        while i < self.pending.len() {
            let slot = self.pending[i];
            let failed = self.slots[slot as usize]
                .events
                .iter()
                .find_map(|(_, e)| backend.synchronize_event(e).err());
            if let Some(error) = failed {
                self.quarantine_pending(i, error, &mut on);
            } else {
                i += 1;
            }
        }
        while let Some(last) = self.pending.len().checked_sub(1) {
            let slot = self.take_pending(last);
            self.freed(slot, &mut on);
        }
    }

    /// Synchronizes the streams that used each quarantined block; a block whose streams all
    /// synchronized is free. Returns the first failure (the blocks it concerns stay
    /// quarantined; the others are still tried).
    pub fn release_quarantined(
        &mut self,
        backend: &B,
        mut on: impl FnMut(Change),
    ) -> Option<BackendError> {
        let mut first_err = None;
        let mut i = 0;
        while i < self.quarantined.len() {
            let slot = self.quarantined[i];
            let uses = &self.slots[slot as usize].uses;
            let failed = uses.iter().enumerate().find_map(|(k, u)| {
                if uses[..k].iter().any(|earlier| earlier.id == u.id) {
                    return None;
                }
                backend.synchronize_stream(&u.stream).err()
            });
            if let Some(e) = failed {
                first_err.get_or_insert(e);
                i += 1;
            } else {
                self.quarantined.swap_remove(i);
                self.freed(slot, &mut on);
            }
        }
        first_err
    }

    /// Removes `work`'s use of stream `id` from the block in `slot` (`pending`: the block
    /// is pending-free). For a pending-free block the event on that stream goes back to the
    /// pool once no owner of the stream remains, and the block is free when no event
    /// remains. A quarantined block keeps waiting for a successful synchronize, whatever is
    /// erased.
    /// Returns [`EraseOutcome::NoSuchUse`], [`EraseOutcome::Erased`] or
    /// [`EraseOutcome::FreedNow`] (the caller returns the block to its pool).
    pub fn erase(&mut self, slot: u32, work: WorkId, id: StreamId, pending: bool) -> EraseOutcome {
        let Some(d) = self.slots.get_mut(slot as usize) else {
            return EraseOutcome::NoSuchUse;
        };
        let Some(i) = d
            .uses
            .iter()
            .position(|u| u.id == id && u.owner == UseOwner::Work(work))
        else {
            return EraseOutcome::NoSuchUse;
        };
        d.uses.swap_remove(i);
        if !pending || d.has_use_of(id) {
            return EraseOutcome::Erased;
        }
        if let Some(j) = d.events.iter().position(|(s, _)| *s == id) {
            let (_, event) = d.events.swap_remove(j);
            self.events.put(event);
            self.in_flight -= 1;
        }
        if !self.slots[slot as usize].events.is_empty() {
            return EraseOutcome::Erased;
        }
        let Some(p) = self.slots[slot as usize].pending_at else {
            return EraseOutcome::Erased;
        };
        self.swap_remove_pending(p);
        self.slots[slot as usize].uses.clear();
        EraseOutcome::FreedNow
    }

    /// What holds the pending-free blocks: `(slot, owner, stream)` for every use whose
    /// stream still has an outstanding event, in pending order.
    pub fn holds(&self) -> impl Iterator<Item = (u32, UseOwner, StreamId)> + '_ {
        self.pending.iter().flat_map(move |&slot| {
            let d = self.slots.get(slot as usize);
            d.into_iter().flat_map(move |d| {
                d.uses
                    .iter()
                    .filter(|u| d.events.iter().any(|(s, _)| *s == u.id))
                    .map(move |u| (slot, u.owner, u.id))
            })
        })
    }
}
