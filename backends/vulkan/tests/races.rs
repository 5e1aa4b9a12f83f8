//! Race checking on Vulkan goes through the happens-before adaptor
//! (`memreuse_core::race::RaceChecker`): lavapipe runs one device's work in submission
//! order, so a missing wait never shows in data. The adaptor judges the calls instead.

mod common;

use std::sync::Arc;

use memreuse_core::Backend;
use memreuse_core::race::RaceChecker;
use memreuse_core::testing::contract::{ContractOptions, check_backend};

#[test]
fn the_contract_kit_passes_through_the_race_checker() {
    let capacity = 64 << 20;
    let Some(device) = common::device_with(0, capacity) else {
        return;
    };
    let checked = Arc::new(RaceChecker::standalone(device));
    let options = ContractOptions {
        oom_request: Some(capacity + 1),
        checks_addresses: true,
        ..ContractOptions::default()
    };
    check_backend(&checked, &options).assert_passed();
    assert_eq!(checked.race_reports().map(|r| r.len()), Some(0));
}

#[test]
fn a_missing_event_wait_is_caught_although_the_data_comes_out_right() {
    let Some(device) = common::device_with(0, 1 << 20) else {
        return;
    };
    let d = RaceChecker::standalone(device);
    let (producer, consumer) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let (src, dst) = (d.malloc(4096).unwrap(), d.malloc(4096).unwrap());
    for waited in [true, false] {
        d.copy_host_to_device(src, &[u8::from(waited) + 1; 64], &producer)
            .unwrap();
        if waited {
            let e = d.create_event().unwrap();
            d.record_event(&e, &producer).unwrap();
            d.stream_wait_event(&consumer, &e).unwrap();
        }
        d.copy_device_to_device(dst, src, 64, &consumer).unwrap();
        let mut out = [0u8; 64];
        d.copy_device_to_host(&mut out, dst, &consumer).unwrap();
        // In submission order either way: the data cannot tell the two apart.
        assert_eq!(out, [u8::from(waited) + 1; 64]);
        d.synchronize_device().unwrap();
        let races = d.race_reports().unwrap();
        assert_eq!(races.is_empty(), waited, "waited {waited}: {races:?}");
    }
    d.free(src).unwrap();
    d.free(dst).unwrap();
}
