//! The lazy merge: the free-set half of PyTorch's eager merge-on-free, deferred so that a
//! block freed and asked for again at once costs no free-set operation.
//!
//! # What is deferred, and why it is exact
//! A cached allocate/free pair of one size splits a block `M` into the hand-out `B` and its
//! remainder `N` and, at the free, merges `B` and `N` back into `M`. In the free set that is
//! four operations (remove `M`, insert `N`; remove `N`, insert `M`), the largest part of
//! the pair. Here [`BlockIndex::release`] still does the whole merge on the slab (sizes,
//! links, states, generations, the vacated slot, every figure: all exactly as eager), but
//! when the freed block's only free neighbour is its upper one it leaves the free set
//! holding `N`'s key where the eager free set holds `M`'s: a [`Parked`] merge. Then:
//! - best fit ([`BlockIndex::lower_bound`], [`BlockIndex::best_fit`]) answers for the eager
//!   free set without changing anything ([`Parked::lower_bound`]: `M` unless a block of the
//!   set other than `N` comes first in (size, address) order);
//! - a hand-out of `M` ([`BlockIndex::hand_out`]) removes `M` and inserts the remainder in
//!   the eager world; the lazy set only has to swap `N` for the remainder, which is nothing
//!   at all when the remainder is `N` again (same size, address and slot: the slab reuses
//!   the slot just vacated), the cached pair's case;
//! - every other use of the free sets first [settles](BlockIndex::settle) (does the two
//!   deferred operations). The content of a free set does not depend on the order of its
//!   operations, so what any query sees afterwards is what eager merging gives.
//!
//! At most one merge is parked, and only by the free of the last block handed out (the
//! one a workload that reuses a size at once frees; any other free merges eagerly, so a
//! workload without such repeats pays one comparison per free). The slab never differs from eager merging, so block reads
//! (`block`, `resolve`, `segment_blocks`), handles and generations need no settling.
//!
//! # Rule for new index code
//! Anything that reads or changes a free set other than through the functions named above
//! calls [`BlockIndex::settle`] first (`insert_free`, `remove_free` and the slow queries
//! do; the queries take `&mut self` for that reason).

use crate::ids::StreamId;

use super::super::sizes::PoolKind;
use super::{BlockIndex, FreeKey, FreeSet};

/// A merge done on the slab whose two free-set operations are deferred.
#[derive(Clone, Copy, Debug)]
pub(super) struct Parked {
    pub stream: StreamId,
    pub pool: PoolKind,
    /// The freed block's upper neighbour, still in the free set (eager merging removed it).
    pub stale: FreeKey,
    /// The merged block, which eager merging put in the free set instead of `stale`.
    pub merged: FreeKey,
}

impl Parked {
    /// The smallest block of at least `size` bytes (lowest address among equals) of the
    /// eager free set, `set` being the parked merge's lazy one: `merged` instead of `stale`.
    #[inline]
    pub fn lower_bound(&self, set: &FreeSet, size: u64) -> Option<FreeKey> {
        // The usual case of a repeat: the parked neighbour is the set's only block.
        let mut other = if set.len() == 1 {
            None
        } else {
            set.lower_bound(size)
        };
        if other == Some(self.stale) {
            // `stale` is not in the eager set: the next block after it is the candidate.
            other = set.after(self.stale);
        }
        let m = self.merged;
        if m.size < size {
            return other;
        }
        match other {
            Some(k) if (k.size, k.addr) < (m.size, m.addr) => Some(k),
            _ => Some(m),
        }
    }
}

impl BlockIndex {
    /// Performs the parked merge's deferred free-set operations, if one is parked. After
    /// it, every free set holds exactly what eager merging gives.
    #[inline]
    pub fn settle(&mut self) {
        if self.parked.is_some() {
            self.settle_parked();
        }
    }

