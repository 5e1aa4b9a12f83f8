//! The device-free block index: segments and blocks as addresses and sizes, best fit per
//! (stream, pool) in PyTorch's exact order, split and merge with PyTorch's rules, the
//! memory figures they add up to, and which blocks the retry chain releases, unmaps or
//! spares (`victims.rs`) and how an expandable segment grows (`expandable.rs`).
//!
//! Nothing here touches a device: no `Backend` type, no stream or event handles, only
//! numbers ([`StreamId`]s name streams). The device-facing layer (`state.rs`) calls the
//! index and owns everything else (raw malloc/free, events, synchronization); the index
//! never calls it, so every rule below is tested on plain offsets (`tests.rs`,
//! `victims_tests.rs`).
//!
//! # PyTorch's rules (`CUDACachingAllocator`), written once here
//! - **Best fit**: among the free blocks of the request's stream and pool, the smallest
//!   that fits, then the lowest address ([`FreeSet`] keeps that order exactly).
//! - **Oversize**: a request below `max_split_size` never takes a block of at least
//!   `max_split_size`; a request of at least `max_split_size` takes no block
//!   [`MAX_NON_SPLIT_ROUNDING`] or more bytes larger than itself.
//! - **Split** ([`should_split`]): small pool when the remainder is at least 512 bytes;
//!   large pool when the request is below `max_split_size` and the remainder is more than
//!   1 MiB.
//! - **Merge**: a block that becomes free merges at once with its free neighbours (eager,
//!   as PyTorch's `free_block`).
//!
//! Figures (`figures.rs`) change by the net effect of each operation (a split or merge
//! applies one `inactive_split` change), as PyTorch's before/after accounting does.

#![forbid(unsafe_code)]
// The index is plain arithmetic on offsets: a missing slot or segment is a bug to report
// through a typed path or a `debug_assert!`, never an `unwrap` (tests may unwrap).
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod block;
mod expandable;
#[cfg(test)]
mod expandable_fit_tests;
mod figures;
mod free_set;
mod handles;
mod lanes;
#[cfg(test)]
mod tests;
mod victims;
#[cfg(test)]
mod victims_tests;
mod walk;

use std::collections::BTreeMap;

pub use block::BlockRef;
pub(crate) use block::{Block, SlotState};
pub(crate) use expandable::Growth;
pub(crate) use figures::Figures;
pub(crate) use free_set::{FreeKey, FreeSet};

use crate::ids::StreamId;

use super::sizes::{MAX_NON_SPLIT_ROUNDING, PoolKind, should_split};
use block::Slab;

/// One raw device allocation, as the index sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    pub size: u64,
    pub stream: StreamId,
    pub pool: PoolKind,
    /// Memory-pool lane (0: the default pool; `lanes.rs`).
    pub lane: u32,
    /// Slot of the lowest block. Merges keep the lower block's slot, so it never changes.
    pub head: u32,
}

/// A block just handed out.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HandOut {
    pub block: BlockRef,
    pub ptr: u64,
    pub size: u64,
}

/// The free sets of one stream in one memory-pool lane. Entries are never removed, so a
/// block's `set` index stays valid.
struct StreamFree {
    stream: StreamId,
    lane: u32,
    /// The lane never splits a block (`lanes.rs`).
    no_split: bool,
    /// The lane's segments are never expandable (`lanes.rs`).
    plain: bool,
    pools: [FreeSet; 2],
}

/// Segments, blocks, free sets and figures of one allocator.
pub(crate) struct BlockIndex {
    slab: Slab,
    /// Free sets by stream (few streams per allocator: a short vector beats a map).
    free: Vec<StreamFree>,
    /// Index in `free` of the stream looked up last (checked first).
    last_stream: usize,
    /// Segments by base address.
    segments: BTreeMap<u64, Segment>,
    figures: Figures,
    max_split_size: u64,
    /// Number of allocate calls so far (the clock of garbage-collection ages).
    clock: u64,
    /// Expandable segments (`expandable.rs`): split rule and `inactive_split` as PyTorch's.
    expandable: bool,
    /// Flags of each memory-pool lane by lane number (`lanes.rs`; empty: default only).
    lanes: Vec<lanes::LaneFlags>,
    /// True once any lane is `no_split` (the hand-out checks the flag only then).
    any_no_split: bool,
}

impl BlockIndex {
    pub fn new(max_split_size: u64) -> Self {
        BlockIndex {
            slab: Slab::new(),
            free: Vec::new(),
            last_stream: 0,
            segments: BTreeMap::new(),
            figures: Figures::default(),
            max_split_size,
            clock: 0,
            expandable: false,
            lanes: Vec::new(),
            any_no_split: false,
        }
    }

