//! Layer 1: the Vulkan loader opened at run time (`ash::Entry::load`), one `VkInstance` per
//! process, and the physical device every memreuse device of this backend is made on.
//!
//! Nothing here panics because a loader, a driver or a feature is missing: each is
//! [`BackendError::Unavailable`] naming what was tried and what to install.

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use ash::vk;
use memreuse_core::BackendError;

use crate::result::{BACKEND, vk_check};

/// Variable naming the Vulkan loader to open instead of `libvulkan.so.1`.
pub const LOADER_VAR: &str = "MEMREUSE_VULKAN_LOADER";

/// The loader file name `ash::Entry::load` opens on Linux (searched on the system path).
pub const DEFAULT_LOADER: &str = "libvulkan.so.1";

/// What this backend needs of a physical device, checked by [`Context::load`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFacts {
    /// `VkPhysicalDeviceProperties::deviceName`.
    pub name: String,
    /// Vulkan version the driver reports (`major.minor.patch`).
    pub api_version: String,
    /// The queue family used (graphics, compute or transfer; the first that has one).
    pub queue_family: u32,
    /// The memory type every allocation uses: host visible and coherent, device local
    /// when the driver offers such a type.
    pub memory_type: u32,
    /// Size of the heap of that memory type, in bytes (the default capacity).
    pub heap_bytes: u64,
    /// `maxMemoryAllocationSize`: larger requests are refused as out of memory.
    pub max_allocation: u64,
}

/// The loaded loader, the process's instance and the chosen physical device.
pub struct Context {
    /// Keeps the loader library open (every function pointer below comes from it).
    pub entry: ash::Entry,
    /// The instance (Vulkan 1.3). Never destroyed: it lives as long as the process.
    pub instance: ash::Instance,
    /// The physical device every memreuse device of this backend is a logical device of.
    pub physical: vk::PhysicalDevice,
    /// What was found on it.
    pub facts: DeviceFacts,
    /// Where the loader came from (for messages).
    pub loader: String,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Context({} via {}, Vulkan {})",
            self.facts.name, self.loader, self.facts.api_version
        )
    }
}

fn unavailable(reason: String) -> BackendError {
    BackendError::Unavailable {
        backend: BACKEND.to_owned(),
        reason,
    }
}

/// The process's context, loaded on first use from `$MEMREUSE_VULKAN_LOADER` or
/// [`DEFAULT_LOADER`]. A failure is remembered: later calls return the same error.
pub fn context() -> Result<Arc<Context>, BackendError> {
    static CONTEXT: OnceLock<Result<Arc<Context>, BackendError>> = OnceLock::new();
    CONTEXT
        .get_or_init(|| {
            let path = std::env::var_os(LOADER_VAR).map(PathBuf::from);
            Context::load(path.as_deref()).map(Arc::new)
        })
        .clone()
}

impl Context {
    /// Opens the loader (`loader`, or [`DEFAULT_LOADER`] on the system search path),
    /// creates a Vulkan 1.3 instance and picks the first physical device with timeline
    /// semaphores, synchronization2 and a host-visible coherent memory type.
    pub fn load(loader: Option<&Path>) -> Result<Context, BackendError> {
        let tried = loader.map_or_else(
            || format!("{DEFAULT_LOADER} (system search path, LD_LIBRARY_PATH)"),
            |p| format!("{} (from {LOADER_VAR})", p.display()),
        );
        // SAFETY: opening the Vulkan loader runs its initialisers; it is the library the
        // Vulkan specification defines for this purpose, with no other precondition.
        let entry = unsafe {
            match loader {
                Some(p) => ash::Entry::load_from(p),
                None => ash::Entry::load(),
            }
        }
        .map_err(|e| {
            unavailable(format!(
                "could not open the Vulkan loader: tried {tried}: {e}; install a loader \
                 and a driver (Debian: libvulkan1 mesa-vulkan-drivers)"
            ))
        })?;
        // SAFETY: `entry` holds valid global function pointers.
        let version = unsafe { entry.try_enumerate_instance_version() }
            .map_err(|e| vk_check(e, "vkEnumerateInstanceVersion"))?
            .unwrap_or(vk::API_VERSION_1_0);
        if version < vk::API_VERSION_1_3 {
            return Err(unavailable(format!(
                "the Vulkan loader {tried} supports Vulkan {}, this backend needs 1.3",
                version_string(version)
            )));
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"memreuse")
            .engine_name(c"memreuse-vulkan")
            .api_version(vk::API_VERSION_1_3);
        let create = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: `create` and what it points to live across the call.
        let instance = unsafe { entry.create_instance(&create, None) }.map_err(|e| {
            if e == vk::Result::ERROR_INCOMPATIBLE_DRIVER {
                unavailable(format!(
                    "no Vulkan driver found by {tried} (vkCreateInstance: \
                     VK_ERROR_INCOMPATIBLE_DRIVER; check VK_DRIVER_FILES or install \
                     mesa-vulkan-drivers)"
                ))
            } else {
                vk_check(e, "vkCreateInstance")
            }
        })?;
        match pick_physical(&instance) {
            Ok((physical, facts)) => Ok(Context {
                entry,
                instance,
                physical,
                facts,
                loader: tried,
            }),
            Err(reason) => {
                // SAFETY: nothing was created from this instance.
                unsafe { instance.destroy_instance(None) };
                Err(unavailable(format!("{reason} (loader {tried})")))
            }
        }
    }
}

