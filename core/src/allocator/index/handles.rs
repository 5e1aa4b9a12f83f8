//! Storage handles of allocated blocks and the user's free: the count of handles lives in
//! the block's slot, and the last handle dropped makes the block pending-free (the
//! device-facing layer decides when it becomes free).

use super::super::sizes::PoolKind;
use super::{Block, BlockIndex, BlockRef, SlotState};

impl BlockIndex {
    /// One more storage handle of the allocated block `r`; false when `r` is not current
    /// or not allocated.
    pub fn add_handle(&mut self, r: BlockRef) -> bool {
        match self.slab.resolve_mut(r) {
            Some(Block {
                state: SlotState::Allocated { handles, .. },
                ..
            }) => {
                *handles += 1;
                true
            }
            _ => false,
        }
    }

    /// Storage handles of the allocated block `r` (0 when not current or not allocated).
    pub fn handles(&self, r: BlockRef) -> u32 {
        match self.slab.resolve(r) {
            Some(Block {
                state: SlotState::Allocated { handles, .. },
                ..
            }) => *handles,
            _ => 0,
        }
    }

    /// Drops one storage handle of `r`; at the last one the user has freed the block: it
    /// becomes pending-free (the caller decides when it becomes free) and its slot is
    /// returned. `None` while handles remain or when `r` is not current.
    #[inline]
    pub fn drop_handle(&mut self, r: BlockRef) -> Option<u32> {
        let max_split = self.max_split_size;
        let b = self.slab.resolve_mut(r)?;
        let SlotState::Allocated { requested, handles } = &mut b.state else {
            return None;
        };
        if *handles > 1 {
            *handles -= 1;
            return None;
        }
        b.state = SlotState::PendingFree {
            requested: *requested,
        };
        let (pool, size) = (b.pool, b.size);
        let f = &mut self.figures;
        f.allocation.decrease(pool, 1);
        f.allocated_bytes.decrease(pool, size);
        if size >= max_split {
            f.oversize_allocations.decrease(PoolKind::Large, 1);
        }
        f.pending_free_bytes += size;
        Some(r.id)
    }

    /// The pending-free block in `slot` cannot be proven unused: quarantine it.
    pub fn quarantine(&mut self, slot: u32) {
        let b = self.slab.get_mut(slot);
        let SlotState::PendingFree { requested } = b.state else {
            debug_assert!(false, "only a pending-free block is quarantined");
            return;
        };
        b.state = SlotState::Quarantined { requested };
        let size = b.size;
        self.figures.pending_free_bytes -= size;
        self.figures.quarantined_bytes += size;
    }
}