    /// Counts one allocate call (ages of free blocks are measured in these).
    #[inline]
    pub fn tick(&mut self) {
        self.clock += 1;
    }

    pub fn clock(&self) -> u64 {
        self.clock
    }

    pub fn figures(&self) -> &Figures {
        &self.figures
    }

    pub fn reset_peaks(&mut self) {
        self.figures.reset_peaks();
    }

    /// Number of slots ever used (an upper bound of every slot id).
    pub fn slot_capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// The live block in `slot`.
    #[inline]
    pub fn block(&self, slot: u32) -> &Block {
        self.slab.get(slot)
    }

    /// The allocated, pending-free or quarantined block `r` refers to, if `r` is current.
    #[inline]
    pub fn resolve(&self, r: BlockRef) -> Option<&Block> {
        self.slab.resolve(r)
    }

    /// Segments by base address.
    pub fn segments(&self) -> &BTreeMap<u64, Segment> {
        &self.segments
    }

    #[inline]
    fn free_set(&self, stream: StreamId, lane: u32, pool: PoolKind) -> Option<&FreeSet> {
        // Most calls are for the stream of the previous mutable call.
        if let Some(f) = self.free.get(self.last_stream)
            && f.stream == stream
            && f.lane == lane
        {
            return Some(&f.pools[pool as usize]);
        }
        self.free
            .iter()
            .find(|f| f.stream == stream && f.lane == lane)
            .map(|f| &f.pools[pool as usize])
    }

    /// The free set of `pool` in the free sets at index `set` (a block's `set`).
    // Forced: on the cached hand-out/release path the plain hint left this an outlined
    // call (callgrind, `bench/README.md`: -55 Ir per cached 4 KiB pair with the three forced).
    #[expect(clippy::inline_always, reason = "measured on the hot path")]
    #[inline(always)]
    fn set_mut(&mut self, set: u32, pool: PoolKind) -> &mut FreeSet {
        &mut self.free[set as usize].pools[pool as usize]
    }

    fn key(&self, slot: u32) -> FreeKey {
        let b = self.slab.get(slot);
        FreeKey {
            size: b.size,
            addr: b.ptr,
            slot,
        }
    }

    /// Puts the free block in `slot` into its free set (cached free bytes follow).
    fn insert_free(&mut self, slot: u32) {
        let key = self.key(slot);
        let (set, pool) = {
            let b = self.slab.get_mut(slot);
            b.state = SlotState::Free { since: self.clock };
            (b.set, b.pool)
        };
        self.figures.cached_free_bytes += key.size;
        self.set_mut(set, pool).insert(key);
    }

    /// Takes the free block in `slot` out of its free set.
    fn remove_free(&mut self, slot: u32) {
        let key = self.key(slot);
        let b = self.slab.get(slot);
        debug_assert!(b.state.is_free());
        let (set, pool) = (b.set, b.pool);
        self.figures.cached_free_bytes -= key.size;
        let found = self.set_mut(set, pool).remove(key);
        debug_assert!(found, "free block missing from its free set");
    }

    #[inline]
    fn apply_split_change(
        &mut self,
        set: u32,
        pool: PoolKind,
        before: (i64, i64),
        after: (i64, i64),
    ) {
        if self.expandable && !self.free[set as usize].plain {
            return; // PyTorch keeps expandable segments out of `inactive_split`
        }
        self.figures.inactive_split.apply(pool, after.0 - before.0);
        self.figures
            .inactive_split_bytes
            .apply(pool, after.1 - before.1);
    }

    /// A new segment of `size` bytes at `ptr` for `stream`'s `pool` in memory-pool `lane`,
    /// as one free block.
    pub fn add_segment_in(
        &mut self,
        ptr: u64,
        size: u64,
        stream: StreamId,
        lane: u32,
        pool: PoolKind,
    ) -> u32 {
        let set = self.set_for(stream, lane);
        let slot = self.slab.insert(Block {
            generation: 0,
            ptr,
            size,
            stream,
            set,
            pool,
            state: SlotState::Free { since: self.clock },
            prev: None,
            next: None,
            segment: ptr,
        });
        self.segments.insert(
            ptr,
            Segment {
                size,
                stream,
                pool,
                lane,
                head: slot,
            },
        );
        let f = &mut self.figures;
        f.segment.increase(pool, 1);
        f.reserved_bytes.increase(pool, size);
        if size >= self.max_split_size {
            f.oversize_segments.increase(PoolKind::Large, 1);
        }
        self.insert_free(slot);
        slot
    }