fn version_string(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

/// The first physical device this backend can use, or why none fits.
fn pick_physical(instance: &ash::Instance) -> Result<(vk::PhysicalDevice, DeviceFacts), String> {
    // SAFETY: valid instance.
    let devices = unsafe { instance.enumerate_physical_devices() }
        .map_err(|e| format!("vkEnumeratePhysicalDevices failed: {e}"))?;
    if devices.is_empty() {
        return Err("the Vulkan loader found no physical device".to_owned());
    }
    let mut refusals = Vec::new();
    for physical in devices {
        match facts_of(instance, physical) {
            Ok(facts) => return Ok((physical, facts)),
            Err(why) => refusals.push(why),
        }
    }
    Err(format!("no usable Vulkan device: {}", refusals.join("; ")))
}

fn facts_of(instance: &ash::Instance, physical: vk::PhysicalDevice) -> Result<DeviceFacts, String> {
    let mut maint3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut maint3);
    // SAFETY: `physical` comes from this instance; the chain outlives the call.
    unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
    let props = props2.properties;
    let max_allocation = maint3.max_memory_allocation_size;
    let name = props.device_name_as_c_str().map_or_else(
        |_| "?".to_owned(),
        |n: &CStr| n.to_string_lossy().into_owned(),
    );
    if props.api_version < vk::API_VERSION_1_3 {
        return Err(format!(
            "{name} supports Vulkan {}, 1.3 is needed",
            version_string(props.api_version)
        ));
    }
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut v13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut features = vk::PhysicalDeviceFeatures2::default()
        .push_next(&mut v12)
        .push_next(&mut v13);
    // SAFETY: as above.
    unsafe { instance.get_physical_device_features2(physical, &mut features) };
    if v12.timeline_semaphore == vk::FALSE || v13.synchronization2 == vk::FALSE {
        return Err(format!(
            "{name} lacks timeline semaphores or synchronization2"
        ));
    }
    // SAFETY: as above.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
    let wanted = vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER;
    let queue_family = families
        .iter()
        .position(|f| f.queue_count > 0 && f.queue_flags.intersects(wanted))
        .ok_or_else(|| format!("{name} has no queue that can copy"))? as u32;
    // SAFETY: as above.
    let memory = unsafe { instance.get_physical_device_memory_properties(physical) };
    let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
    let types = &memory.memory_types[..memory.memory_type_count as usize];
    let memory_type = types
        .iter()
        .position(|t| {
            t.property_flags
                .contains(host | vk::MemoryPropertyFlags::DEVICE_LOCAL)
        })
        .or_else(|| types.iter().position(|t| t.property_flags.contains(host)))
        .ok_or_else(|| format!("{name} has no host-visible coherent memory type"))?
        as u32;
    let heap = types[memory_type as usize].heap_index as usize;
    Ok(DeviceFacts {
        name,
        api_version: version_string(props.api_version),
        queue_family,
        memory_type,
        heap_bytes: memory.memory_heaps[heap].size,
        max_allocation,
    })
}
