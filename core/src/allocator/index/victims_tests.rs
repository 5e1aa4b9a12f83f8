//! The victim lists (`victims.rs`) and the growth step on plain offsets: random indexes
//! built from hand-outs, frees, extra segments and clock ticks, each list checked against
//! what its rule promises, computed independently by walking the segments.

use proptest::prelude::*;

use super::victims::OversizeRelease;
use super::*;
use crate::allocator::sizes::{pool_for, segment_size};

const MIB: u64 = 1 << 20;

#[derive(Clone, Debug)]
enum Op {
    Alloc { stream: u64, size: u64 },
    Free { pick: usize },
    Segment { stream: u64, mib: u64 },
    Tick { n: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..2, prop_oneof![1u64..=2048, 2049u64..=80_000])
            .prop_map(|(stream, u)| Op::Alloc { stream, size: u * 512 }),
        4 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        2 => (0u64..2, 1u64..=40).prop_map(|(stream, m)| Op::Segment { stream, mib: 2 * m }),
        2 => any::<u8>().prop_map(|n| Op::Tick { n }),
    ]
}

/// An index after `ops` (large-pool oversize rules at `max_split`).
fn build(ops: &[Op], max_split: u64) -> BlockIndex {
    let mut ix = BlockIndex::new(max_split);
    let mut live: Vec<BlockRef> = Vec::new();
    let mut next_addr = 0u64;
    let mut new_segment = |ix: &mut BlockIndex, size: u64, stream: u64, pool: PoolKind| {
        let s = ix.add_segment(next_addr, size, StreamId(stream), pool);
        next_addr += size + 4096;
        s
    };
    for op in ops {
        match *op {
            Op::Alloc { stream, size } => {
                ix.tick();
                let pool = pool_for(size);
                let slot = match ix.best_fit(StreamId(stream), pool, size) {
                    Some(s) => s,
                    None => new_segment(&mut ix, segment_size(size), stream, pool),
                };
                live.push(ix.hand_out(slot, size, size).block);
            }
            Op::Free { pick } if !live.is_empty() => {
                let r = live.swap_remove(pick % live.len());
                if let Some(slot) = ix.drop_handle(r) {
                    ix.release(slot);
                }
            }
            Op::Segment { stream, mib } => {
                new_segment(&mut ix, mib * MIB, stream, PoolKind::Large);
            }
            Op::Tick { n } => (0..n).for_each(|_| ix.tick()),
            Op::Free { .. } => {}
        }
    }
    ix
}

/// Every free whole segment, found by walking the segments (not the free sets):
/// `(slot, stream, pool, size, since)`.
fn whole_free(ix: &BlockIndex) -> Vec<(u32, StreamId, PoolKind, u64, u64)> {
    ix.segments()
        .values()
        .filter_map(|seg| {
            let b = ix.block(seg.head);
            match b.state {
                SlotState::Free { since } if b.is_whole_segment() => {
                    Some((seg.head, b.stream, b.pool, b.size, since))
                }
                _ => None,
            }
        })
        .collect()
}

/// Every free block of `stream`'s `pool`, found by walking the segments.
fn free_of(ix: &BlockIndex, stream: StreamId, pool: PoolKind) -> Vec<(u64, u64, u32)> {
    let mut out = Vec::new();
    for seg in ix.segments().values() {
        let mut cursor = Some(seg.head);
        while let Some(slot) = cursor {
            let b = ix.block(slot);
            if b.state.is_free() && b.stream == stream && b.pool == pool {
                out.push((b.size, b.ptr, slot));
            }
            cursor = b.next;
        }
    }
    out.sort_unstable();
    out
}

