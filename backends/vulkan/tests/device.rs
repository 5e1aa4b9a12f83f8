//! The Vulkan device beyond the contract kit: vkCmdFillBuffer's alignment, refused
//! arguments, the backend's own capacity, synthetic addresses, a missing loader.

mod common;

use std::path::Path;

use memreuse_core::{Backend, BackendError, DevicePtr};
use memreuse_vulkan::memory::ADDRESS_ALIGNMENT;
use memreuse_vulkan::sys::Context;

fn is_invalid(r: Result<(), BackendError>, call: &str) {
    match r {
        Err(BackendError::InvalidArgument { call: c, .. }) => assert_eq!(c, call),
        other => panic!("{call}: expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn a_missing_loader_is_unavailable_naming_the_path() {
    let path = Path::new("/nonexistent/memreuse/libvulkan.so.1");
    match Context::load(Some(path)) {
        Err(BackendError::Unavailable { backend, reason }) => {
            assert_eq!(backend, "vulkan");
            assert!(
                reason.contains("/nonexistent/memreuse/libvulkan.so.1"),
                "{reason}"
            );
            assert!(reason.contains("MEMREUSE_VULKAN_LOADER"), "{reason}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn memset_zero_clears_unaligned_ranges_and_nothing_around_them() {
    let Some(d) = common::device_with(0, 1 << 20) else {
        return;
    };
    let s = d.create_stream().unwrap();
    let p = d.malloc(64).unwrap();
    // (offset, length): unaligned head and tail, inside one word, across one boundary,
    // aligned, and one byte.
    for (off, len) in [(3u64, 9u64), (5, 2), (6, 3), (8, 16), (13, 1), (1, 62)] {
        d.copy_host_to_device(p, &[0xab; 64], &s).unwrap();
        d.memset_zero(p.offset(off), len, &s).unwrap();
        let mut out = [0u8; 64];
        d.copy_device_to_host(&mut out, p, &s).unwrap();
        for (i, b) in out.iter().enumerate() {
            let zeroed = (off..off + len).contains(&(i as u64));
            assert_eq!(
                *b,
                if zeroed { 0 } else { 0xab },
                "memset ({off}, {len}) byte {i}"
            );
        }
    }
    d.free(p).unwrap();
}

#[test]
fn bad_ranges_streams_and_frees_are_typed_errors() {
    let (Some(a), Some(b)) = (
        common::device_with(0, 1 << 20),
        common::device_with(1, 1 << 20),
    ) else {
        return;
    };
    let stream = a.default_stream();
    let ptr = a.malloc(4096).unwrap();
    is_invalid(a.memset_zero(ptr.offset(4000), 200, &stream), "memset_zero");
    is_invalid(
        a.copy_host_to_device(DevicePtr(0x10), &[1; 4], &stream),
        "copy_host_to_device",
    );
    let mut buf = [0u8; 8];
    is_invalid(
        a.copy_device_to_host(&mut buf, ptr.offset(4090), &stream),
        "copy_device_to_host",
    );
    is_invalid(
        a.copy_device_to_device(ptr.offset(8), ptr, 16, &stream),
        "copy_device_to_device",
    );
    is_invalid(a.memset_zero(ptr, 4, &b.default_stream()), "memset_zero");
    let event = a.create_event().unwrap();
    is_invalid(b.record_event(&event, &b.default_stream()), "record_event");
    is_invalid(a.free(ptr.offset(4)), "free");
    is_invalid(a.malloc(0).map(drop), "malloc");
    // The device still works after every refusal.
    a.copy_host_to_device(ptr, &[7; 16], &stream).unwrap();
    a.copy_device_to_device(ptr.offset(1024), ptr, 16, &stream)
        .unwrap();
    a.copy_device_to_host(&mut buf, ptr.offset(1024), &stream)
        .unwrap();
    assert_eq!(buf, [7; 8]);
    a.free(ptr).unwrap();
    is_invalid(a.free(ptr), "free");
    assert_eq!(a.live_allocations(), 0);
}

#[test]
fn the_backend_enforces_its_capacity_and_the_driver_limit() {
    let capacity = 8 << 20;
    let Some(d) = common::device_with(0, capacity) else {
        return;
    };
    let a = d.malloc(6 << 20).unwrap();
    let info = d.memory_info().unwrap();
    assert_eq!((info.total, info.free), (capacity, 2 << 20));
    let e = d.malloc(3 << 20).unwrap_err();
    assert!(e.is_out_of_memory(), "{e}");
    d.free(a).unwrap();
    let b = d.malloc(8 << 20).unwrap();
    d.free(b).unwrap();
    // A capacity above maxMemoryAllocationSize: one allocation beyond the limit is refused
    // as out of memory (so the allocator's retry chain applies) before the driver sees it.
    let max = d.context().facts.max_allocation;
    let Some(big) = common::device_with(1, max.saturating_mul(2)) else {
        return;
    };
    match big.malloc(max + 1) {
        Err(BackendError::OutOfMemory { detail, .. }) => {
            assert!(detail.contains("maxMemoryAllocationSize"), "{detail}");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

#[test]
fn addresses_are_synthetic_aligned_and_the_same_every_run() {
    let run = || {
        let d = common::device_with(3, 64 << 20)?;
        let ptrs: Vec<u64> = [100u64, 5000, 1 << 20]
            .iter()
            .map(|&n| d.malloc(n).unwrap().addr())
            .collect();
        for &p in &ptrs {
            d.free(DevicePtr(p)).unwrap();
        }
        Some(ptrs)
    };
    let (Some(first), Some(second)) = (run(), run()) else {
        return;
    };
    assert_eq!(first, second);
    assert_eq!(first[0], 4 << 40, "device 3 starts at (3 + 1) << 40");
    assert!(
        first.iter().all(|p| p % ADDRESS_ALIGNMENT == 0),
        "{first:x?}"
    );
    assert_eq!(
        first[1] - first[0],
        ADDRESS_ALIGNMENT,
        "100 bytes take one 4 KiB slot"
    );
}
