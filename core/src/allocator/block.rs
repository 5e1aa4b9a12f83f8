//! Blocks and the slab that holds them.
//!
//! A block lives in a slot of a `Vec`; a slot carries a generation that changes whenever the
//! block in it stops being the one a handle was given for, so a stale [`BlockRef`] is
//! detected instead of acting on a reused slot (docs/design.md §3 rule 5).
//!
//! # When the generation changes
//! The generation of a slot is bumped exactly when:
//! - a block is **handed out** (split or not): the new allocation gets a fresh generation;
//! - a block **enters the pool** (freed directly, or after its pending events completed or
//!   were erased);
//! - a block is **merged away** or its segment is released (the slot is vacated).
//!
//! It is *not* bumped when an allocated block becomes pending-free, so the mode-3 path can
//! still erase a work's use of a dropped tensor whose block waits on events. Hence a
//! [`BlockRef`] is valid from the hand-out until the block returns to the pool.
//!
//! Slots keep their `uses` and `events` vectors (cleared, not dropped) when reused, so the
//! steady state allocates no memory for them.

use crate::backend::Backend;
use crate::ids::{StreamId, WorkId};

use super::sizes::PoolKind;

/// A generation-checked reference to an allocator block (docs/design.md §3 rule 5).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct BlockRef {
    /// Slot index in the allocator's block slab.
    pub id: u32,
    /// Generation of the slot when the block was handed out.
    pub generation: u64,
}

/// Who holds a stream use of a block.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum UseOwner {
    /// `record_stream` by the user: only freeing the block ends it.
    User,
    /// A use recorded on behalf of one process-group work, erased by that work.
    Work(WorkId),
}

/// One use of a block by a stream other than its allocation stream.
pub(crate) struct StreamUse<S> {
    pub stream: S,
    pub id: StreamId,
    pub owner: UseOwner,
}

/// Where a block is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Status {
    /// In a pool, reusable by its stream.
    Free,
    /// Handed out; a [`super::Storage`] refers to it.
    Allocated,
    /// Freed by the user, waiting for events on the streams that used it.
    PendingFree,
}

/// A range of a segment.
pub(crate) struct Block<B: Backend> {
    pub live: bool,
    pub generation: u64,
    pub ptr: u64,
    pub size: u64,
    /// Bytes the user asked for (0 while free).
    pub requested: u64,
    pub stream: StreamId,
    pub pool: PoolKind,
    pub status: Status,
    pub prev: Option<u32>,
    pub next: Option<u32>,
    /// Base address of the segment the block belongs to.
    pub segment: u64,
    /// Other streams that used the block, each with its owner.
    pub uses: Vec<StreamUse<B::Stream>>,
    /// Events recorded at free time on the streams in `uses`, at most one per stream.
    pub events: Vec<(StreamId, B::Event)>,
    /// Malloc count when the block entered the pool (its GC age is measured from here).
    pub gc_base: u64,
    /// Free but parked in the allocator's bin of recently freed blocks instead of its pool,
    /// not merged with its neighbours yet (see `bins.rs`). Only meaningful while `Free`.
    pub parked: bool,
    /// In its pool's ordered set (maintained by `State::pool_insert`/`pool_remove`), so that
    /// a free block in transit, in neither pool nor bin, is never taken for a pooled one.
    pub pooled: bool,
}

impl<B: Backend> Block<B> {
    /// True when the block is a whole segment.
    pub fn is_whole_segment(&self) -> bool {
        self.prev.is_none() && self.next.is_none()
    }

    /// True when some owner still holds a use of stream `id`.
    pub fn has_use_of(&self, id: StreamId) -> bool {
        self.uses.iter().any(|u| u.id == id)
    }
}

/// The fields of a new block.
pub(crate) struct NewBlock {
    pub ptr: u64,
    pub size: u64,
    pub stream: StreamId,
    pub pool: PoolKind,
    pub segment: u64,
    pub prev: Option<u32>,
    pub next: Option<u32>,
}

/// Every block of the allocator, by slot.
pub(crate) struct Slab<B: Backend> {
    slots: Vec<Block<B>>,
    vacant: Vec<u32>,
}

impl<B: Backend> Slab<B> {
    pub fn new() -> Self {
        Slab {
            slots: Vec::new(),
            vacant: Vec::new(),
        }
    }

    /// Puts a new free block in a vacant slot (or a new one) and returns its slot.
    pub fn insert(&mut self, nb: &NewBlock) -> u32 {
        let slot = if let Some(s) = self.vacant.pop() {
            s
        } else {
            self.slots.push(Block {
                live: false,
                generation: 0,
                ptr: 0,
                size: 0,
                requested: 0,
                stream: StreamId(0),
                pool: PoolKind::Small,
                status: Status::Free,
                prev: None,
                next: None,
                segment: 0,
                uses: Vec::new(),
                events: Vec::new(),
                gc_base: 0,
                parked: false,
                pooled: false,
            });
            (self.slots.len() - 1) as u32
        };
        let b = &mut self.slots[slot as usize];
        b.live = true;
        b.generation += 1;
        b.ptr = nb.ptr;
        b.size = nb.size;
        b.requested = 0;
        b.stream = nb.stream;
        b.pool = nb.pool;
        b.status = Status::Free;
        b.prev = nb.prev;
        b.next = nb.next;
        b.segment = nb.segment;
        b.parked = false;
        b.pooled = false;
        debug_assert!(b.uses.is_empty() && b.events.is_empty());
        slot
    }

    /// Vacates a slot (merged away or segment released); bumps its generation.
    pub fn remove(&mut self, slot: u32) {
        let b = &mut self.slots[slot as usize];
        debug_assert!(b.live && b.events.is_empty());
        b.live = false;
        b.generation += 1;
        b.uses.clear();
        self.vacant.push(slot);
    }

    /// The live block in `slot`.
    pub fn get(&self, slot: u32) -> &Block<B> {
        let b = &self.slots[slot as usize];
        debug_assert!(b.live);
        b
    }

    /// The live block in `slot`, mutably.
    pub fn get_mut(&mut self, slot: u32) -> &mut Block<B> {
        let b = &mut self.slots[slot as usize];
        debug_assert!(b.live);
        b
    }

    /// The block `r` refers to, if it is live, of that generation, and allocated or
    /// pending-free (user input: never panics).
    pub fn resolve(&self, r: BlockRef) -> Option<&Block<B>> {
        self.slots
            .get(r.id as usize)
            .filter(|b| b.live && b.generation == r.generation && b.status != Status::Free)
    }
}
