//! The allocator with `expandable_segments:True` on the strict mock: a multi-stream
//! producer/consumer pattern whose blocks span page boundaries, with `empty_cache` unmapping
//! pages between rounds. The mock refuses any access to an unmapped granule and reports a
//! reuse race if a page is unmapped while work on it may still run, so "right bytes, no
//! race" means the growth, merge and unmap rules held on a device that runs streams
//! concurrently.

mod common;

use std::sync::Arc;

use memreuse_core::allocator::{AllocatorConfig, CachingAllocator};
use memreuse_core::{Backend, DevicePtr};
use memreuse_mock::{MockConfig, MockDevice};

use common::read;

const MIB: u64 = 1 << 20;

/// Bytes of tensor `k` of round `r`: not a whole number of pages, so blocks straddle them.
fn pattern(r: u64, k: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 ^ (r * 31 + k * 7)).wrapping_mul(0x9E37) as u8)
        .collect()
}

#[test]
fn producer_consumer_rounds_keep_their_bytes_and_race_free() {
    let dev = MockDevice::new(MockConfig::with_capacity(200 * MIB)).unwrap();
    let config = AllocatorConfig::parse("expandable_segments:True").unwrap();
    let alloc = CachingAllocator::try_new(Arc::new(dev.clone()), config).unwrap();
    let producer = dev.default_stream();
    let consumer = dev.create_stream().unwrap();
    let mut peak_reserved = 0;
    let mut last = DevicePtr(0);
    for round in 0..4u64 {
        let mut outputs = Vec::new();
        for k in 0..4u64 {
            let bytes = (1 + (round + k) % 4) * 5 * MIB + 4096 * (k + 1);
            let len = usize::try_from(bytes).unwrap();
            // Produced on the default stream...
            let t = alloc.allocate(bytes, &producer).unwrap();
            dev.copy_host_to_device(t.ptr(), &pattern(round, k, len), &producer)
                .unwrap();
            let ready = dev.create_event().unwrap();
            dev.record_event(&ready, &producer).unwrap();
            // ...consumed on the side stream, which copies it into its own block.
            dev.stream_wait_event(&consumer, &ready).unwrap();
            let out = alloc.allocate(bytes, &consumer).unwrap();
            dev.copy_device_to_device(out.ptr(), t.ptr(), bytes, &consumer)
                .unwrap();
            alloc.record_stream(&t, &consumer);
            drop(t);
            outputs.push((k, len, out));
        }
        for (k, len, out) in &outputs {
            assert_eq!(
                read(&dev, out.ptr(), *len, &consumer),
                pattern(round, *k, *len),
                "round {round} tensor {k}"
            );
        }
        let s = alloc.stats();
        peak_reserved = peak_reserved.max(s.reserved_bytes.peak);
        assert!(s.reserved_bytes.current <= 200 * MIB);
        last = outputs[0].2.ptr();
        drop(outputs);
        // Work on the producer stream that the host has not waited for: unmapping its
        // pages without synchronizing the stream first would be a reuse race.
        let scratch = alloc.allocate(24 * MIB, &producer).unwrap();
        dev.memset_zero(scratch.ptr(), scratch.size(), &producer)
            .unwrap();
        drop(scratch);
        if round % 2 == 1 {
            // Unmap everything free; the next round maps pages again.
            alloc.empty_cache().unwrap();
            assert_eq!(alloc.stats().reserved_bytes.current, 0);
            assert_eq!(dev.memory_info().unwrap().free, 200 * MIB);
        }
    }
    let s = alloc.stats();
    assert!(s.num_device_map > 0 && s.num_device_unmap > 0, "{s:?}");
    assert_eq!(s.segment.current, 0);
    assert!(peak_reserved <= 200 * MIB);
    let reports = dev.race_reports().unwrap();
    assert!(reports.is_empty(), "{reports:?}");
    // An unmapped page is refused by the device: the allocator's ranges are really gone.
    let snapshot = alloc.snapshot();
    assert!(snapshot.segments.is_empty(), "{snapshot:?}");
    assert!(dev.memset_zero(last, 1, &producer).is_err());
}
