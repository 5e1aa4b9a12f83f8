//! PyTorch's expandable-segment rules on offsets: best fit by expandable size
//! (`get_free_block`) and no garbage-collection victims (`garbage_collect_cached_blocks`
//! skips expandable blocks).

use super::*;

const MIB: u64 = 1 << 20;
const PAGE: u64 = 20 * MIB;
const BASE: u64 = 1 << 40;
const S: StreamId = StreamId(0);

fn index() -> BlockIndex {
    let mut ix = BlockIndex::new(u64::MAX);
    ix.set_expandable(true);
    ix
}

/// `[0,20) F | [20,22) A | [22,40) F | [40,200) U`: the 18 MiB block is the smallest that
/// fits 16 MiB, but it can grow into 160 MiB of unmapped space; the 20 MiB block cannot.
fn two_candidates() -> BlockIndex {
    let mut ix = index();
    let head = ix.add_expandable_segment(BASE, 10 * PAGE, S, PoolKind::Large);
    let run = ix.map_front(head, 2 * PAGE);
    let first = ix.hand_out(run, 20 * MIB, 20 * MIB);
    let rest = ix.best_fit(S, PoolKind::Large, 2 * MIB).unwrap();
    assert_eq!(ix.block(rest).ptr, BASE + 20 * MIB);
    ix.hand_out(rest, 2 * MIB, 2 * MIB);
    let slot = ix.drop_handle(first.block).unwrap();
    ix.release(slot);
    ix
}

#[test]
fn expandable_size_counts_the_unmapped_block_after() {
    let ix = two_candidates();
    let sizes: Vec<(u64, u64)> = ix
        .free_blocks(PoolKind::Large)
        .iter()
        .map(|k| (k.addr - BASE, ix.expandable_size(k.slot)))
        .collect();
    assert_eq!(sizes, vec![(22 * MIB, 178 * MIB), (0, 20 * MIB)]);
}

#[test]
fn best_fit_passes_over_a_block_that_could_grow() {
    let ix = two_candidates();
    let smallest = ix.lower_bound(S, PoolKind::Large, 16 * MIB).unwrap();
    assert_eq!(
        smallest.addr,
        BASE + 22 * MIB,
        "plain best fit: the 18 MiB block"
    );
    let slot = ix.best_fit(S, PoolKind::Large, 16 * MIB).unwrap();
    assert_eq!(
        ix.block(slot).ptr,
        BASE,
        "PyTorch: the 20 MiB block, whose expandable size (20) is below 178"
    );
    // A request only the 20 MiB block fits has nothing to walk.
    let slot = ix.best_fit(S, PoolKind::Large, 19 * MIB).unwrap();
    assert_eq!(ix.block(slot).ptr, BASE);
}

#[test]
fn the_walk_stops_at_a_block_that_grows_as_much() {
    // `[0,20) F | [20,22) A | [22,40) F | [40,42) A | [42,60) F | [60,200) U`: the two
    // 18 MiB blocks come in address order; the second grows into 140 MiB (158 > 18), so the
    // walk never leaves the first.
    let mut ix = index();
    let head = ix.add_expandable_segment(BASE, 10 * PAGE, S, PoolKind::Large);
    ix.map_front(head, 3 * PAGE);
    let mut handed = Vec::new();
    for size in [20 * MIB, 2 * MIB, 18 * MIB, 2 * MIB] {
        let slot = ix.best_fit(S, PoolKind::Large, size).unwrap();
        handed.push(ix.hand_out(slot, size, size));
    }
    for i in [0, 2] {
        let slot = ix.drop_handle(handed[i].block).unwrap();
        ix.release(slot);
    }
    let free: Vec<(u64, u64, u64)> = ix
        .free_blocks(PoolKind::Large)
        .iter()
        .map(|k| (k.addr - BASE, k.size, ix.expandable_size(k.slot)))
        .collect();
    assert_eq!(
        free,
        vec![
            (22 * MIB, 18 * MIB, 18 * MIB),
            (42 * MIB, 18 * MIB, 158 * MIB),
            (0, 20 * MIB, 20 * MIB)
        ]
    );
    let slot = ix.best_fit(S, PoolKind::Large, 16 * MIB).unwrap();
    assert_eq!(ix.block(slot).ptr, BASE + 22 * MIB);
}

#[test]
fn garbage_collection_releases_no_expandable_block() {
    // A fully mapped, fully free expandable segment is one unsplit block (no neighbours),
    // which PyTorch's GC counts for the average age but never releases.
    let mut ix = index();
    let head = ix.add_expandable_segment(BASE, 2 * PAGE, S, PoolKind::Large);
    let whole = ix.map_front(head, 2 * PAGE);
    assert!(ix.is_free_segment(whole));
    for _ in 0..10 {
        ix.tick();
    }
    assert_eq!(ix.gc_victims(2 * PAGE), Vec::<u32>::new());
}
