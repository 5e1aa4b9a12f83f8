//! The device contract kit (`memreuse_core::testing::contract`) through the whole Ascend FFI
//! path: `AscendDevice` over the stand-in `libascendcl.so`, which checks every address and
//! reports races from the mock device behind it.

mod common;

use std::sync::Arc;

use common::{configure, serial, standin};
use memreuse_ascend::AscendDevice;
use memreuse_core::testing::contract::{ContractOptions, check_backend};

#[test]
fn the_ascend_device_keeps_the_device_contract_through_ffi() {
    let _g = serial();
    let capacity = 64 << 20;
    configure(1, capacity, 0);
    let api = standin(&[]);
    let device = Arc::new(AscendDevice::open(api, 0).unwrap());
    let options = ContractOptions {
        oom_request: Some(capacity + 1),
        checks_addresses: true,
        ..ContractOptions::default()
    };
    let report = check_backend(&device, &options);
    report.assert_passed();
    // Every check ran and passed; no count, so a check added to the kit does not break
    // this test (docs/porting.md, step 4).
    assert!(report.skipped.is_empty(), "{report:?}");
}

#[test]
fn the_fallback_symbols_keep_it_too() {
    let _g = serial();
    configure(1, 64 << 20, 0);
    let api = standin(&["aclrtMallocAlign32", "aclrtCreateEventExWithFlag"]);
    let device = Arc::new(AscendDevice::open(api, 0).unwrap());
    let options = ContractOptions {
        oom_request: Some((64 << 20) + 1),
        checks_addresses: true,
        ..ContractOptions::default()
    };
    check_backend(&device, &options).assert_passed();
}
