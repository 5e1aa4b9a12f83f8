//! The per-process limit (`per_process_memory_fraction`) with expandable segments, as
//! PyTorch's `alloc_block` applies it: once per growth, against the request's allocation
//! size (`get_allocation_size`: 2 MiB, 20 MiB, or the request rounded up to 2 MiB), not
//! against the pages the growth maps. Found by the PyTorch reference model of
//! `conformance/tests/whatif_pytorch_expandable.rs` on the recorded traces.

mod common;

use common::{MIB, check_expandable};
use memreuse_core::AllocError;

#[test]
fn a_growth_that_maps_less_than_the_allocation_size_is_refused_when_that_size_passes_the_limit() {
    // 100 MiB device, limit 65 MiB.
    let (backend, alloc, [s0, _]) =
        common::setup_expandable(100 * MIB, ",per_process_memory_fraction:0.65");
    // 22 MiB maps two 20 MiB pages: 40 MiB reserved, 18 MiB free at the end.
    let a = alloc.allocate(22 * MIB, &s0).unwrap();
    assert_eq!(alloc.stats().reserved_bytes.current, 40 * MIB);
    // 30 MiB would map one page more (60 MiB <= 65), but its allocation size is 30 MiB and
    // 40 + 30 > 65: PyTorch refuses before mapping anything.
    let err = alloc.allocate(30 * MIB, &s0).unwrap_err();
    assert!(matches!(err, AllocError::OutOfMemory(_)), "{err:?}");
    assert_eq!(alloc.stats().reserved_bytes.current, 40 * MIB);
    check_expandable(&backend, &alloc);
    drop(a);
}

#[test]
fn a_growth_that_maps_more_than_the_allocation_size_is_allowed_when_that_size_fits() {
    // 100 MiB device, limit 35 MiB.
    let (backend, alloc, [s0, _]) =
        common::setup_expandable(100 * MIB, ",per_process_memory_fraction:0.35");
    let a = alloc.allocate(20 * MIB, &s0).unwrap();
    // 12 MiB: allocation size 12 MiB, 20 + 12 <= 35, so PyTorch grows, mapping a whole
    // 20 MiB page: reserved ends at 40 MiB, above the limit, as in PyTorch.
    let b = alloc.allocate(12 * MIB, &s0).unwrap();
    assert_eq!(alloc.stats().reserved_bytes.current, 40 * MIB);
    check_expandable(&backend, &alloc);
    drop((a, b));
}
