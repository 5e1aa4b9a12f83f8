//! Memory-pool lanes: the free blocks of each memory pool (`allocator/pool/`) are kept in
//! free sets of their own, keyed by (stream, lane), so best fit, split and merge never mix
//! a pool's blocks with another pool's or with ordinary allocations (lane 0). A block and
//! its segment never change lane; merges stay within one segment, hence one lane.
//!
//! What differs per lane: a `no_split` lane never splits a block (PyTorch's
//! `no_split_pools` in `should_split`), and a live lane's free segments are left out of the
//! allocator-wide release and garbage collection (PyTorch releases only the default pools
//! and freeable private pools in `release_cached_blocks({0, 0})`).

#[cfg(test)]
use super::super::sizes::PoolKind;
#[cfg(test)]
use super::FreeKey;
use super::{BlockIndex, SlotState};
use crate::ids::StreamId;

/// What the index knows of one lane.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LaneFlags {
    /// Never split a block of this lane.
    pub no_split: bool,
    /// The lane's segments are never expandable.
    pub plain: bool,
    /// The pool was released: its free segments go back with the allocator-wide release.
    pub released: bool,
}

/// The memory figures of one lane, walked from its segments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LaneFigures {
    pub segments: u64,
    pub reserved: u64,
    pub allocated: u64,
    pub allocations: u64,
    pub active: u64,
    pub requested: u64,
    pub cached_free: u64,
}

impl BlockIndex {
    /// Declares `lane` (a new memory pool) with its split rule; `plain` when its segments
    /// are never expandable (a pool with a segment source), so its blocks split and count
    /// `inactive_split` by the ordinary rules even under `expandable_segments:True`.
    pub fn add_lane(&mut self, lane: u32, no_split: bool, plain: bool) {
        let i = lane as usize;
        if self.lanes.len() <= i {
            self.lanes.resize(i + 1, LaneFlags::default());
        }
        self.lanes[i] = LaneFlags {
            no_split,
            plain,
            released: false,
        };
        self.any_no_split |= no_split;
    }

    /// `lane`'s pool was released: from now on its free segments are releasable.
    pub fn release_lane(&mut self, lane: u32) {
        if let Some(f) = self.lanes.get_mut(lane as usize) {
            f.released = true;
        }
    }

    /// The index in `free` of the free sets of `stream` in `lane`, made on first use.
    pub(super) fn set_for(&mut self, stream: StreamId, lane: u32) -> u32 {
        if let Some(i) = self
            .free
            .iter()
            .position(|f| f.stream == stream && f.lane == lane)
        {
            return i as u32;
        }
        let flags = self.lanes.get(lane as usize).copied().unwrap_or_default();
        self.free.push(super::StreamFree {
            stream,
            lane,
            no_split: flags.no_split,
            plain: flags.plain,
            pools: [super::FreeSet::new(), super::FreeSet::new()],
        });
        (self.free.len() - 1) as u32
    }

    /// True when the allocator-wide release may return `lane`'s free segments.
    pub(crate) fn releasable(&self, lane: u32) -> bool {
        lane == 0 || self.lanes.get(lane as usize).is_none_or(|f| f.released)
    }

    /// Best fit in the default lane.
    #[cfg(test)]
    pub fn best_fit(&self, stream: StreamId, pool: PoolKind, size: u64) -> Option<u32> {
        self.best_fit_in(stream, 0, pool, size)
    }

    /// A new expandable segment in the default lane.
    #[cfg(test)]
    pub fn add_expandable_segment(
        &mut self,
        base: u64,
        size: u64,
        stream: StreamId,
        pool: PoolKind,
    ) -> u32 {
        self.add_expandable_segment_in(base, size, stream, 0, pool)
    }

    /// A new segment in the default lane.
    #[cfg(test)]
    pub fn add_segment(&mut self, ptr: u64, size: u64, stream: StreamId, pool: PoolKind) -> u32 {
        self.add_segment_in(ptr, size, stream, 0, pool)
    }

    /// The smallest free block of `stream`'s `pool` in the default lane with at least
    /// `size` bytes.
    #[cfg(test)]
    pub fn lower_bound(&self, stream: StreamId, pool: PoolKind, size: u64) -> Option<FreeKey> {
        self.lower_bound_in(stream, 0, pool, size)
    }

    /// Slots of the free whole-segment blocks of `lane`, both pools, in (stream, pool,
    /// size, address) order: what the pool's own `empty_cache` releases.
    pub fn free_segments_in(&self, lane: u32) -> Vec<u32> {
        let mut sets: Vec<_> = self.free.iter().filter(|f| f.lane == lane).collect();
        sets.sort_by_key(|f| f.stream);
        sets.iter()
            .flat_map(|f| f.pools.iter().flat_map(super::FreeSet::iter))
            .filter(|k| self.is_free_segment(k.slot))
            .map(|k| k.slot)
            .collect()
    }

    /// The memory figures of `lane`: an O(blocks of the lane's segments) walk.
    pub fn lane_figures(&self, lane: u32) -> LaneFigures {
        let mut f = LaneFigures::default();
        for seg in self.segments.values().filter(|s| s.lane == lane) {
            f.segments += 1;
            for b in self.segment_blocks(seg.head) {
                // Reserved is mapped memory: an expandable segment's unmapped range is not.
                if !matches!(b.state, SlotState::Unmapped | SlotState::Vacant) {
                    f.reserved += b.size;
                }
                match b.state {
                    SlotState::Allocated { requested, .. } => {
                        f.allocated += b.size;
                        f.allocations += 1;
                        f.active += b.size;
                        f.requested += requested;
                    }
                    SlotState::PendingFree { requested } | SlotState::Quarantined { requested } => {
                        f.active += b.size;
                        f.requested += requested;
                    }
                    SlotState::Free { .. } => f.cached_free += b.size,
                    SlotState::Vacant | SlotState::Unmapped => {}
                }
            }
        }
        f
    }
}
