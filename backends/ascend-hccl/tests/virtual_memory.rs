//! The virtual-memory interface of `AscendDevice` through the real FFI path on the stand-in:
//! the contract kit's `virtual_memory` check, the capability following the symbols, the
//! granularity fallback, capacity limiting physical bytes, the backend's own refusals (each
//! naming its rule, before any FFI call), the race detector seeing an unmap as a free, and
//! HCCL on mapped addresses.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{calls, configure, serial, set_behaviour, standin};
use memreuse_ascend::AscendDevice;
use memreuse_ascend::registry::open_world_with;
use memreuse_ascend::virtual_memory::{FALLBACK_GRANULARITY, VM_SYMBOLS};
use memreuse_core::comm::{Communicator, DType, ReduceOp};
use memreuse_core::testing::check_stale_page_unmap;
use memreuse_core::testing::contract::{ContractOptions, check_backend};
use memreuse_core::{Backend, BackendError, BackendOptions, DevicePtr, WorldOptions};

const G: u64 = 2 << 20;

fn open(capacity: u64, disabled: &[&str]) -> AscendDevice {
    configure(1, capacity, 0);
    AscendDevice::open(standin(disabled), 0).unwrap()
}

fn read(dev: &AscendDevice, p: DevicePtr, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    dev.copy_device_to_host(&mut out, p, &dev.default_stream())
        .unwrap();
    out
}

