//! Expandable segments choose what PyTorch chooses (issue 24 item 1), through the allocator:
//! best fit by expandable size (`get_free_block`) and garbage collection that releases no
//! expandable block (`garbage_collect_cached_blocks`). The rules on offsets are the index's
//! unit tests (`core/src/allocator/index/expandable_fit_tests.rs`).

mod common;

use common::{MIB, check_expandable};

#[test]
fn a_cached_block_that_could_grow_is_passed_over() {
    let (backend, alloc, [s0, _]) = common::setup_expandable(1 << 30, "");
    // `[0,20) a | [20,22) b | [22,40) free | unmapped`.
    let a = alloc.allocate(20 * MIB, &s0).unwrap();
    let base = a.ptr().addr();
    let b = alloc.allocate(2 * MIB, &s0).unwrap();
    assert_eq!(b.ptr().addr(), base + 20 * MIB);
    drop(a);
    // 16 MiB: the 18 MiB block at 22 is the smallest that fits, but it can grow into the
    // unmapped range after it; PyTorch takes the 20 MiB block at 0, which cannot.
    let c = alloc.allocate(16 * MIB, &s0).unwrap();
    assert_eq!(c.ptr().addr(), base);
    // The growable block is still there for a request larger than any cached block.
    let d = alloc.allocate(30 * MIB, &s0).unwrap();
    assert_eq!(d.ptr().addr(), base + 22 * MIB);
    assert_eq!(alloc.stats().reserved_bytes.current, 60 * MIB);
    check_expandable(&backend, &alloc);
    drop((b, c, d));
}

#[test]
fn garbage_collection_unmaps_nothing_with_expandable_segments() {
    let (backend, alloc, [s0, s1]) = common::setup_expandable(
        200 * MIB,
        ",per_process_memory_fraction:1.0,garbage_collection_threshold:0.5",
    );
    let a = alloc.allocate(120 * MIB, &s0).unwrap();
    drop(a);
    assert_eq!(alloc.stats().reserved_bytes.current, 120 * MIB);
    // A miss on another stream passes the GC threshold (100 MiB): PyTorch's GC skips
    // expandable blocks, so s0's cached pages stay mapped and s1 grows its own segment.
    let b = alloc.allocate(20 * MIB, &s1).unwrap();
    let s = alloc.stats();
    assert_eq!(s.num_device_unmap, 0, "GC released nothing");
    assert_eq!(s.reserved_bytes.current, 140 * MIB);
    assert_eq!(s.cached_free_bytes, 120 * MIB);
    check_expandable(&backend, &alloc);
    drop(b);
}
