//! Which blocks the device layer releases, unmaps or spares: pure functions of the index,
//! so the policy is tested on offsets (`victims_tests.rs`) and the device layer only
//! carries the lists out, in the order given.
//!
//! - [`BlockIndex::free_segments`]: every free whole segment of a pool (PyTorch's
//!   `release_cached_blocks`).
//! - [`BlockIndex::oversize_victims`]: cached oversize segments of one stream to release
//!   for a request (PyTorch's `release_available_cached_blocks`).
//! - [`BlockIndex::gc_victims`]: unsplit large cached segments, oldest first, until an
//!   excess is reclaimed (PyTorch's `garbage_collect_cached_blocks`); none with expandable
//!   segments, as PyTorch.
//! - [`BlockIndex::spared_run`]: the free blocks of the run an expandable growth extends,
//!   which the trim before that growth leaves mapped.
//! - [`BlockIndex::unmap_work`]: the whole free pages of expandable segments, in the order
//!   they are unmapped.

use crate::ids::StreamId;

use super::super::sizes::PoolKind;
use super::{BlockIndex, SlotState};

/// The oversize segments to release for one request, and whether they are enough.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OversizeRelease {
    /// Slots of free whole segments, in release order.
    pub slots: Vec<u32>,
    /// True when the released bytes reach the request (PyTorch's return value).
    pub enough: bool,
}

/// One range of whole free pages to unmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UnmapItem {
    /// When the block became free (index clock): the age order key.
    pub since: u64,
    /// Base address of the expandable segment.
    pub base: u64,
    /// Slot of the free block holding the pages.
    pub slot: u32,
    /// First page address.
    pub start: u64,
    /// Bytes of whole pages.
    pub len: u64,
}

impl BlockIndex {
    /// When the free block in `slot` became free (`now` for a block that is not free).
    fn free_since(&self, slot: u32, now: u64) -> u64 {
        match self.block(slot).state {
            SlotState::Free { since } => since,
            _ => now,
        }
    }

    /// Slots of every free whole-segment block of `pool`, in (stream, size, address) order.
    pub fn free_segments(&self, pool: PoolKind) -> Vec<u32> {
        self.free_blocks(pool)
            .into_iter()
            .filter(|k| self.is_free_segment(k.slot))
            .map(|k| k.slot)
            .collect()
    }

    /// PyTorch's `release_available_cached_blocks` for a request of `size` bytes on
    /// `stream`'s `pool` with `max_split` as `max_split_size`: one free segment of at
    /// least `max(size, max_split)` bytes (the smallest, lowest address), or else the
    /// oversize free segments below that, largest first, until their bytes reach it.
    pub fn oversize_victims(
        &self,
        stream: StreamId,
        pool: PoolKind,
        size: u64,
        max_split: u64,
    ) -> OversizeRelease {
        self.oversize_victims_in(stream, 0, pool, size, max_split)
    }

    /// [`BlockIndex::oversize_victims`] within memory-pool `lane`.
    pub fn oversize_victims_in(
        &self,
        stream: StreamId,
        lane: u32,
        pool: PoolKind,
        size: u64,
        max_split: u64,
    ) -> OversizeRelease {
        let key_size = size.max(max_split);
        if let Some(k) = self.lower_bound_in(stream, lane, pool, key_size)
            && self.is_free_segment(k.slot)
        {
            return OversizeRelease {
                slots: vec![k.slot],
                enough: true,
            };
        }
        let mut released = 0u64;
        let mut slots = Vec::new();
        for k in self
            .below(stream, lane, pool, key_size)
            .into_iter()
            .take_while(|k| k.size >= max_split)
            .filter(|k| self.is_free_segment(k.slot))
        {
            if released >= key_size {
                break;
            }
            slots.push(k.slot);
            released += k.size;
        }
        OversizeRelease {
            slots,
            enough: released >= key_size,
        }
    }

    /// PyTorch's `garbage_collect_cached_blocks`: the free whole segments of the large pool
    /// to release, in order, until at least `target` bytes are reclaimed (all of them if
    /// they hold less). Each round releases every candidate at least as old (in allocate
    /// calls since it became free) as the candidates' average age.
    ///
    /// With expandable segments nothing is released: PyTorch's loop skips every block of an
    /// expandable segment (`!block->expandable_segment_`; `release_block` asserts it), and
    /// with `expandable_segments:True` every memreuse segment is one. Its free pages are
    /// unmapped only by `empty_cache` and the out-of-memory chain, as in PyTorch.
    pub fn gc_victims(&self, target: u64) -> Vec<u32> {
        if self.expandable {
            return Vec::new();
        }
        let now = self.clock();
        let mut candidates: Vec<(u32, u64, u64)> = self
            .free_blocks(PoolKind::Large)
            .into_iter()
            .filter(|k| self.is_free_segment(k.slot))
            .map(|k| (k.slot, now - self.free_since(k.slot, now), k.size))
            .collect();
        let mut total_age: u64 = candidates.iter().map(|c| c.1).sum();
        let mut reclaimed = 0u64;
        let mut freed_one = true;
        let mut victims = Vec::new();
        while reclaimed < target && freed_one && !candidates.is_empty() {
            let threshold_age = total_age as f64 / candidates.len() as f64;
            freed_one = false;
            let mut i = 0;
            while i < candidates.len() {
                let (slot, age, size) = candidates[i];
                if age as f64 >= threshold_age {
                    victims.push(slot);
                    reclaimed += size;
                    total_age -= age;
                    freed_one = true;
                    candidates.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }
        victims
    }

    /// The free blocks of the run starting at `first` (free or unmapped blocks in address
    /// order) that a growth to `size` bytes would use, and their bytes: the trim before the
    /// growth leaves them mapped (unmapping them only to map them again saves nothing).
    pub fn spared_run(&self, first: u32, size: u64) -> (Vec<u32>, u64) {
        let mut spare = Vec::new();
        let mut free_in_run = 0u64;
        let (mut bytes, mut cursor) = (0u64, Some(first));
        while bytes < size
            && let Some(k) = cursor
        {
            let b = self.block(k);
            if b.state.is_free() {
                spare.push(k);
                free_in_run += b.size;
            } else if b.state != SlotState::Unmapped {
                break;
            }
            bytes += b.size;
            cursor = b.next;
        }
        (spare, free_in_run)
    }

    /// The whole free pages of the expandable segments `segments` (`(base, page size)`, in
    /// the order given), one item per free block holding at least one whole page, leaving
    /// the blocks in `spare` alone; oldest free block first when `oldest_first` (a stable
    /// sort, so equal ages keep segment and address order).
    pub fn unmap_work(
        &self,
        segments: impl IntoIterator<Item = (u64, u64)>,
        spare: &[u32],
        oldest_first: bool,
    ) -> Vec<UnmapItem> {
        let mut work = Vec::new();
        for (base, page) in segments {
            let Some(seg) = self.segments().get(&base) else {
                continue;
            };
            for slot in self.free_slots(seg.head) {
                if spare.contains(&slot) {
                    continue;
                }
                if let Some((start, len)) = self.inner_pages(slot, page) {
                    work.push(UnmapItem {
                        since: self.free_since(slot, 0),
                        base,
                        slot,
                        start,
                        len,
                    });
                }
            }
        }
        if oldest_first {
            work.sort_by_key(|w| w.since);
        }
        work
    }
}
