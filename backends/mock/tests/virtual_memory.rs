//! The mock's virtual memory: capacity limits mapped bytes, unmapped addresses are
//! refused, the contract kit's rules hold, and unmapping a page while work on it is not
//! known complete is a reuse race.

mod common;

use memreuse_core::race::RaceChecker;
use memreuse_core::testing::check_stale_page_unmap;
use memreuse_core::testing::contract::{ContractOptions, check_backend};
use memreuse_core::{Backend, RaceKind};
use memreuse_mock::{MockConfig, MockDevice};

use common::read;

const G: u64 = 2 << 20;

fn device(capacity: u64) -> MockDevice {
    MockDevice::new(MockConfig::with_capacity(capacity)).expect("device")
}

#[test]
fn mapped_pages_hold_data_and_count_against_capacity() {
    let dev = device(2 * G);
    assert!(dev.capabilities().virtual_memory);
    assert_eq!(dev.vm_granularity().unwrap(), G);
    let base = dev.vm_reserve(16 * G).unwrap();
    assert_eq!(
        dev.memory_info().unwrap().free,
        2 * G,
        "addresses cost nothing"
    );
    let s = dev.default_stream();
    // Unmapped: refused.
    assert!(dev.memset_zero(base, 64, &s).is_err());
    let h = dev.vm_create_physical(2 * G).unwrap();
    assert!(dev.vm_create_physical(G).unwrap_err().is_out_of_memory());
    dev.vm_map(base, h).unwrap();
    dev.copy_host_to_device(base.offset(G), &[7; 16], &s)
        .unwrap();
    assert_eq!(read(&dev, base.offset(G), 16, &s), vec![7; 16]);
    assert!(
        dev.memset_zero(base.offset(2 * G), 1, &s).is_err(),
        "past the mapping"
    );
    dev.vm_unmap(base, 2 * G).unwrap();
    assert!(dev.memset_zero(base, 1, &s).is_err(), "unmapped again");
    dev.vm_release_physical(h).unwrap();
    dev.vm_release(base).unwrap();
    assert_eq!(dev.memory_info().unwrap().free, 2 * G);
    assert!(dev.race_reports().unwrap().is_empty());
}

#[test]
fn the_mock_keeps_the_virtual_memory_contract() {
    let dev = std::sync::Arc::new(device(64 << 20));
    let report = check_backend(&dev, &ContractOptions::default());
    report.assert_passed();
    assert!(report.passed.contains(&"virtual_memory"), "{report:?}");
}

#[test]
fn unmapping_a_page_with_unfinished_work_is_a_reuse_race() {
    if let Err(e) = check_stale_page_unmap(|| device(4 * G)) {
        panic!("{e}");
    }
}

/// The race-checking adaptor over the detector-less mock forwards the vm_* calls and sees
/// the same stale-page unmap as the mock's own detector.
#[test]
fn the_race_adaptor_sees_through_remapping_too() {
    let dev = MockDevice::new(MockConfig {
        race_detection: false,
        ..MockConfig::with_capacity(4 * G)
    })
    .expect("device");
    let dev = RaceChecker::standalone(dev);
    assert!(dev.capabilities().virtual_memory);
    let base = dev.vm_reserve(2 * G).unwrap();
    let h = dev.vm_create_physical(G).unwrap();
    dev.vm_map(base, h).unwrap();
    let s = dev.create_stream().unwrap();
    dev.delay(1_000, &s).unwrap();
    dev.memset_zero(base, 64, &s).unwrap();
    dev.vm_unmap(base, G).unwrap();
    dev.synchronize_device().unwrap();
    let races = dev.race_reports().unwrap();
    assert!(
        races.iter().any(|r| r.kind == RaceKind::Reuse),
        "expected a reuse race: {races:?}"
    );
    dev.vm_release_physical(h).unwrap();
    dev.vm_release(base).unwrap();
}

#[test]
fn one_access_spans_pages_mapped_from_two_handles() {
    let dev = device(4 * G);
    let s = dev.default_stream();
    let base = dev.vm_reserve(8 * G).unwrap();
    let a = dev.vm_create_physical(G).unwrap();
    let b = dev.vm_create_physical(G).unwrap();
    dev.vm_map(base, a).unwrap();
    dev.vm_map(base.offset(G), b).unwrap();
    // 64 bytes on each side of the boundary between the two mappings.
    let at = base.offset(G - 64);
    let bytes: Vec<u8> = (0..128u8).collect();
    dev.copy_host_to_device(at, &bytes, &s).unwrap();
    assert_eq!(read(&dev, at, 128, &s), bytes);
    dev.memset_zero(base, 2 * G, &s).unwrap();
    assert_eq!(read(&dev, at, 128, &s), vec![0; 128]);
    // A range that touches one unmapped granule (the third) is refused whole.
    let err = dev.memset_zero(base.offset(G), G + 1, &s).unwrap_err();
    assert!(err.to_string().contains("unmapped"), "{err}");
    // A hole: unmap the first page; an access across it is refused, the rest still works.
    dev.synchronize_stream(&s).unwrap();
    dev.vm_unmap(base, G).unwrap();
    assert!(dev.memset_zero(base.offset(G - 1), 2, &s).is_err());
    assert!(dev.memset_zero(base.offset(G), 2, &s).is_ok());
    dev.synchronize_stream(&s).unwrap();
    dev.vm_unmap(base.offset(G), G).unwrap();
    for h in [a, b] {
        dev.vm_release_physical(h).unwrap();
    }
    dev.vm_release(base).unwrap();
    assert!(dev.race_reports().unwrap().is_empty());
}

#[test]
fn a_handle_mapped_again_shows_the_bytes_it_held() {
    let dev = device(2 * G);
    let s = dev.default_stream();
    let base = dev.vm_reserve(4 * G).unwrap();
    let h = dev.vm_create_physical(G).unwrap();
    dev.vm_map(base, h).unwrap();
    dev.copy_host_to_device(base.offset(100), &[9; 32], &s)
        .unwrap();
    dev.synchronize_stream(&s).unwrap();
    dev.vm_unmap(base, G).unwrap();
    // Mapped again two pages higher: same bytes at the same offset in the handle.
    dev.vm_map(base.offset(2 * G), h).unwrap();
    assert_eq!(read(&dev, base.offset(2 * G + 100), 32, &s), vec![9; 32]);
    assert!(
        dev.memset_zero(base, 1, &s).is_err(),
        "the old place is unmapped"
    );
    dev.synchronize_stream(&s).unwrap();
    dev.vm_unmap(base.offset(2 * G), G).unwrap();
    dev.vm_release_physical(h).unwrap();
    dev.vm_release(base).unwrap();
    assert!(dev.race_reports().unwrap().is_empty());
}

#[test]
fn an_access_across_two_mappings_is_race_checked_on_both() {
    let dev = device(4 * G);
    let s = dev.default_stream();
    let side = dev.create_stream().unwrap();
    let base = dev.vm_reserve(4 * G).unwrap();
    let a = dev.vm_create_physical(G).unwrap();
    let b = dev.vm_create_physical(G).unwrap();
    dev.vm_map(base, a).unwrap();
    dev.vm_map(base.offset(G), b).unwrap();
    // One write across the boundary on the side stream, then an unordered write to the
    // second page only: the detector saw the first write's second half.
    dev.memset_zero(base.offset(G - 8), 16, &side).unwrap();
    dev.memset_zero(base.offset(G + 4), 4, &s).unwrap();
    dev.synchronize_device().unwrap();
    let reports = dev.race_reports().unwrap();
    assert!(
        !reports.is_empty(),
        "the overlap on the second page is a race"
    );
}
