//! The index alone, on plain offsets: no device, no backend.

use proptest::prelude::*;

use super::*;
use crate::allocator::sizes::{LARGE_BUFFER, SMALL_BUFFER};

const MIB: u64 = 1 << 20;
const S: StreamId = StreamId(0);

fn index() -> BlockIndex {
    BlockIndex::new(u64::MAX)
}

/// Every invariant the index promises, checked by walking all segments.
fn check(ix: &BlockIndex) {
    let (mut cached, mut pending, mut quarantined, mut allocated, mut active) = (0, 0, 0, 0, 0);
    let (mut split_n, mut split_b, mut free_n) = (0u64, 0u64, 0usize);
    for (&base, seg) in ix.segments() {
        let mut end = base;
        let mut prev: Option<&Block> = None;
        for b in ix.segment_blocks(seg.head) {
            assert_eq!(b.ptr, end, "blocks tile the segment");
            assert_eq!(b.segment, base);
            end += b.size;
            match b.state {
                SlotState::Free { .. } => {
                    cached += b.size;
                    free_n += 1;
                    assert!(
                        prev.is_none_or(|p| !p.state.is_free()),
                        "two free neighbours were not merged"
                    );
                    assert!(
                        ix.lower_bound(b.stream, b.pool, b.size)
                            .is_some_and(|k| k.size == b.size)
                    );
                    if !b.is_whole_segment() {
                        split_n += 1;
                        split_b += b.size;
                    }
                }
                SlotState::Allocated { .. } => {
                    allocated += b.size;
                    active += b.size;
                }
                SlotState::PendingFree { .. } => {
                    pending += b.size;
                    active += b.size;
                }
                SlotState::Quarantined { .. } => {
                    quarantined += b.size;
                    active += b.size;
                }
                SlotState::Unmapped => assert!(
                    prev.is_none_or(|p| p.state != SlotState::Unmapped),
                    "two unmapped neighbours were not merged"
                ),
                SlotState::Vacant => panic!("vacant block in a segment"),
            }
            prev = Some(b);
        }
        assert_eq!(end, base + seg.size);
    }
    let f = ix.figures();
    assert_eq!(f.cached_free_bytes, cached);
    assert_eq!(f.pending_free_bytes, pending);
    assert_eq!(f.quarantined_bytes, quarantined);
    assert_eq!(f.allocated_bytes.current(), allocated);
    assert_eq!(f.active_bytes.current(), active);
    assert_eq!(f.inactive_split.current(), split_n);
    assert_eq!(f.inactive_split_bytes.current(), split_b);
    let in_sets: usize = [PoolKind::Small, PoolKind::Large]
        .iter()
        .map(|&p| ix.free_blocks(p).len())
        .sum();
    assert_eq!(in_sets, free_n, "free sets hold exactly the free blocks");
    assert_eq!(
        f.reserved_bytes.current(),
        allocated + cached + pending + quarantined
    );
}

#[test]
fn small_pool_splits_when_the_remainder_is_at_least_512_bytes() {
    let mut ix = index();
    let seg = ix.add_segment(0, SMALL_BUFFER, S, PoolKind::Small);
    let a = ix.hand_out(seg, 4096, 4000);
    assert_eq!((a.ptr, a.size), (0, 4096));
    let rest = ix.best_fit(S, PoolKind::Small, 512).unwrap();
    assert_eq!(ix.block(rest).ptr, 4096);
    assert_eq!(ix.block(rest).size, SMALL_BUFFER - 4096);
    // A remainder of exactly 512 bytes is split off; a smaller one never arises (sizes are
    // multiples of 512), so the whole rest minus 512 leaves one 512-byte block.
    let b = ix.hand_out(rest, SMALL_BUFFER - 4096 - 512, 1);
    assert_eq!(b.size, SMALL_BUFFER - 4096 - 512);
    assert!(ix.best_fit(S, PoolKind::Small, 512).is_some());
    check(&ix);
}

#[test]
fn large_pool_splits_only_for_a_remainder_above_1_mib() {
    let mut ix = index();
    let seg = ix.add_segment(0, LARGE_BUFFER, S, PoolKind::Large);
    // Remainder exactly 1 MiB: not split, the whole block is handed out.
    let a = ix.hand_out(seg, LARGE_BUFFER - MIB, 1);
    assert_eq!(a.size, LARGE_BUFFER);
    assert_eq!(ix.figures().inactive_split.current(), 0);
    check(&ix);
    let mut ix = index();
    let seg = ix.add_segment(0, LARGE_BUFFER, S, PoolKind::Large);
    let a = ix.hand_out(seg, LARGE_BUFFER - MIB - 512, 1);
    assert_eq!(a.size, LARGE_BUFFER - MIB - 512);
    assert_eq!(ix.figures().inactive_split_bytes.current(), MIB + 512);
    check(&ix);
}

#[test]
fn oversize_rules() {
    let mut ix = BlockIndex::new(8 * MIB);
    let seg = ix.add_segment(0, 40 * MIB, S, PoolKind::Large);
    // A request below max_split_size never takes an oversize block.
    assert_eq!(ix.best_fit(S, PoolKind::Large, 2 * MIB), None);
    // An oversize request takes no block 20 MiB or more larger than itself.
    assert_eq!(ix.best_fit(S, PoolKind::Large, 20 * MIB), None);
    assert_eq!(ix.best_fit(S, PoolKind::Large, 21 * MIB), Some(seg));
    // Oversize blocks are never split.
    let a = ix.hand_out(seg, 21 * MIB, 1);
    assert_eq!(a.size, 40 * MIB);
    assert_eq!(ix.figures().oversize_allocations.current(), 1);
    check(&ix);
}

