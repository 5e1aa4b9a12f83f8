//! The backend contract kit (`memreuse_core::testing::contract`) on a Vulkan device.

mod common;

use std::sync::Arc;

use memreuse_core::testing::contract::{ContractOptions, check_backend};

#[test]
fn the_vulkan_device_keeps_the_device_contract() {
    let capacity = 64 << 20;
    let Some(device) = common::device_with(0, capacity) else {
        return;
    };
    let device = Arc::new(device);
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
    assert_eq!(
        device.live_allocations(),
        0,
        "the kit freed everything it allocated"
    );
}