#[test]
fn an_oversize_segment_of_exactly_max_split_is_released() {
    let (s, large) = (StreamId(0), PoolKind::Large);
    let mut ix = BlockIndex::new(8 * MIB);
    let a = ix.add_segment(0, 8 * MIB, s, large);
    let b = ix.add_segment(1 << 30, 10 * MIB, s, large);
    // 30 MiB: nothing free is that large; both oversize segments go, and are not enough.
    let all = ix.oversize_victims(s, large, 30 * MIB, 8 * MIB);
    assert_eq!(
        all,
        OversizeRelease {
            slots: vec![b, a],
            enough: false
        }
    );
    // 12 MiB: the 10 MiB segment is not enough alone; the 8 MiB one (exactly
    // max_split_size) completes it.
    let two = ix.oversize_victims(s, large, 12 * MIB, 8 * MIB);
    assert_eq!(
        two,
        OversizeRelease {
            slots: vec![b, a],
            enough: true
        }
    );
    // 9 MiB: the smallest free segment of at least 9 MiB goes alone.
    let one = ix.oversize_victims(s, large, 9 * MIB, 8 * MIB);
    assert_eq!(
        one,
        OversizeRelease {
            slots: vec![b],
            enough: true
        }
    );
}

/// A garbage-collection candidate: `(slot, age, size)`.
type Candidate = (u32, u64, u64);

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// `free_segments` is exactly the free whole segments of the pool, in (stream, size,
    /// address) order.
    #[test]
    fn free_segments_are_the_whole_free_segments(ops in prop::collection::vec(op(), 1..120)) {
        let ix = build(&ops, u64::MAX);
        for pool in [PoolKind::Small, PoolKind::Large] {
            let mut want: Vec<(StreamId, u64, u64, u32)> = whole_free(&ix)
                .into_iter()
                .filter(|w| w.2 == pool)
                .map(|w| (w.1, w.3, ix.block(w.0).ptr, w.0))
                .collect();
            want.sort_unstable();
            let want: Vec<u32> = want.into_iter().map(|w| w.3).collect();
            prop_assert_eq!(ix.free_segments(pool), want);
        }
    }

    /// PyTorch's `release_available_cached_blocks`: the smallest free block of at least
    /// `max(size, max_split)` when it is a whole segment, else oversize whole segments below
    /// that, largest first, stopping as soon as their bytes reach it.
    #[test]
    fn oversize_victims_follow_release_available(
        ops in prop::collection::vec(op(), 1..120),
        stream in 0u64..2,
        req_mib in 1u64..=80,
        split_mib in 2u64..=24,
    ) {
        let max_split = split_mib * MIB;
        let ix = build(&ops, max_split);
        let (stream, pool, size) = (StreamId(stream), PoolKind::Large, req_mib * MIB);
        let key = size.max(max_split);
        let got = ix.oversize_victims(stream, pool, size, max_split);
        let free = free_of(&ix, stream, pool);
        let whole: Vec<(u32, u64)> = whole_free(&ix)
            .into_iter()
            .filter(|w| w.1 == stream && w.2 == pool)
            .map(|w| (w.0, w.3))
            .collect();
        let is_whole = |slot: u32| whole.iter().any(|w| w.0 == slot);
        if let Some(&(_, _, slot)) = free.iter().find(|f| f.0 >= key)
            && is_whole(slot)
        {
            prop_assert_eq!(got.slots, vec![slot]);
            prop_assert!(got.enough);
            return Ok(());
        }
        let sizes: Vec<u64> = got.slots.iter().map(|&s| ix.block(s).size).collect();
        for (&slot, &bytes) in got.slots.iter().zip(&sizes) {
            prop_assert!(is_whole(slot), "only free whole segments are released");
            prop_assert!(bytes >= max_split && bytes < key, "oversize, below the key");
        }
        prop_assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "largest first");
        let total: u64 = sizes.iter().sum();
        prop_assert_eq!(got.enough, total >= key);
        if let Some(last) = sizes.last() {
            prop_assert!(total - last < key, "no segment released past the need");
        }
        let mut candidates: Vec<u64> = whole
            .iter()
            .filter(|w| w.1 >= max_split && w.1 < key)
            .map(|w| w.1)
            .collect();
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        prop_assert_eq!(&sizes[..], &candidates[..sizes.len()], "the largest candidates, in order");
        if !got.enough {
            let mut all: Vec<u32> = whole
                .iter()
                .filter(|w| w.1 >= max_split && w.1 < key)
                .map(|w| w.0)
                .collect();
            let mut slots = got.slots.clone();
            all.sort_unstable();
            slots.sort_unstable();
            prop_assert_eq!(slots, all, "not enough: every candidate goes");
        }
    }

    /// PyTorch's `garbage_collect_cached_blocks`: free whole large segments only, each
    /// once, every one older than every segment left, and enough bytes unless all went.
    #[test]
    fn gc_victims_are_the_oldest_until_the_target(
        ops in prop::collection::vec(op(), 1..120),
        target_mib in 0u64..200,
    ) {
        let ix = build(&ops, u64::MAX);
        let target = target_mib * MIB;
        let now = ix.clock();
        let candidates: Vec<Candidate> = whole_free(&ix)
            .into_iter()
            .filter(|w| w.2 == PoolKind::Large)
            .map(|w| (w.0, now - w.4, w.3))
            .collect();
        let got = ix.gc_victims(target);
        let mut unique = got.clone();
        unique.sort_unstable();
        unique.dedup();
        prop_assert_eq!(unique.len(), got.len(), "each victim once");
        let (taken, left): (Vec<&Candidate>, Vec<&Candidate>) =
            candidates.iter().partition(|c| got.contains(&c.0));
        prop_assert_eq!(taken.len(), got.len(), "victims are candidates");
        let reclaimed: u64 = taken.iter().map(|c| c.2).sum();
        if target == 0 {
            prop_assert!(got.is_empty());
        } else if left.is_empty() {
            prop_assert_eq!(got.len(), candidates.len());
        } else {
            prop_assert!(reclaimed >= target, "segments left but the target not reached");
        }
        let youngest_taken = taken.iter().map(|c| c.1).min();
        let oldest_left = left.iter().map(|c| c.1).max();
        if let (Some(t), Some(l)) = (youngest_taken, oldest_left) {
            prop_assert!(t > l, "oldest first: taken age {} <= left age {}", t, l);
        }
    }
}

