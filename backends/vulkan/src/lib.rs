//! memreuse-vulkan: the Vulkan backend of memreuse, through ash, with the Vulkan loader
//! opened at run time (`ash::Entry::load`), so it builds anywhere. CI runs it on Mesa's
//! lavapipe (a conformant Vulkan 1.3 driver on the CPU).
//!
//! | layer | module | what |
//! | --- | --- | --- |
//! | sys | [`sys`] | the loader, the process's `VkInstance`, the physical device and what it offers |
//! | result | [`result`] | every `VkResult` checked; out-of-memory codes are `OutOfMemory` |
//! | device | [`VulkanDevice`], [`VulkanCommunicator`] | the `Backend` and `Communicator` implementations |
//!
//! Inside the device layer: [`raw`] (the `VkDevice` and its queue), [`memory`] (one
//! `VkDeviceMemory` + `VkBuffer` per allocation behind synthetic addresses, the backend's
//! own capacity), [`sched`] (streams as timeline semaphores, host-held gates), [`delay`],
//! [`comm`] (proxy thread per communicator).
//!
//! Each memreuse device is its own `VkDevice` on one physical device (on lavapipe each has
//! its own queue thread); `MEMREUSE_VULKAN_DEVICES` (default 16) says how many there are.
//! Without a loader or driver, `device_count` and `open` return
//! `BackendError::Unavailable` naming what was tried; nothing panics.

pub mod comm;
pub mod delay;
pub mod device;
pub mod handles;
pub mod memory;
pub mod raw;
pub mod registry;
pub mod result;
pub mod sched;
pub mod sys;

pub use comm::VulkanCommunicator;
pub use device::{DeviceConfig, VulkanDevice};
pub use handles::{VulkanEvent, VulkanStream};
pub use registry::{DEVICES_VAR, open_vulkan_world};
