//! The `VkDevice` of one memreuse device and its queue, destroyed last (after every object
//! made from it: those hold an `Arc` of it).

use std::sync::Arc;

use ash::vk;
use memreuse_core::BackendError;

use crate::result::vk_check;
use crate::sys::Context;

/// One logical device on the context's physical device, with its one queue.
pub struct RawDevice {
    /// The context it was made from (kept alive: the instance outlives the device).
    pub context: Arc<Context>,
    /// Device-level function pointers and the handle.
    pub device: ash::Device,
    /// Queue 0 of the context's queue family. Submits need external synchronization:
    /// every submit happens under the device's scheduler lock.
    pub queue: vk::Queue,
}

impl std::fmt::Debug for RawDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawDevice({:?})", self.device.handle())
    }
}

impl RawDevice {
    /// Creates a logical device with timeline semaphores and synchronization2 enabled.
    pub fn create(context: &Arc<Context>) -> Result<RawDevice, BackendError> {
        let priorities = [1.0_f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(context.facts.queue_family)
            .queue_priorities(&priorities)];
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let mut v13 = vk::PhysicalDeviceVulkan13Features::default().synchronization2(true);
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .push_next(&mut v12)
            .push_next(&mut v13);
        // SAFETY: the physical device belongs to the instance; the features were checked
        // by `Context::load`; `info` and its chain live across the call.
        let device = unsafe {
            context
                .instance
                .create_device(context.physical, &info, None)
        }
        .map_err(|e| vk_check(e, "vkCreateDevice"))?;
        // SAFETY: queue 0 of a family the device was created with.
        let queue = unsafe { device.get_device_queue(context.facts.queue_family, 0) };
        Ok(RawDevice {
            context: Arc::clone(context),
            device,
            queue,
        })
    }
}

impl Drop for RawDevice {
    fn drop(&mut self) {
        // SAFETY: every object made from the device holds an `Arc` of it, so none is left;
        // waiting idle first lets in-flight work finish.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
        }
    }
}