    /// The eager lower bound for a request the parked merge may serve (the freed block's
    /// size on its stream and pool); `None` after settling for any other request.
    #[inline(never)]
    pub(super) fn parked_best_fit(
        &mut self,
        stream: StreamId,
        pool: PoolKind,
        size: u64,
    ) -> Option<FreeKey> {
        let p = self.parked?;
        if p.stream == stream && p.pool == pool && p.merged.size - p.stale.size == size {
            let set = self.free_set(stream, pool)?;
            let key = p.lower_bound(set, size);
            if key == Some(p.merged) {
                return key;
            }
        }
        self.settle();
        None
    }

    /// Before a hand-out of `slot`: the parked neighbour's key if `slot` holds the parked
    /// merge (the parked state ends), else settles and gives `None`.
    #[inline(never)]
    pub(super) fn unpark_for(&mut self, slot: u32) -> Option<FreeKey> {
        match self.parked {
            Some(p) if p.merged.slot == slot => {
                self.parked = None;
                Some(p.stale)
            }
            _ => {
                self.settle();
                None
            }
        }
    }

    /// The hand-out of a parked merge: the eager set loses the merged block and gains the
    /// remainder `rest`; the lazy one holds `stale` instead of the merged block, so it
    /// swaps `stale` for `rest`, which is nothing when they are the same block.
    #[inline]
    pub(super) fn swap_parked(
        &mut self,
        stream: StreamId,
        pool: PoolKind,
        stale: FreeKey,
        rest: Option<FreeKey>,
    ) {
        if rest == Some(stale) {
            return;
        }
        let set = self.free_set_mut(stream, pool);
        let found = set.remove(stale);
        debug_assert!(found, "parked neighbour missing from its free set");
        if let Some(k) = rest {
            set.insert(k);
        }
    }

    #[inline(never)]
    fn settle_parked(&mut self) {
        let Some(p) = self.parked.take() else {
            return;
        };
        let set = self.free_set_mut(p.stream, p.pool);
        let found = set.remove(p.stale);
        debug_assert!(found, "parked neighbour missing from its free set");
        set.insert(p.merged);
    }

