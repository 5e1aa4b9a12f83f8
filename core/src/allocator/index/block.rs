//! Blocks as the index sees them: an address range of a segment, its neighbours, and one
//! state enum, held in slots of a slab.
//!
//! # Generations
//! A slot's generation changes exactly when the block in it stops being the one a handle
//! was given for, so a stale [`BlockRef`] is detected instead of acting on a reused slot:
//! - a block is **handed out** (split or not): the allocation gets a fresh generation;
//! - a block **becomes free** (freed directly, or after its pending events completed, were
//!   erased, or its quarantine ended);
//! - a block is **merged away** or its segment is released (the slot is vacated).
//!
//! It is *not* bumped when an allocated block becomes pending-free, so the mode-3 path can
//! still erase a work's use of a dropped tensor whose block waits on events. Hence a
//! [`BlockRef`] is valid from the hand-out until the block becomes free.

use crate::ids::StreamId;

use super::super::sizes::PoolKind;

/// A generation-checked reference to an allocator block (docs/design.md §3 rule 5).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct BlockRef {
    /// Slot index in the allocator's block slab.
    pub id: u32,
    /// Generation of the slot when the block was handed out.
    pub generation: u64,
}

/// Where a block is in its life. One enum, so no impossible combination of flags exists.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SlotState {
    /// The slot holds no block.
    Vacant,
    /// In its (stream, pool) free set; `since` is the index clock (number of allocate
    /// calls) when it became free, the origin of its garbage-collection age.
    Free { since: u64 },
    /// Handed out; `handles` storage handles refer to it.
    Allocated { requested: u64, handles: u32 },
    /// Freed by the user, waiting for events on the streams that used it.
    PendingFree { requested: u64 },
    /// Freed by the user, but a query of its events failed: it cannot be proven unused, so
    /// it is never reused until a synchronize of its streams succeeds.
    Quarantined { requested: u64 },
    /// Addresses of an expandable segment with no physical pages behind them (never in a
    /// free set; merges only with unmapped neighbours; see `index/expandable.rs`).
    Unmapped,
}

impl SlotState {
    /// Bytes the user asked for (0 unless allocated, pending-free or quarantined).
    pub fn requested(self) -> u64 {
        match self {
            SlotState::Allocated { requested, .. }
            | SlotState::PendingFree { requested }
            | SlotState::Quarantined { requested } => requested,
            SlotState::Vacant | SlotState::Free { .. } | SlotState::Unmapped => 0,
        }
    }

    pub fn is_free(self) -> bool {
        matches!(self, SlotState::Free { .. })
    }
}

/// A range of a segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Block {
    pub generation: u64,
    pub ptr: u64,
    pub size: u64,
    pub stream: StreamId,
    /// Index of the block's free sets in the index's `free` (its stream and memory-pool
    /// lane; never changes): the hot path reaches them without a lookup.
    pub set: u32,
    pub pool: PoolKind,
    pub state: SlotState,
    pub prev: Option<u32>,
    pub next: Option<u32>,
    /// Base address of the segment the block belongs to.
    pub segment: u64,
}

impl Block {
    /// True when the block is a whole segment.
    pub fn is_whole_segment(&self) -> bool {
        self.prev.is_none() && self.next.is_none()
    }
}

/// Every block, by slot.
pub(crate) struct Slab {
    slots: Vec<Block>,
    vacant: Vec<u32>,
}

impl Slab {
    pub fn new() -> Self {
        Slab {
            slots: Vec::new(),
            vacant: Vec::new(),
        }
    }

    /// Number of slots (vacant ones included).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Puts `block` (its generation is set here) in a vacant slot or a new one.
    #[inline]
    pub fn insert(&mut self, mut block: Block) -> u32 {
        if let Some(slot) = self.vacant.pop() {
            let b = &mut self.slots[slot as usize];
            block.generation = b.generation + 1;
            *b = block;
            slot
        } else {
            block.generation = 1;
            self.slots.push(block);
            (self.slots.len() - 1) as u32
        }
    }

    /// Vacates `slot`, bumping its generation.
    #[inline]
    pub fn remove(&mut self, slot: u32) {
        let b = &mut self.slots[slot as usize];
        debug_assert!(b.state.is_free() || b.state == SlotState::Unmapped);
        b.state = SlotState::Vacant;
        b.generation += 1;
        self.vacant.push(slot);
    }

    #[inline]
    pub fn get(&self, slot: u32) -> &Block {
        let b = &self.slots[slot as usize];
        debug_assert!(b.state != SlotState::Vacant);
        b
    }

    #[inline]
    pub fn get_mut(&mut self, slot: u32) -> &mut Block {
        let b = &mut self.slots[slot as usize];
        debug_assert!(b.state != SlotState::Vacant);
        b
    }

    /// The block `r` refers to, if its slot holds that generation and it is not free
    /// (user input: never panics).
    #[inline]
    pub fn resolve(&self, r: BlockRef) -> Option<&Block> {
        self.slots.get(r.id as usize).filter(|b| {
            b.generation == r.generation
                && !matches!(
                    b.state,
                    SlotState::Vacant | SlotState::Free { .. } | SlotState::Unmapped
                )
        })
    }

    #[inline]
    pub fn resolve_mut(&mut self, r: BlockRef) -> Option<&mut Block> {
        self.slots.get_mut(r.id as usize).filter(|b| {
            b.generation == r.generation
                && !matches!(
                    b.state,
                    SlotState::Vacant | SlotState::Free { .. } | SlotState::Unmapped
                )
        })
    }
}