    /// True when `slot` holds a free block that is a whole segment (releasable).
    pub fn is_free_segment(&self, slot: u32) -> bool {
        let b = self.slab.get(slot);
        b.state.is_free() && b.is_whole_segment()
    }

    /// Forgets the free whole-segment block in `slot` (its memory went back to the device).
    pub fn remove_segment(&mut self, slot: u32) -> Segment {
        debug_assert!(self.is_free_segment(slot));
        let base = self.slab.get(slot).ptr;
        self.remove_free(slot);
        self.slab.remove(slot);
        let seg = self
            .segments
            .remove(&base)
            .expect("a whole-segment block has a segment");
        let f = &mut self.figures;
        f.segment.decrease(seg.pool, 1);
        f.reserved_bytes.decrease(seg.pool, seg.size);
        if seg.size >= self.max_split_size {
            f.oversize_segments.decrease(PoolKind::Large, 1);
        }
        seg
    }

    /// The smallest free block of `stream`'s `pool` in `lane` with at least `size` bytes
    /// (lowest address among equals), without the oversize rules.
    #[inline]
    pub fn lower_bound_in(
        &self,
        stream: StreamId,
        lane: u32,
        pool: PoolKind,
        size: u64,
    ) -> Option<FreeKey> {
        self.free_set(stream, lane, pool)?.lower_bound(size)
    }

    /// Best fit for a rounded request of `size` bytes on `stream`'s `pool` in memory-pool
    /// `lane`, with the oversize rules.
    #[inline]
    pub fn best_fit_in(
        &self,
        stream: StreamId,
        lane: u32,
        pool: PoolKind,
        size: u64,
    ) -> Option<u32> {
        let key = if self.expandable {
            self.expandable_best_fit(stream, lane, pool, size)?
        } else {
            self.lower_bound_in(stream, lane, pool, size)?
        };
        let max_split = self.max_split_size;
        // An oversize block is not handed to a request that could be split for.
        if size < max_split && key.size >= max_split {
            return None;
        }
        // An oversize request does not take a block much larger than itself.
        if size >= max_split && key.size >= size.saturating_add(MAX_NON_SPLIT_ROUNDING) {
            return None;
        }
        Some(key.slot)
    }

    /// Hands out the free block in `slot` for a rounded request of `size` bytes
    /// (`requested` asked for), splitting off the rest when the split rules say so.
    ///
    /// The hot path of every cached allocation: the block is read once (no copy), its slot
    /// is written once, and the `inactive_split` change is computed from what is known
    /// (the block is free; a remainder is free and has a lower neighbour) instead of being
    /// read back from the slab.
    #[inline]
    pub fn hand_out(&mut self, slot: u32, size: u64, requested: u64) -> HandOut {
        let (max_split, clock) = (self.max_split_size, self.clock);
        let b = self.slab.get(slot);
        debug_assert!(b.state.is_free());
        let (bsize, ptr, stream, set, pool, next, segment) =
            (b.size, b.ptr, b.stream, b.set, b.pool, b.next, b.segment);
        let whole = b.is_whole_segment();
        let split = if self.any_no_split && self.free[set as usize].no_split {
            false
        } else if self.expandable && !self.free[set as usize].plain {
            expandable::should_split(bsize, size)
        } else {
            should_split(pool, bsize, size, max_split)
        };
        let rest = bsize - size;
        let remainder = if split {
            let r = self.slab.insert(Block {
                generation: 0,
                ptr: ptr + size,
                size: rest,
                stream,
                set,
                pool,
                state: SlotState::Free { since: clock },
                prev: Some(slot),
                next,
                segment,
            });
            if let Some(n) = next {
                self.slab.get_mut(n).prev = Some(r);
            }
            Some(r)
        } else {
            None
        };
        let h = self.slab.get_mut(slot);
        if let Some(r) = remainder {
            h.next = Some(r);
            h.size = size;
        }
        h.state = SlotState::Allocated {
            requested,
            handles: 1,
        };
        h.generation += 1;
        let out = HandOut {
            block: BlockRef {
                id: slot,
                generation: h.generation,
            },
            ptr,
            size: h.size,
        };
        let bytes = out.size;
        // The free bytes lose the hand-out; the remainder stays free.
        self.figures.cached_free_bytes -= bytes;
        // The next best fit is most likely on this block's stream and lane.
        self.last_stream = set as usize;
        // One free set serves the block and its remainder (same stream, lane and pool).
        let set_index = set;
        let set = self.set_mut(set, pool);
        let found = set.remove(FreeKey {
            size: bsize,
            addr: ptr,
            slot,
        });
        debug_assert!(found, "free block missing from its free set");
        if let Some(r) = remainder {
            set.insert(FreeKey {
                size: rest,
                addr: ptr + size,
                slot: r,
            });
        }
        // `inactive_split`: the free block counted unless it was a whole segment; the
        // remainder (free, with a lower neighbour) counts.
        let before = if whole { (0, 0) } else { (1, bsize as i64) };
        let after = if split { (1, rest as i64) } else { (0, 0) };
        self.apply_split_change(set_index, pool, before, after);
        let f = &mut self.figures;
        f.allocation.increase(pool, 1);
        f.allocated_bytes.increase(pool, bytes);
        f.active.increase(pool, 1);
        f.active_bytes.increase(pool, bytes);
        f.requested_bytes.increase(pool, requested);
        if bytes >= max_split {
            f.oversize_allocations.increase(PoolKind::Large, 1);
        }
        out
    }

