//! The cached malloc/free pair without memory pools, as a callgrind probe: memory pools and
//! segment events must leave this path's instruction count where it was. Ignored in normal
//! runs (it asserts nothing a normal test does not); run under callgrind with
//! `MEMREUSE_PAIRS=N` at two values of N and subtract (docs/memory-pools.md, "Cost").

use std::sync::Arc;

use memreuse::Backend;
use memreuse::allocator::{AllocatorConfig, CachingAllocator};
use memreuse::testing::ManualBackend;

#[test]
#[ignore = "a callgrind probe, run by hand (docs/memory-pools.md)"]
fn cached_pair_loop() {
    let pairs: u64 = std::env::var("MEMREUSE_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let size: u64 = std::env::var("MEMREUSE_PAIR_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    let backend = Arc::new(ManualBackend::new(64 << 30));
    let stream = backend.default_stream();
    let alloc = CachingAllocator::new(backend, AllocatorConfig::default());
    for _ in 0..pairs {
        let s = alloc.allocate(size, &stream).expect("cached allocate");
        std::hint::black_box(s.ptr());
        drop(s);
    }
    assert_eq!(alloc.stats().num_device_alloc, 1);
}
