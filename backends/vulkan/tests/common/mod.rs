//! Shared by the Vulkan tests: open a device or skip when no Vulkan driver is installed
//! (unless `MEMREUSE_REQUIRE_DEVICE=1`, which CI sets after installing lavapipe).

#![allow(dead_code, reason = "each test binary uses part of it")]

use memreuse_core::BackendError;
use memreuse_core::testing::skip_without_device;
use memreuse_vulkan::{DeviceConfig, VulkanDevice};

/// `Some(device)`, or `None` after printing why the test is skipped.
pub fn device(config: &DeviceConfig) -> Option<VulkanDevice> {
    match VulkanDevice::open(config) {
        Ok(d) => Some(d),
        Err(e @ BackendError::Unavailable { .. }) => {
            skip_without_device(&e.to_string());
            None
        }
        Err(e) => panic!("opening a Vulkan device failed: {e}"),
    }
}

/// A device with `capacity` bytes.
pub fn device_with(index: usize, capacity: u64) -> Option<VulkanDevice> {
    device(&DeviceConfig {
        capacity: Some(capacity),
        ..DeviceConfig::new(index)
    })
}

/// `n` ranks (devices and world communicators) whose operations wait `timeout` for a
/// missing member, or `None` after printing why the test is skipped.
pub fn world(
    n: usize,
    timeout: std::time::Duration,
) -> Option<Vec<(VulkanDevice, memreuse_vulkan::VulkanCommunicator)>> {
    let options = memreuse_core::WorldOptions {
        world_size: n,
        backend: memreuse_core::BackendOptions {
            memory_capacity: Some(64 << 20),
            ..memreuse_core::BackendOptions::default()
        },
        timeout,
    };
    match memreuse_vulkan::open_vulkan_world(&options) {
        Ok(w) => Some(w),
        Err(e @ BackendError::Unavailable { .. }) => {
            skip_without_device(&e.to_string());
            None
        }
        Err(e) => panic!("opening a Vulkan world failed: {e}"),
    }
}

/// Little-endian bytes of `values`.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The f32 values of `bytes`.
pub fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
