//! Read-only walks over the free sets and segments, for the cold paths: statistics,
//! snapshots, the out-of-memory report and victim selection (`victims.rs`).

use crate::ids::StreamId;

use super::super::fragmentation::Fragmentation;
use super::super::sizes::PoolKind;
use super::{Block, BlockIndex, FreeKey, FreeSet, StreamFree};

impl BlockIndex {
    /// Free blocks of `stream`'s `pool` smaller than `size`, largest first.
    pub fn below(&self, stream: StreamId, lane: u32, pool: PoolKind, size: u64) -> Vec<FreeKey> {
        self.free_set(stream, lane, pool)
            .map(|f| f.below(size).collect())
            .unwrap_or_default()
    }

    /// Every free block of `pool` that the allocator-wide release and garbage collection
    /// may return (the default lane's and released pools', never a live pool's: PyTorch's
    /// `release_cached_blocks({0, 0})`), in (stream, size, address) order.
    pub fn free_blocks(&self, pool: PoolKind) -> Vec<FreeKey> {
        let mut sets: Vec<&StreamFree> = self
            .free
            .iter()
            .filter(|f| self.releasable(f.lane))
            .collect();
        sets.sort_by_key(|f| f.stream);
        sets.iter()
            .flat_map(|f| f.pools[pool as usize].iter())
            .collect()
    }

    /// The largest free block of either pool and any stream.
    pub fn largest_free_block(&self) -> u64 {
        self.free
            .iter()
            .flat_map(|f| f.pools.iter())
            .filter_map(FreeSet::last)
            .map(|k| k.size)
            .max()
            .unwrap_or(0)
    }

    /// Fragmentation of the free blocks per pool. O(free blocks).
    pub fn fragmentation(&self) -> Fragmentation {
        let mut frag = Fragmentation::default();
        for f in &self.free {
            for pool in [PoolKind::Small, PoolKind::Large] {
                for k in f.pools[pool as usize].iter() {
                    frag.add(pool == PoolKind::Small, k.size);
                }
            }
        }
        frag
    }

    /// Blocks of the segment whose lowest block is `head`, in address order.
    pub fn segment_blocks(&self, head: u32) -> impl Iterator<Item = &Block> + '_ {
        let mut cursor = Some(head);
        std::iter::from_fn(move || {
            let b = self.slab.get(cursor?);
            cursor = b.next;
            Some(b)
        })
    }
}