#[test]
fn freeing_merges_with_both_free_neighbours_and_bumps_the_generation() {
    let mut ix = index();
    let seg = ix.add_segment(0, SMALL_BUFFER, S, PoolKind::Small);
    let a = ix.hand_out(seg, 4096, 1);
    let rest = ix.best_fit(S, PoolKind::Small, 4096).unwrap();
    let b = ix.hand_out(rest, 4096, 1);
    let rest = ix.best_fit(S, PoolKind::Small, 4096).unwrap();
    let c = ix.hand_out(rest, 4096, 1);
    for r in [a.block, c.block, b.block] {
        let slot = ix.drop_handle(r).unwrap();
        assert!(ix.resolve(r).is_some(), "pending-free keeps the generation");
        ix.release(slot);
        assert!(ix.resolve(r).is_none(), "a free block's ref is stale");
        check(&ix);
    }
    assert_eq!(ix.free_blocks(PoolKind::Small).len(), 1);
    assert!(ix.is_free_segment(seg));
    assert_eq!(ix.figures().inactive_split.current(), 0);
    ix.remove_segment(seg);
    assert!(ix.segments().is_empty());
    check(&ix);
}

#[test]
fn free_blocks_are_found_only_by_their_own_stream() {
    let mut ix = index();
    ix.add_segment(0, SMALL_BUFFER, StreamId(1), PoolKind::Small);
    assert_eq!(ix.best_fit(StreamId(2), PoolKind::Small, 512), None);
    assert_eq!(ix.best_fit(StreamId(1), PoolKind::Large, 512), None);
    assert!(ix.best_fit(StreamId(1), PoolKind::Small, 512).is_some());
}

#[test]
fn handles_count_and_the_last_one_frees() {
    let mut ix = index();
    let seg = ix.add_segment(0, SMALL_BUFFER, S, PoolKind::Small);
    let a = ix.hand_out(seg, 4096, 1);
    assert!(ix.add_handle(a.block));
    assert_eq!(ix.handles(a.block), 2);
    assert_eq!(ix.drop_handle(a.block), None);
    let slot = ix.drop_handle(a.block).unwrap();
    assert!(!ix.add_handle(a.block), "a freed block gets no new handle");
    ix.quarantine(slot);
    assert_eq!(ix.figures().quarantined_bytes, 4096);
    assert!(ix.best_fit(S, PoolKind::Small, SMALL_BUFFER).is_none());
    check(&ix);
    ix.release(slot);
    assert_eq!(ix.figures().quarantined_bytes, 0);
    assert!(ix.is_free_segment(seg));
    check(&ix);
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { stream: u64, size: u64 },
    Free { pick: usize, pending: bool },
    Release { pick: usize, quarantine: bool },
    DropSegment,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u64..2, prop_oneof![1u64..=2048, 2049u64..=60_000]).prop_map(|(stream, u)| Op::Alloc {
            stream,
            size: u * 512
        }),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(pick, pending)| Op::Free { pick, pending }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, quarantine)| Op::Release { pick, quarantine }),
        1 => Just(Op::DropSegment),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random hand-outs, frees (some via pending-free or quarantine) and segment releases
    /// keep every invariant, with `max_split_size` on and off.
    #[test]
    fn invariants_hold(ops in prop::collection::vec(op(), 1..200), oversize in any::<bool>()) {
        use crate::allocator::sizes::{pool_for, segment_size};
        let mut ix = BlockIndex::new(if oversize { 16 * MIB } else { u64::MAX });
        let mut live: Vec<BlockRef> = Vec::new();
        let mut freed: Vec<u32> = Vec::new();
        let mut next_addr = 0u64;
        for op in ops {
            match op {
                Op::Alloc { stream, size } => {
                    let pool = pool_for(size);
                    let slot = if let Some(s) = ix.best_fit(StreamId(stream), pool, size) {
                        s
                    } else {
                        let seg = segment_size(size);
                        let s = ix.add_segment(next_addr, seg, StreamId(stream), pool);
                        next_addr += seg + 4096;
                        s
                    };
                    let out = ix.hand_out(slot, size, size);
                    prop_assert!(out.size >= size);
                    live.push(out.block);
                }
                Op::Free { pick, pending } if !live.is_empty() => {
                    let r = live.swap_remove(pick % live.len());
                    let slot = ix.drop_handle(r).unwrap();
                    if pending {
                        freed.push(slot);
                    } else {
                        ix.release(slot);
                    }
                }
                Op::Release { pick, quarantine } if !freed.is_empty() => {
                    let i = pick % freed.len();
                    if quarantine && matches!(ix.block(freed[i]).state, SlotState::PendingFree { .. }) {
                        ix.quarantine(freed[i]);
                    } else {
                        ix.release(freed.swap_remove(i));
                    }
                }
                Op::DropSegment => {
                    let whole: Vec<u32> = ix.segments().values().map(|s| s.head).filter(|&h| ix.is_free_segment(h)).collect();
                    if let Some(&h) = whole.first() {
                        ix.remove_segment(h);
                    }
                }
                _ => {}
            }
            check(&ix);
        }
    }
}