/// The reason of an `InvalidArgument`, or a panic naming what came instead.
fn refusal<T: std::fmt::Debug>(r: Result<T, BackendError>) -> String {
    match r {
        Err(BackendError::InvalidArgument { reason, .. }) => reason,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn the_contract_kit_checks_virtual_memory_through_ffi() {
    let _g = serial();
    let dev = Arc::new(open(64 << 20, &[]));
    assert!(dev.capabilities().virtual_memory);
    let maps = calls("aclrtMapMem");
    let unmaps = calls("aclrtUnmapMem");
    let report = check_backend(
        &dev,
        &ContractOptions {
            oom_request: Some((64 << 20) + 1),
            checks_addresses: true,
            ..ContractOptions::default()
        },
    );
    report.assert_passed();
    assert!(report.passed.contains(&"virtual_memory"), "{report:?}");
    // The check went through the runtime's symbols, not around them.
    assert!(calls("aclrtMapMem") > maps && calls("aclrtUnmapMem") > unmaps);
    assert_eq!(
        dev.vm_granularity().unwrap(),
        G,
        "ACL_HBM_MEM_HUGE: 2 MB pages"
    );
}

#[test]
fn a_runtime_without_a_vm_symbol_declares_no_virtual_memory_and_names_the_symbol() {
    let _g = serial();
    for symbol in VM_SYMBOLS {
        let dev = open(64 << 20, &[symbol]);
        assert!(!dev.capabilities().virtual_memory, "{symbol}");
        match dev.vm_reserve(G) {
            Err(BackendError::Unsupported { call, reason, .. }) => {
                assert_eq!(call, "vm_reserve");
                assert!(reason.contains(symbol), "{symbol}: {reason}");
            }
            other => panic!("{symbol}: expected Unsupported, got {other:?}"),
        }
        assert!(matches!(
            dev.vm_granularity(),
            Err(BackendError::Unsupported { .. })
        ));
        // The kit's check for a backend without the capability: Unsupported, not a crash.
        check_backend(&Arc::new(dev), &ContractOptions::default()).assert_passed();
    }
}

/// The stand-in's `vm-unsupported` behaviour bit.
const VM_UNSUPPORTED: u32 = 8;

#[test]
fn a_part_that_answers_feature_not_supported_declares_no_virtual_memory() {
    use memreuse_core::allocator::{AllocatorConfig, CachingAllocator, ConfigError};
    let _g = serial();
    configure(1, 64 << 20, 0);
    let api = standin(&[]);
    // Every symbol is exported, but the part refuses virtual memory (207000).
    let previous = set_behaviour(VM_UNSUPPORTED);
    let dev = AscendDevice::open(api, 0).unwrap();
    assert!(
        !dev.capabilities().virtual_memory,
        "declared on a part without it"
    );
    for r in [
        dev.vm_reserve(G).map(|_| ()),
        dev.vm_create_physical(G).map(|_| ()),
        dev.vm_granularity().map(|_| ()),
    ] {
        match r {
            Err(BackendError::Unsupported { reason, .. }) => {
                assert!(
                    reason.contains("ACL_ERROR_RT_FEATURE_NOT_SUPPORT"),
                    "{reason}"
                );
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
    let dev = Arc::new(dev);
    // So expandable segments are refused when the allocator opens (the runner's skip),
    // not at its first allocation.
    let config = AllocatorConfig::parse("expandable_segments:True").unwrap();
    let refused = CachingAllocator::try_new(Arc::clone(&dev), config);
    assert!(
        matches!(refused, Err(ConfigError::Unsupported { .. })),
        "{:?}",
        refused.err()
    );
    check_backend(&dev, &ContractOptions::default()).assert_passed();
    drop(dev);
    // A part that supports it: the probe's page is released again, nothing is left.
    set_behaviour(previous);
    let dev = AscendDevice::open(api, 0).unwrap();
    let free = dev.memory_info().unwrap().free;
    assert!(dev.capabilities().virtual_memory);
    assert_eq!(
        dev.memory_info().unwrap().free,
        free,
        "the probe holds no memory"
    );
    let base = dev.vm_reserve(2 * G).unwrap();
    dev.vm_release(base).unwrap();
}

#[test]
fn without_the_granularity_query_the_2mb_page_is_used() {
    let _g = serial();
    let before = calls("aclrtMemGetAllocationGranularity");
    let dev = open(64 << 20, &["aclrtMemGetAllocationGranularity"]);
    assert!(dev.capabilities().virtual_memory);
    assert_eq!(dev.vm_granularity().unwrap(), FALLBACK_GRANULARITY);
    check_backend(&Arc::new(dev), &ContractOptions::default()).assert_passed();
    assert_eq!(calls("aclrtMemGetAllocationGranularity"), before);
}

#[test]
fn capacity_limits_physical_bytes_and_mapped_pages_hold_data() {
    let _g = serial();
    let dev = open(4 * G, &[]);
    let free = dev.memory_info().unwrap().free;
    let base = dev.vm_reserve(64 * G).unwrap();
    assert_eq!(
        dev.memory_info().unwrap().free,
        free,
        "addresses cost nothing"
    );
    let s = dev.default_stream();
    assert!(dev.memset_zero(base, 64, &s).is_err(), "nothing mapped yet");
    let h = dev.vm_create_physical(2 * G).unwrap();
    assert_eq!(dev.memory_info().unwrap().free, free - 2 * G);
    let oom = dev.vm_create_physical(free).unwrap_err();
    assert!(oom.is_out_of_memory(), "{oom:?}");
    dev.vm_map(base.offset(4 * G), h).unwrap();
    dev.copy_host_to_device(base.offset(5 * G), &[7; 64], &s)
        .unwrap();
    assert_eq!(read(&dev, base.offset(5 * G), 64), vec![7; 64]);
    assert!(
        dev.memset_zero(base.offset(6 * G), 1, &s).is_err(),
        "past the mapping"
    );
    dev.synchronize_stream(&s).unwrap();
    dev.vm_unmap(base.offset(4 * G), 2 * G).unwrap();
    assert!(
        dev.memset_zero(base.offset(4 * G), 1, &s).is_err(),
        "unmapped"
    );
    dev.vm_release_physical(h).unwrap();
    dev.vm_release(base).unwrap();
    assert_eq!(dev.memory_info().unwrap().free, free);
    assert_eq!(dev.race_reports().unwrap(), Vec::new());
}

#[test]
fn the_backend_refuses_misuse_naming_the_rule_before_any_ffi_call() {
    let _g = serial();
    let dev = open(16 * G, &[]);
    let base = dev.vm_reserve(4 * G).unwrap();
    let h = dev.vm_create_physical(2 * G).unwrap();
    let other = dev.vm_create_physical(G).unwrap();
    dev.vm_map(base, h).unwrap();
    let counted = [
        "aclrtReserveMemAddress",
        "aclrtReleaseMemAddress",
        "aclrtMallocPhysical",
        "aclrtFreePhysical",
        "aclrtMapMem",
        "aclrtUnmapMem",
    ]
    .map(calls);
    let cases: Vec<(&str, String)> = vec![
        ("granularity", refusal(dev.vm_reserve(G + 4096))),
        ("granularity", refusal(dev.vm_create_physical(G / 2))),
        ("granularity", refusal(dev.vm_map(base.offset(4096), other))),
        ("already mapped", refusal(dev.vm_map(base.offset(2 * G), h))),
        (
            "overlap a mapping",
            refusal(dev.vm_map(base.offset(G), other)),
        ),
        (
            "not inside one range",
            refusal(dev.vm_map(base.offset(4 * G), other)),
        ),
        (
            "not a live handle",
            refusal(dev.vm_map(base.offset(2 * G), memreuse_core::PhysicalHandle(1))),
        ),
        ("unmap whole mappings", refusal(dev.vm_unmap(base, G))),
        (
            "not the address of a vm_map",
            refusal(dev.vm_unmap(base.offset(2 * G), G)),
        ),
        ("still mapped", refusal(dev.vm_release_physical(h))),
        ("still has a mapping", refusal(dev.vm_release(base))),
        ("not the base", refusal(dev.vm_release(base.offset(G)))),
    ];
    for (rule, reason) in &cases {
        assert!(reason.contains(rule), "expected {rule:?} in {reason:?}");
    }
    let after = [
        "aclrtReserveMemAddress",
        "aclrtReleaseMemAddress",
        "aclrtMallocPhysical",
        "aclrtFreePhysical",
        "aclrtMapMem",
        "aclrtUnmapMem",
    ]
    .map(calls);
    assert_eq!(
        counted, after,
        "every refusal came before the runtime was called"
    );
    // Nothing changed: the proper order still works.
    dev.vm_map(base.offset(2 * G), other).unwrap();
    dev.vm_unmap(base.offset(2 * G), G).unwrap();
    dev.vm_unmap(base, 2 * G).unwrap();
    dev.vm_release_physical(h).unwrap();
    dev.vm_release_physical(other).unwrap();
    dev.vm_release(base).unwrap();
}

#[test]
fn unmapping_a_page_with_unfinished_work_is_a_reuse_race() {
    let _g = serial();
    if let Err(e) = check_stale_page_unmap(|| open(8 * G, &[])) {
        panic!("{e}");
    }
}

/// One access may span two adjacent mappings of different handles: the stand-in (the mock
/// behind the ABI) keeps one backing per reserved range.
#[test]
fn an_access_may_span_two_adjacent_mappings() {
    let _g = serial();
    let dev = open(8 * G, &[]);
    let base = dev.vm_reserve(4 * G).unwrap();
    let (a, b) = (
        dev.vm_create_physical(G).unwrap(),
        dev.vm_create_physical(G).unwrap(),
    );
    dev.vm_map(base, a).unwrap();
    dev.vm_map(base.offset(G), b).unwrap();
    let s = dev.default_stream();
    let at = base.offset(G - 64);
    dev.copy_host_to_device(at, &[9; 128], &s).unwrap();
    assert_eq!(read(&dev, at, 128), vec![9; 128]);
    dev.memset_zero(at, 128, &s).unwrap();
    assert_eq!(read(&dev, at, 128), vec![0; 128]);
    dev.copy_device_to_device(base.offset(2 * G - 128), at, 64, &s)
        .unwrap();
    dev.synchronize_stream(&s).unwrap();
    dev.vm_unmap(base, G).unwrap();
    dev.vm_unmap(base.offset(G), G).unwrap();
    dev.vm_release_physical(a).unwrap();
    dev.vm_release_physical(b).unwrap();
    dev.vm_release(base).unwrap();
}

/// Each of two ranks maps two adjacent pages and all-reduces four floats at `offset` from
/// the range's base (across the page boundary when `offset` is just below it); returns
/// what each rank read back.
fn all_reduce_on_mapped_pages(offset: u64) -> Vec<Vec<u8>> {
    let api = standin(&[]);
    let options = WorldOptions {
        world_size: 2,
        backend: BackendOptions {
            memory_capacity: Some(16 * G),
            ..BackendOptions::default()
        },
        timeout: Duration::from_secs(20),
    };
    let world = open_world_with(api, &options).unwrap();
    let sums = std::thread::scope(|scope| {
        let handles: Vec<_> = world
            .iter()
            .enumerate()
            .map(|(rank, (dev, comm))| {
                scope.spawn(move || {
                    let base = dev.vm_reserve(2 * G).unwrap();
                    let pages = [
                        dev.vm_create_physical(G).unwrap(),
                        dev.vm_create_physical(G).unwrap(),
                    ];
                    dev.vm_map(base, pages[0]).unwrap();
                    dev.vm_map(base.offset(G), pages[1]).unwrap();
                    let s = dev.create_stream().unwrap();
                    let buf = base.offset(offset);
                    let v = (rank as f32 + 1.0).to_le_bytes().repeat(4);
                    dev.copy_host_to_device(buf, &v, &s).unwrap();
                    comm.all_reduce(buf, 4, DType::F32, ReduceOp::Sum, &s)
                        .unwrap();
                    dev.synchronize_stream(&s).unwrap();
                    let out = read(dev, buf, 16);
                    dev.vm_unmap(base, G).unwrap();
                    dev.vm_unmap(base.offset(G), G).unwrap();
                    for h in pages {
                        dev.vm_release_physical(h).unwrap();
                    }
                    dev.vm_release(base).unwrap();
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (dev, _) in &world {
        assert_eq!(dev.race_reports().unwrap(), Vec::new(), "no races");
    }
    sums
}

#[test]
fn hccl_all_reduce_works_on_mapped_addresses() {
    let _g = serial();
    for out in all_reduce_on_mapped_pages(0) {
        assert_eq!(out, 3.0f32.to_le_bytes().repeat(4));
    }
}

/// As [`an_access_may_span_two_adjacent_mappings`], for a collective.
#[test]
fn hccl_all_reduce_works_across_two_mappings() {
    let _g = serial();
    for out in all_reduce_on_mapped_pages(G - 8) {
        assert_eq!(out, 3.0f32.to_le_bytes().repeat(4));
    }
}
