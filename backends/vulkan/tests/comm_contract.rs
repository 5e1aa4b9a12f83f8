//! The communicator contract kit (`memreuse_core::testing::comm_contract`) on the Vulkan
//! communicator: four `VkDevice`s and a proxy thread per communicator.

mod common;

use std::time::Duration;

use memreuse_core::comm::Communicator;
use memreuse_core::testing::comm_contract::{CommContractOptions, Rank, check_communicator};
use memreuse_core::{BackendError, BackendOptions, WorldOptions};
use memreuse_vulkan::{VulkanDevice, open_vulkan_world};

fn open(n: usize, timeout: Duration) -> Result<Vec<Rank<VulkanDevice>>, BackendError> {
    let options = WorldOptions {
        world_size: n,
        backend: BackendOptions {
            memory_capacity: Some(64 << 20),
            ..BackendOptions::default()
        },
        timeout,
    };
    Ok(open_vulkan_world(&options)?
        .into_iter()
        .map(|(d, c)| (d, Box::new(c) as Box<dyn Communicator<VulkanDevice>>))
        .collect())
}

#[test]
fn the_vulkan_communicator_keeps_the_contract() {
    if common::world(2, Duration::from_secs(1)).is_none() {
        return;
    }
    let options = CommContractOptions {
        world_size: 4,
        timeout: Duration::from_millis(500),
        grouping: true,
    };
    let report = check_communicator(&open, &options);
    report.assert_passed();
    assert!(report.skipped.is_empty(), "{report:?}");
    assert_eq!(report.passed.len(), 9, "{report:?}");
}