const PAGE: u64 = 20 * MIB;
const BASE: u64 = 1 << 40;

#[derive(Clone, Debug)]
enum VmOp {
    Grow { mib: u64 },
    Free { pick: usize },
    Unmap { pick: usize },
    Tick { n: u8 },
}

fn vm_op() -> impl Strategy<Value = VmOp> {
    prop_oneof![
        4 => (1u64..=70).prop_map(|mib| VmOp::Grow { mib }),
        3 => any::<usize>().prop_map(|pick| VmOp::Free { pick }),
        1 => any::<usize>().prop_map(|pick| VmOp::Unmap { pick }),
        1 => any::<u8>().prop_map(|n| VmOp::Tick { n }),
    ]
}

/// A growth as the device layer runs it: the run `find_expandable` picks, then
/// `growth_step` until a free block serves the request. `None` when no run fits.
fn grow(ix: &mut BlockIndex, head: u32, size: u64) -> Option<u32> {
    let mut cand = ix.find_expandable(head, size)?;
    for _ in 0..64 {
        match ix.growth_step(cand, size, PAGE) {
            Growth::Ready(slot) => return Some(slot),
            Growth::Map { target, ptr, bytes } => {
                assert_eq!(ix.block(target).ptr, ptr);
                assert!(bytes > 0 && bytes % PAGE == 0, "whole pages");
                assert_eq!(ix.block(target).state, SlotState::Unmapped);
                cand = ix.map_front(target, bytes);
            }
            Growth::Stuck => return None,
        }
    }
    None
}

