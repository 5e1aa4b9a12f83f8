//! A pool of free blocks: an ordered set keyed by (stream, size, address), as PyTorch's
//! `BlockPool`, so best fit is one `lower_bound` and a free block is only found by its own
//! stream.

use std::collections::BTreeSet;

use crate::ids::StreamId;

/// Ordering key of a free block. Field order is the sort order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) struct PoolKey {
    pub stream: StreamId,
    pub size: u64,
    pub addr: u64,
    pub slot: u32,
}

/// Free blocks of one pool (small or large).
#[derive(Default)]
pub(crate) struct BlockPool {
    set: BTreeSet<PoolKey>,
}

impl BlockPool {
    pub fn insert(&mut self, key: PoolKey) {
        let fresh = self.set.insert(key);
        debug_assert!(fresh, "block inserted twice into a pool");
    }

    pub fn remove(&mut self, key: &PoolKey) {
        let found = self.set.remove(key);
        debug_assert!(found, "block missing from its pool");
    }

    /// The smallest free block of `stream` with at least `size` bytes (lowest address among
    /// equals).
    pub fn lower_bound(&self, stream: StreamId, size: u64) -> Option<PoolKey> {
        let from = PoolKey {
            stream,
            size,
            addr: 0,
            slot: 0,
        };
        self.set
            .range(from..)
            .next()
            .copied()
            .filter(|k| k.stream == stream)
    }

    /// Free blocks of `stream` with at least `size` bytes, best fit first.
    pub fn from(&self, stream: StreamId, size: u64) -> impl Iterator<Item = PoolKey> + '_ {
        let from = PoolKey {
            stream,
            size,
            addr: 0,
            slot: 0,
        };
        self.set
            .range(from..)
            .take_while(move |k| k.stream == stream)
            .copied()
    }

    /// Free blocks of `stream` smaller than `size`, largest first.
    pub fn below(&self, stream: StreamId, size: u64) -> impl Iterator<Item = PoolKey> + '_ {
        let lo = PoolKey {
            stream,
            size: 0,
            addr: 0,
            slot: 0,
        };
        let hi = PoolKey {
            stream,
            size,
            addr: 0,
            slot: 0,
        };
        self.set.range(lo..hi).rev().copied()
    }

    /// Every free block, in key order.
    pub fn iter(&self) -> impl Iterator<Item = PoolKey> + '_ {
        self.set.iter().copied()
    }
}