    /// The pending-free or quarantined block in `slot` becomes free: merged with its free
    /// neighbours into its free set. Returns the slot of the merged block.
    ///
    /// Each neighbour is read once; the usual case (the freed block's only free neighbour
    /// is the remainder split off it at hand-out) is one absorb, one free-set remove and one
    /// insert, and the `inactive_split` change is computed from the keys, not read back.
    pub fn release(&mut self, slot: u32) -> u32 {
        let clock = self.clock;
        let b = self.slab.get_mut(slot);
        let requested = match b.state {
            SlotState::PendingFree { requested } => {
                self.figures.pending_free_bytes -= b.size;
                requested
            }
            SlotState::Quarantined { requested } => {
                self.figures.quarantined_bytes -= b.size;
                requested
            }
            _ => {
                debug_assert!(false, "release of a block that was not freed by the user");
                return slot;
            }
        };
        // Free, in no set yet; its generation changes (handles to it are stale now).
        b.state = SlotState::Free { since: clock };
        b.generation += 1;
        let (pool, size, prev, next, ptr, set) = (b.pool, b.size, b.prev, b.next, b.ptr, b.set);
        let f = &mut self.figures;
        f.active.decrease(pool, 1);
        f.active_bytes.decrease(pool, size);
        f.requested_bytes.decrease(pool, requested);
        f.cached_free_bytes += size;
        // A free neighbour is never a whole segment (this block is beside it), so each
        // counts (1, its size) in `inactive_split` before the merge.
        let free_key = |slab: &Slab, n: Option<u32>| {
            let n = n?;
            let nb = slab.get(n);
            nb.state.is_free().then_some(FreeKey {
                size: nb.size,
                addr: nb.ptr,
                slot: n,
            })
        };
        let (pk, nk) = (free_key(&self.slab, prev), free_key(&self.slab, next));
        let mut merged = FreeKey {
            size,
            addr: ptr,
            slot,
        };
        let mut before = (0, 0);
        // The merged block's neighbours: a whole segment when both are gone.
        let (mut low_prev, mut high_next) = (prev, next);
        if let Some(p) = pk {
            before = (1, p.size as i64);
            low_prev = self.slab.get(p.slot).prev;
            self.absorb(p.slot, slot);
            merged = FreeKey {
                size: size + p.size,
                addr: p.addr,
                slot: p.slot,
            };
        }
        if let Some(n) = nk {
            before = (before.0 + 1, before.1 + n.size as i64);
            high_next = self.slab.get(n.slot).next;
            self.absorb(merged.slot, n.slot);
            merged.size += n.size;
        }
        if pk.is_some() {
            // The lower neighbour's age restarts with the merge (as a newly freed block).
            self.slab.get_mut(merged.slot).state = SlotState::Free { since: clock };
        }
        // Neighbours share the block's stream, lane and pool: one free set for every change.
        let set_index = set;
        let set = self.set_mut(set, pool);
        if let Some(p) = pk {
            let found = set.remove(p);
            debug_assert!(found, "free neighbour missing from its free set");
        }
        if let Some(n) = nk {
            let found = set.remove(n);
            debug_assert!(found, "free neighbour missing from its free set");
        }
        set.insert(merged);
        let after = if low_prev.is_none() && high_next.is_none() {
            (0, 0)
        } else {
            (1, merged.size as i64)
        };
        self.apply_split_change(set_index, pool, before, after);
        merged.slot
    }

    /// `low` absorbs its upper neighbour `high`, whose slot is vacated.
    #[inline]
    fn absorb(&mut self, low: u32, high: u32) {
        let (hsize, hnext) = {
            let h = self.slab.get(high);
            (h.size, h.next)
        };
        let l = self.slab.get_mut(low);
        l.size += hsize;
        l.next = hnext;
        if let Some(n) = hnext {
            self.slab.get_mut(n).prev = Some(low);
        }
        self.slab.remove(high);
    }
}
