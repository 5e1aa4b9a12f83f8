//! Layer 2: every `VkResult` checked and turned into a typed [`BackendError`].
//!
//! `VK_ERROR_OUT_OF_DEVICE_MEMORY` and `VK_ERROR_OUT_OF_HOST_MEMORY` from an allocation
//! are [`BackendError::OutOfMemory`] (so the caching allocator's free-and-retry chain
//! runs); `VK_ERROR_DEVICE_LOST` is [`BackendError::DeviceLost`]; every other code is
//! [`BackendError::Device`] with the code's name.

use ash::vk;
use memreuse_core::BackendError;

/// Backend name used in every error and registration.
pub const BACKEND: &str = "vulkan";

/// The typed error for `code` returned by `call` (any call but an allocation).
pub fn vk_check(code: vk::Result, call: &'static str) -> BackendError {
    if code == vk::Result::ERROR_DEVICE_LOST {
        return BackendError::DeviceLost {
            backend: BACKEND.to_owned(),
            reason: format!("{call} returned VK_ERROR_DEVICE_LOST ({})", code.as_raw()),
        };
    }
    BackendError::Device {
        backend: BACKEND.to_owned(),
        call,
        code: i64::from(code.as_raw()),
        code_name: format!("{code:?}"),
        message: format!("Vulkan call {call} failed"),
    }
}

/// The typed error for `code` returned by the allocation `call` of `requested` bytes:
/// out-of-memory codes become [`BackendError::OutOfMemory`].
pub fn vk_alloc_check(code: vk::Result, call: &'static str, requested: u64) -> BackendError {
    if code == vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
        || code == vk::Result::ERROR_OUT_OF_HOST_MEMORY
    {
        return BackendError::out_of_memory(
            BACKEND,
            requested,
            format!("{call} returned {code:?}"),
        );
    }
    vk_check(code, call)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_codes_for_memory_are_out_of_memory_and_others_are_named() {
        let oom = vk_alloc_check(
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            "vkAllocateMemory",
            7,
        );
        assert!(oom.is_out_of_memory(), "{oom}");
        let host = vk_alloc_check(vk::Result::ERROR_OUT_OF_HOST_MEMORY, "vkAllocateMemory", 7);
        assert!(host.is_out_of_memory(), "{host}");
        let lost = vk_alloc_check(vk::Result::ERROR_DEVICE_LOST, "vkAllocateMemory", 7);
        assert!(
            matches!(&lost, BackendError::DeviceLost { reason, .. } if reason.contains("vkAllocateMemory")),
            "{lost}"
        );
        let other = vk_check(vk::Result::ERROR_INITIALIZATION_FAILED, "vkCreateDevice");
        match other {
            BackendError::Device {
                call,
                code_name,
                code,
                ..
            } => {
                assert_eq!(call, "vkCreateDevice");
                assert_eq!(code_name, "ERROR_INITIALIZATION_FAILED");
                assert_eq!(code, -3);
            }
            other => panic!("expected a device error, got {other}"),
        }
    }
}