/// An expandable index of one 16-page segment after `ops`; returns it and the head slot.
fn build_vm(ops: &[VmOp]) -> BlockIndex {
    let mut ix = BlockIndex::new(u64::MAX);
    ix.set_expandable(true);
    let head = ix.add_expandable_segment(BASE, 16 * PAGE, StreamId(0), PoolKind::Large);
    let mut live: Vec<BlockRef> = Vec::new();
    for op in ops {
        match *op {
            VmOp::Grow { mib } => {
                ix.tick();
                let size = mib * MIB;
                let found = ix.find_expandable(head, size).is_some();
                let slot = ix.best_fit(StreamId(0), PoolKind::Large, size).or_else(|| {
                    let grown = grow(&mut ix, head, size);
                    assert_eq!(
                        grown.is_some(),
                        found,
                        "a run that fits grows to the request"
                    );
                    grown
                });
                if let Some(s) = slot {
                    live.push(ix.hand_out(s, size, size).block);
                }
            }
            VmOp::Free { pick } if !live.is_empty() => {
                let r = live.swap_remove(pick % live.len());
                if let Some(slot) = ix.drop_handle(r) {
                    ix.release(slot);
                }
            }
            VmOp::Unmap { pick } => {
                let work = ix.unmap_work([(BASE, PAGE)], &[], false);
                if !work.is_empty() {
                    let w = work[pick % work.len()];
                    ix.unmap_range(w.slot, w.start, w.len);
                }
            }
            VmOp::Tick { n } => (0..n).for_each(|_| ix.tick()),
            VmOp::Free { .. } => {}
        }
    }
    ix
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The unmap work list: one item per free block holding whole pages (spared blocks
    /// left out), each exactly its whole pages, oldest first when asked.
    #[test]
    fn unmap_work_is_every_whole_free_page(
        ops in prop::collection::vec(vm_op(), 1..80),
        spare_pick in any::<usize>(),
        oldest_first in any::<bool>(),
    ) {
        let ix = build_vm(&ops);
        let head = ix.segments()[&BASE].head;
        let holding: Vec<u32> = ix
            .free_slots(head)
            .into_iter()
            .filter(|&s| ix.inner_pages(s, PAGE).is_some())
            .collect();
        let spare: Vec<u32> = holding
            .get(spare_pick % holding.len().max(1))
            .copied()
            .into_iter()
            .collect();
        let work = ix.unmap_work([(BASE, PAGE), (BASE + 1, PAGE)], &spare, oldest_first);
        let mut slots: Vec<u32> = work.iter().map(|w| w.slot).collect();
        let mut want: Vec<u32> = holding.iter().copied().filter(|s| !spare.contains(s)).collect();
        slots.sort_unstable();
        want.sort_unstable();
        prop_assert_eq!(slots, want, "every free block with a whole page but the spared");
        for w in &work {
            let b = ix.block(w.slot);
            prop_assert!(b.state.is_free());
            prop_assert_eq!(w.base, BASE);
            prop_assert!(w.len > 0 && w.len % PAGE == 0 && (w.start - BASE) % PAGE == 0);
            prop_assert!(w.start >= b.ptr && w.start + w.len <= b.ptr + b.size);
            prop_assert!(w.start - b.ptr < PAGE && b.ptr + b.size - (w.start + w.len) < PAGE,
                "all the whole pages of the block");
            prop_assert_eq!(w.since, match b.state { SlotState::Free { since } => since, _ => 0 });
        }
        if oldest_first {
            prop_assert!(work.windows(2).all(|p| p[0].since <= p[1].since));
        } else {
            prop_assert!(work.windows(2).all(|p| p[0].start < p[1].start), "address order");
        }
    }

    /// The trim's spared run: the free blocks of the run the growth would extend, in
    /// address order from its first block, with their bytes.
    #[test]
    fn spared_run_is_the_free_part_of_the_growth_run(
        ops in prop::collection::vec(vm_op(), 1..80),
        mib in 1u64..=200,
    ) {
        let ix = build_vm(&ops);
        let head = ix.segments()[&BASE].head;
        let size = mib * MIB;
        let Some(first) = ix.find_expandable(head, size) else {
            return Ok(());
        };
        let (spare, free_bytes) = ix.spared_run(first, size);
        // Walk the run by hand: free and unmapped blocks from `first` until `size` bytes.
        let (mut want, mut bytes, mut cursor) = (Vec::new(), 0u64, Some(first));
        while bytes < size && let Some(k) = cursor {
            let b = ix.block(k);
            prop_assert!(b.state.is_free() || b.state == SlotState::Unmapped, "a run of free and unmapped blocks");
            if b.state.is_free() {
                want.push(k);
            }
            bytes += b.size;
            cursor = b.next;
        }
        prop_assert!(bytes >= size, "the run holds the request");
        prop_assert_eq!(&spare, &want);
        prop_assert_eq!(free_bytes, spare.iter().map(|&s| ix.block(s).size).sum::<u64>());
    }
}