    /// True while a merge is parked (tests check that the fast path is taken).
    #[cfg(test)]
    pub fn is_parked(&self) -> bool {
        self.parked.is_some()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{BlockRef, BlockState, HandOut};
    use super::*;
    use crate::allocator::sizes::{pool_for, segment_size};

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_freed_block_asked_for_again_costs_no_free_set_operation() {
        let mut lazy = BlockIndex::new(u64::MAX);
        let mut eager = BlockIndex::eager(u64::MAX);
        for ix in [&mut lazy, &mut eager] {
            ix.add_segment(0, 2 * MIB, StreamId(0), PoolKind::Small);
        }
        for round in 0..3 {
            let mut outs = Vec::new();
            for ix in [&mut lazy, &mut eager] {
                let slot = ix.best_fit(StreamId(0), PoolKind::Small, 4096).unwrap();
                let out = ix.hand_out(slot, 4096, 4000);
                outs.push((out.ptr, out.size, out.block));
                let s = ix.drop_handle(out.block).unwrap();
                ix.release(s);
            }
            assert_eq!(outs[0], outs[1], "round {round}");
            assert!(lazy.is_parked(), "the merge back into 2 MiB is parked");
            assert!(!eager.is_parked());
            assert_same(&mut lazy, &mut eager);
        }
        // A query settles: the free set then holds the merged 2 MiB block.
        assert_eq!(lazy.free_blocks(PoolKind::Small).len(), 1);
        assert!(!lazy.is_parked());
    }

    #[test]
    fn a_smaller_block_elsewhere_wins_over_the_parked_merge() {
        // Two segments: A (2 MiB) holds the parked merge; B's free 8 KiB tail is a better
        // fit for 4 KiB than A's 2 MiB in the eager world.
        let mut lazy = BlockIndex::new(u64::MAX);
        let mut eager = BlockIndex::eager(u64::MAX);
        let mut refs = Vec::new();
        for ix in [&mut lazy, &mut eager] {
            let a = ix.add_segment(0, 2 * MIB, StreamId(0), PoolKind::Small);
            let b = ix.add_segment(4 * MIB, 16 * 1024, StreamId(0), PoolKind::Small);
            let keep = ix.hand_out(b, 8192, 8192);
            let x = ix.hand_out(a, 4096, 4096);
            let s = ix.drop_handle(x.block).unwrap();
            ix.release(s);
            refs.push(keep.block);
        }
        assert!(lazy.is_parked());
        let want = eager.best_fit(StreamId(0), PoolKind::Small, 4096);
        assert_eq!(lazy.best_fit(StreamId(0), PoolKind::Small, 4096), want);
        assert_eq!(lazy.block(want.unwrap()).ptr, 4 * MIB + 8192);
        for ix in [&mut lazy, &mut eager] {
            let slot = ix.best_fit(StreamId(0), PoolKind::Small, 4096).unwrap();
            ix.hand_out(slot, 4096, 4096);
        }
        assert!(!lazy.is_parked(), "another hand-out settles");
        assert_same(&mut lazy, &mut eager);
    }

    #[test]
    fn a_block_between_the_parked_neighbour_and_the_merge_wins() {
        // A's parked merge: N = 2 MiB - 4 KiB stands for M = 2 MiB. B's free tail
        // (2 MiB - 2 KiB) is larger than N but smaller than M: eager best fit takes it.
        let mut lazy = BlockIndex::new(u64::MAX);
        let mut eager = BlockIndex::eager(u64::MAX);
        for ix in [&mut lazy, &mut eager] {
            let a = ix.add_segment(0, 2 * MIB, StreamId(0), PoolKind::Small);
            let b = ix.add_segment(4 * MIB, 2 * MIB, StreamId(0), PoolKind::Small);
            ix.hand_out(b, 2048, 2048);
            let x = ix.hand_out(a, 4096, 4096);
            let s = ix.drop_handle(x.block).unwrap();
            ix.release(s);
        }
        assert!(lazy.is_parked());
        let got = lazy.best_fit(StreamId(0), PoolKind::Small, 4096);
        assert_eq!(got, eager.best_fit(StreamId(0), PoolKind::Small, 4096));
        assert_eq!(lazy.block(got.unwrap()).ptr, 4 * MIB + 2048);
        assert_same(&mut lazy, &mut eager);
    }

    /// Every observable part of two indexes is equal (the lazy one settles for the free
    /// sets, so call it where settling is part of the sequence under test).
    fn assert_same(lazy: &mut BlockIndex, eager: &mut BlockIndex) {
        assert_eq!(
            format!("{:?}", lazy.figures()),
            format!("{:?}", eager.figures())
        );
        assert_eq!(lazy.slot_capacity(), eager.slot_capacity());
        let blocks = |ix: &BlockIndex| -> Vec<String> {
            ix.segments()
                .values()
                .flat_map(|s| ix.segment_blocks(s.head))
                .map(|b| format!("{b:?}"))
                .collect()
        };
        assert_eq!(blocks(lazy), blocks(eager));
        for pool in [PoolKind::Small, PoolKind::Large] {
            assert_eq!(lazy.free_blocks(pool), eager.free_blocks(pool));
        }
        assert_eq!(lazy.largest_free_block(), eager.largest_free_block());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Alloc {
            stream: u64,
            size: u64,
        },
        /// Free the live block `pick` and, with `again`, allocate its size at once.
        Free {
            pick: usize,
            again: bool,
        },
        Pending {
            pick: usize,
        },
        ReleasePending {
            pick: usize,
        },
        DropSegment,
        Query,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0u64..2, prop_oneof![1u64..=64, 65u64..=2048, 2049u64..=60_000])
                .prop_map(|(stream, u)| Op::Alloc { stream, size: u * 512 }),
            5 => (any::<usize>(), any::<bool>()).prop_map(|(pick, again)| Op::Free { pick, again }),
            1 => any::<usize>().prop_map(|pick| Op::Pending { pick }),
            1 => any::<usize>().prop_map(|pick| Op::ReleasePending { pick }),
            1 => Just(Op::DropSegment),
            1 => Just(Op::Query),
        ]
    }

    /// One allocation on both indexes; the same answer from both.
    fn alloc(ixs: &mut [BlockIndex; 2], stream: StreamId, size: u64, next: &mut u64) -> HandOut {
        let pool = pool_for(size);
        let mut outs = Vec::new();
        for ix in ixs.iter_mut() {
            ix.tick();
            let slot = if let Some(s) = ix.best_fit(stream, pool, size) {
                s
            } else {
                ix.add_segment(*next, segment_size(size), stream, pool)
            };
            outs.push(ix.hand_out(slot, size, size - 7));
        }
        *next += segment_size(size) + 4096;
        assert_eq!(
            (outs[0].ptr, outs[0].size, outs[0].block),
            (outs[1].ptr, outs[1].size, outs[1].block)
        );
        outs[0]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// The lazy index and an eager twin, in lockstep on random sequences (frees often
        /// followed by the same size again, the fast path's case, on two streams, with
        /// pending-free blocks and segment releases), give the same hand-outs and best fits,
        /// and equal blocks and figures after every step; free sets at queries.
        #[test]
        fn the_lazy_merge_is_invisible(ops in prop::collection::vec(op(), 1..200), oversize in any::<bool>()) {
            let max_split = if oversize { 16 * MIB } else { u64::MAX };
            let mut ixs = [BlockIndex::new(max_split), BlockIndex::eager(max_split)];
            let mut live: Vec<(BlockRef, u64, u64)> = Vec::new();
            let mut pending: Vec<u32> = Vec::new();
            let mut next = 0u64;
            for op in ops {
                match op {
                    Op::Alloc { stream, size } => {
                        let out = alloc(&mut ixs, StreamId(stream), size, &mut next);
                        live.push((out.block, size, stream));
                    }
                    Op::Free { pick, again } if !live.is_empty() => {
                        let (r, size, stream) = live.swap_remove(pick % live.len());
                        for ix in &mut ixs {
                            let s = ix.drop_handle(r).unwrap();
                            ix.release(s);
                        }
                        if again {
                            let out = alloc(&mut ixs, StreamId(stream), size, &mut next);
                            live.push((out.block, size, stream));
                        }
                    }
                    Op::Pending { pick } if !live.is_empty() => {
                        let (r, _, _) = live.swap_remove(pick % live.len());
                        let slots: Vec<u32> =
                            ixs.iter_mut().map(|ix| ix.drop_handle(r).unwrap()).collect();
                        prop_assert_eq!(slots[0], slots[1]);
                        pending.push(slots[0]);
                    }
                    Op::ReleasePending { pick } if !pending.is_empty() => {
                        let s = pending.swap_remove(pick % pending.len());
                        for ix in &mut ixs {
                            let pending_free = matches!(ix.block(s).state, BlockState::PendingFree { .. });
                            prop_assert!(pending_free);
                            ix.release(s);
                        }
                    }
                    Op::DropSegment => {
                        for ix in &mut ixs {
                            let whole: Vec<u32> = ix
                                .segments()
                                .values()
                                .map(|s| s.head)
                                .filter(|&h| ix.is_free_segment(h))
                                .collect();
                            if let Some(&h) = whole.first() {
                                ix.remove_segment(h);
                            }
                        }
                    }
                    Op::Query => {
                        let [lazy, eager] = &mut ixs;
                        assert_same(lazy, eager);
                    }
                    _ => {}
                }
                let mut probes = vec![512, 4096, 1 << 20, 3 << 20, 24 << 20];
                if let Some(p) = ixs[0].parked {
                    probes.extend([p.stale.size, p.stale.size + 512, p.merged.size - p.stale.size]);
                }
                for size in probes {
                    for stream in [StreamId(0), StreamId(1)] {
                        let pool = pool_for(size);
                        prop_assert_eq!(
                            ixs[0].best_fit(stream, pool, size),
                            ixs[1].best_fit(stream, pool, size)
                        );
                    }
                }
                prop_assert_eq!(
                    format!("{:?}", ixs[0].figures()),
                    format!("{:?}", ixs[1].figures())
                );
            }
            let [lazy, eager] = &mut ixs;
            assert_same(lazy, eager);
        }
    }
}
