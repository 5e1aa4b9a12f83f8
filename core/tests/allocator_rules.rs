//! docs/design.md §3 rules 1-6, one test (or a few) per rule, on the manual backend.

mod common;

use common::{MIB, block_state, check_identities, setup, setup_with};
use memreuse_core::allocator::{BlockState, SegmentType};
use memreuse_core::{EraseOutcome, WorkId};

#[test]
fn rule1_free_block_is_reused_only_by_its_stream() {
    let (backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let p = a.ptr();
    drop(a);
    let b = alloc.allocate(1000, &s1).unwrap();
    assert_ne!(b.ptr(), p, "another stream must not get s0's free block");
    assert_eq!(
        backend.counters().raw_mallocs,
        2,
        "s1 needed its own segment"
    );
    let c = alloc.allocate(1000, &s0).unwrap();
    assert_eq!(c.ptr(), p, "the owning stream reuses its block");
    check_identities(&alloc.stats());
}

#[test]
fn rule2_record_stream_on_own_stream_is_a_no_op() {
    let (backend, alloc, [s0, ..]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let p = a.ptr();
    alloc.record_stream(&a, &s0);
    drop(a);
    let st = alloc.stats();
    assert_eq!(st.record_stream_calls, 1);
    assert_eq!(st.reuse_events_created, 0);
    assert_eq!(st.pending_free_bytes, 0);
    assert_eq!(backend.counters().events_recorded, 0);
    assert_eq!(
        alloc.allocate(1000, &s0).unwrap().ptr(),
        p,
        "reusable at once"
    );
}

#[test]
fn rule2_record_stream_on_other_stream_delays_reuse_until_it_advances() {
    let (backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let p = a.ptr();
    backend.enqueue_work(&s1).unwrap(); // s1 uses the tensor
    alloc.record_stream(&a, &s1);
    alloc.record_stream_for_work(&a, &s1, WorkId(7));
    drop(a);
    assert_eq!(alloc.stats().record_stream_calls, 2);
    assert_eq!(
        block_state(&alloc.snapshot(), p.addr()),
        Some(BlockState::ActivePendingFree)
    );
    let b = alloc.allocate(1000, &s0).unwrap();
    assert_ne!(b.ptr(), p, "a pending block must not be handed out");
    backend.advance(&s1);
    let c = alloc.allocate(1000, &s0).unwrap();
    assert_eq!(
        c.ptr(),
        p,
        "after s1 advanced, malloc processes events and reuses it"
    );
    check_identities(&alloc.stats());
}

#[test]
fn rule3_one_event_per_used_stream_and_events_are_pooled() {
    let (backend, alloc, [s0, s1, s2]) = setup();
    for round in 1..=2u64 {
        let a = alloc.allocate(4096, &s0).unwrap();
        let p = a.ptr();
        alloc.record_stream(&a, &s1);
        alloc.record_stream_for_work(&a, &s1, WorkId(1)); // same stream, another owner
        alloc.record_stream(&a, &s2);
        drop(a);
        let st = alloc.stats();
        assert_eq!(
            st.reuse_events_created,
            2 * round,
            "one event per used stream"
        );
        assert_eq!(st.pending_free_bytes, 4096);
        assert_eq!(st.allocated_bytes.aggregate.current, 0);
        assert_eq!(st.active_bytes.aggregate.current, 4096);
        check_identities(&st);
        backend.advance(&s1);
        alloc.process_events().unwrap();
        assert_eq!(
            block_state(&alloc.snapshot(), p.addr()),
            Some(BlockState::ActivePendingFree),
            "s2's event is still pending"
        );
        backend.advance(&s2);
        alloc.process_events().unwrap();
        let snap = alloc.snapshot();
        assert_eq!(block_state(&snap, p.addr()), Some(BlockState::Inactive));
        assert_eq!(snap.segments.len(), 1);
        assert_eq!(
            snap.segments[0].blocks.len(),
            1,
            "merged back into a whole segment"
        );
        assert_eq!(alloc.stats().pending_free_bytes, 0);
    }
    assert_eq!(
        backend.counters().events_created,
        2,
        "the second round reused pooled events"
    );
    assert_eq!(backend.counters().events_recorded, 4);
}

#[test]
fn rule3_pending_neighbour_is_never_merged() {
    let (backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let b = alloc.allocate(1000, &s0).unwrap();
    let (pa, pb) = (a.ptr().addr(), b.ptr().addr());
    assert_eq!(pb, pa + 1024, "b follows a in the segment");
    alloc.record_stream(&b, &s1);
    drop(b);
    drop(a);
    let snap = alloc.snapshot();
    assert_eq!(
        snap.segments[0].blocks.len(),
        3,
        "a stays apart from pending b"
    );
    assert_eq!(block_state(&snap, pa), Some(BlockState::Inactive));
    assert_eq!(block_state(&snap, pb), Some(BlockState::ActivePendingFree));
    let st = alloc.stats();
    assert_eq!(st.inactive_split.aggregate.current, 2);
    check_identities(&st);
    backend.advance(&s1);
    alloc.process_events().unwrap();
    let snap = alloc.snapshot();
    assert_eq!(
        snap.segments[0].blocks.len(),
        1,
        "merged once b's event completed"
    );
    assert_eq!(alloc.stats().inactive_split.aggregate.current, 0);
}

#[test]
fn rule4_erase_removes_only_that_works_use() {
    let (backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let p = a.ptr();
    alloc.record_stream_for_work(&a, &s1, WorkId(1));
    alloc.record_stream_for_work(&a, &s1, WorkId(2));
    assert_eq!(
        alloc.erase_stream(&a, &s1, WorkId(1), &s0),
        EraseOutcome::Erased
    );
    assert_eq!(
        alloc.erase_stream(&a, &s1, WorkId(1), &s0),
        EraseOutcome::NoSuchUse
    );
    drop(a);
    // Work 2 is still in flight on s1: the block stays protected.
    assert_eq!(
        block_state(&alloc.snapshot(), p.addr()),
        Some(BlockState::ActivePendingFree)
    );
    assert_ne!(alloc.allocate(1000, &s0).unwrap().ptr(), p);
    backend.advance(&s1);
    assert_eq!(alloc.allocate(1000, &s0).unwrap().ptr(), p);
    assert_eq!(alloc.stats().erase_stream_calls, 2);
}

#[test]
fn rule4_erase_needs_the_current_stream_to_be_the_allocation_stream() {
    let (_backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let p = a.ptr();
    alloc.record_stream_for_work(&a, &s1, WorkId(1));
    assert_eq!(
        alloc.erase_stream(&a, &s1, WorkId(1), &s1),
        EraseOutcome::NotCurrentStream
    );
    drop(a);
    assert_eq!(
        block_state(&alloc.snapshot(), p.addr()),
        Some(BlockState::ActivePendingFree),
        "the refused erase changed nothing"
    );
}

#[test]
fn rule4_user_use_is_never_erased_by_a_work() {
    let (_backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let r = a.block_ref();
    alloc.record_stream(&a, &s1);
    alloc.record_stream_for_work(&a, &s1, WorkId(1));
    drop(a);
    assert_eq!(
        alloc.erase_stream_by_block(r, WorkId(1), &s1, &s0),
        EraseOutcome::Erased
    );
    assert_eq!(
        alloc.stats().pending_free_bytes,
        1024,
        "the user's use still protects it"
    );
}

#[test]
fn rule4_erasing_the_last_owner_of_a_pending_block_frees_it_at_once() {
    let (backend, alloc, [s0, s1, s2]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let (p, r) = (a.ptr(), a.block_ref());
    alloc.record_stream_for_work(&a, &s1, WorkId(1));
    alloc.record_stream_for_work(&a, &s1, WorkId(2));
    alloc.record_stream_for_work(&a, &s2, WorkId(2));
    drop(a);
    assert_eq!(
        alloc.erase_stream_by_block(r, WorkId(1), &s1, &s0),
        EraseOutcome::Erased
    );
    assert_eq!(
        alloc.erase_stream_by_block(r, WorkId(2), &s1, &s0),
        EraseOutcome::Erased
    );
    assert_eq!(
        alloc.erase_stream_by_block(r, WorkId(2), &s2, &s0),
        EraseOutcome::FreedNow
    );
    assert!(
        !backend.is_idle(&s1) && !backend.is_idle(&s2),
        "no stream advanced"
    );
    assert_eq!(
        block_state(&alloc.snapshot(), p.addr()),
        Some(BlockState::Inactive)
    );
    assert_eq!(alloc.allocate(1000, &s0).unwrap().ptr(), p);
    let st = alloc.stats();
    assert_eq!(st.erase_stream_calls, 3);
    check_identities(&st);
}

#[test]
fn rule5_stale_block_refs_are_no_ops() {
    let (backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let old = a.block_ref();
    alloc.record_stream_for_work(&a, &s1, WorkId(1));
    drop(a);
    backend.advance(&s1);
    alloc.process_events().unwrap(); // back in the pool: generation bumped
    assert_eq!(
        alloc.erase_stream_by_block(old, WorkId(1), &s1, &s0),
        EraseOutcome::StaleBlock
    );
    // The slot is handed out again; the old reference must not touch the new block.
    let b = alloc.allocate(1000, &s0).unwrap();
    assert_eq!(b.block_ref().id, old.id);
    assert_ne!(b.block_ref().generation, old.generation);
    alloc.record_stream_for_work(&b, &s1, WorkId(1));
    assert_eq!(
        alloc.erase_stream_by_block(old, WorkId(1), &s1, &s0),
        EraseOutcome::StaleBlock
    );
    let (p, live) = (b.ptr(), b.block_ref());
    drop(b);
    assert_eq!(
        block_state(&alloc.snapshot(), p.addr()),
        Some(BlockState::ActivePendingFree)
    );
    // Wrong work, wrong current stream, then the right call.
    assert_eq!(
        alloc.erase_stream_by_block(live, WorkId(2), &s1, &s0),
        EraseOutcome::NoSuchUse
    );
    assert_eq!(
        alloc.erase_stream_by_block(live, WorkId(1), &s1, &s1),
        EraseOutcome::NotCurrentStream
    );
    assert_eq!(
        alloc.erase_stream_by_block(live, WorkId(1), &s1, &s0),
        EraseOutcome::FreedNow
    );
    let bogus = memreuse_core::BlockRef {
        id: u32::MAX,
        generation: 0,
    };
    assert_eq!(
        alloc.erase_stream_by_block(bogus, WorkId(1), &s1, &s0),
        EraseOutcome::StaleBlock
    );
}

#[test]
fn rule5_merged_away_block_ref_is_stale() {
    let (_backend, alloc, [s0, s1, _]) = setup();
    let a = alloc.allocate(1000, &s0).unwrap();
    let b = alloc.allocate(1000, &s0).unwrap();
    let rb = b.block_ref();
    drop(b); // b merges with the free remainder
    drop(a); // a absorbs b's merged block: b's slot is vacated
    assert_eq!(
        alloc.erase_stream_by_block(rb, WorkId(1), &s1, &s0),
        EraseOutcome::StaleBlock
    );
}

#[test]
fn rule6_block_and_segment_sizes_follow_pytorch() {
    let (_backend, alloc, [s0, ..]) = setup();
    let cases: &[(u64, u64, u64, SegmentType)] = &[
        (0, 512, 2 * MIB, SegmentType::Small),
        (1, 512, 2 * MIB, SegmentType::Small),
        (513, 1024, 2 * MIB, SegmentType::Small),
        (MIB, MIB, 2 * MIB, SegmentType::Small),
        (MIB + 1, MIB + 512, 20 * MIB, SegmentType::Large),
        (9 * MIB, 9 * MIB, 20 * MIB, SegmentType::Large),
        // Rounded to 10 MiB first, which is no longer below the 10 MiB threshold.
        (10 * MIB - 1, 10 * MIB, 10 * MIB, SegmentType::Large),
        (10 * MIB + 1, 10 * MIB + 512, 12 * MIB, SegmentType::Large),
    ];
    for &(req, block, segment, ty) in cases {
        let a = alloc.allocate(req, &s0).unwrap();
        assert_eq!(a.size(), block, "block size for {req}");
        assert_eq!(a.requested_size(), req);
        let snap = alloc.snapshot();
        let seg = snap
            .segments
            .iter()
            .find(|s| s.address <= a.ptr().addr() && a.ptr().addr() < s.address + s.total_size)
            .unwrap();
        assert_eq!(
            (seg.total_size, seg.segment_type),
            (segment, ty),
            "segment for {req}"
        );
        drop(a);
        alloc.empty_cache().unwrap();
    }
}

#[test]
fn rule6_split_rules() {
    let (backend, alloc, [s0, ..]) = setup();
    // Small pool: remainder >= 512 is split, so two 1 MiB blocks share a 2 MiB segment.
    let first = alloc.allocate(MIB, &s0).unwrap();
    let second = alloc.allocate(MIB, &s0).unwrap();
    assert_eq!(backend.counters().raw_mallocs, 1);
    assert_eq!(second.ptr().addr(), first.ptr().addr() + MIB);
    // Large pool: remainder > 1 MiB is split ...
    let third = alloc.allocate(5 * MIB, &s0).unwrap();
    let fourth = alloc.allocate(5 * MIB, &s0).unwrap();
    assert_eq!(fourth.ptr().addr(), third.ptr().addr() + 5 * MIB);
    assert_eq!(backend.counters().raw_mallocs, 2);
    // ... a remainder of at most 1 MiB is not: the block keeps the whole segment.
    let whole = alloc.allocate(19 * MIB + 512, &s0).unwrap();
    assert_eq!(whole.size(), 20 * MIB);
    assert_eq!(
        alloc
            .snapshot()
            .segments
            .iter()
            .find(|s| s.address == whole.ptr().addr())
            .unwrap()
            .blocks
            .len(),
        1
    );
    check_identities(&alloc.stats());
}

#[test]
fn rule6_oversize_blocks() {
    let (backend, alloc, [s0, ..]) = setup_with(1 << 40, "max_split_size_mb:20");
    let big = alloc.allocate(60 * MIB, &s0).unwrap();
    let p = big.ptr();
    assert_eq!(alloc.stats().oversize_segments.current, 1);
    assert_eq!(alloc.stats().oversize_allocations.current, 1);
    drop(big);
    assert_eq!(alloc.stats().oversize_allocations.current, 0);
    // A request below max_split_size never gets an oversize block.
    let small = alloc.allocate(5 * MIB, &s0).unwrap();
    assert_ne!(small.ptr(), p);
    // An oversize request takes no block 20 MiB or more larger than itself.
    let mid = alloc.allocate(40 * MIB, &s0).unwrap();
    assert_ne!(mid.ptr(), p);
    drop(mid);
    // Within 20 MiB it takes the block whole, unsplit.
    let fit = alloc.allocate(50 * MIB, &s0).unwrap();
    assert_eq!(fit.ptr(), p);
    assert_eq!(fit.size(), 60 * MIB);
    assert_eq!(backend.counters().raw_mallocs, 3);
    check_identities(&alloc.stats());
}

#[test]
fn rule6_roundup_power2_divisions() {
    let (_b, alloc, [s0, ..]) = setup_with(1 << 40, "roundup_power2_divisions:4");
    assert_eq!(alloc.allocate(1200 << 10, &s0).unwrap().size(), 1280 << 10);
    let (_b, alloc, [s0, ..]) = setup_with(1 << 40, "roundup_power2_divisions:[1:2,>:1]");
    assert_eq!(alloc.allocate(1200 << 10, &s0).unwrap().size(), 1536 << 10);
    assert_eq!(
        alloc.allocate(3 * MIB + 1, &s0).unwrap().size(),
        3 * MIB + 512
    );
}
