//! Registrations: backend `vulkan` (one device by name) and its in-process world opener
//! (one `VkDevice` per rank on the one physical device, one communicator over them).

use memreuse_core::comm::ErasedCommunicator;
use memreuse_core::{
    AnyBackend, BackendError, BackendOptions, BackendRegistration, RankEndpoint, WorldOptions,
    WorldRegistration,
};

use crate::comm::{VulkanCommunicator, communicators};
use crate::device::{DeviceConfig, VulkanDevice};
use crate::result::BACKEND;
use crate::sys::context;

/// Variable setting how many memreuse devices (logical `VkDevice`s) the backend offers.
pub const DEVICES_VAR: &str = "MEMREUSE_VULKAN_DEVICES";

/// Devices offered when [`DEVICES_VAR`] is unset: enough for the 16-rank schedules.
pub const DEFAULT_DEVICES: usize = 16;

/// The most devices [`DEVICES_VAR`] may ask for.
pub const MAX_DEVICES: usize = 256;

/// Parses a [`DEVICES_VAR`] value (`None`: unset).
pub fn parse_device_count(value: Option<&str>) -> Result<usize, BackendError> {
    let Some(raw) = value else {
        return Ok(DEFAULT_DEVICES);
    };
    match raw.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_DEVICES).contains(&n) => Ok(n),
        _ => Err(BackendError::invalid_argument(
            BACKEND,
            "device_count",
            format!("{DEVICES_VAR}={raw:?}: expected a whole number from 1 to {MAX_DEVICES}"),
        )),
    }
}

/// How many devices this backend offers: [`DEVICES_VAR`] (default [`DEFAULT_DEVICES`]), once
/// a loader, a driver and a usable physical device are there.
pub fn device_count() -> Result<usize, BackendError> {
    context()?;
    let var = std::env::var(DEVICES_VAR).ok();
    parse_device_count(var.as_deref())
}

fn config_of(options: &BackendOptions, index: usize) -> Result<DeviceConfig, BackendError> {
    let n = device_count()?;
    if index >= n {
        return Err(BackendError::Unavailable {
            backend: BACKEND.to_owned(),
            reason: format!("device {index} asked for, {n} offered ({DEVICES_VAR})"),
        });
    }
    Ok(DeviceConfig {
        capacity: options.memory_capacity,
        ..DeviceConfig::new(index)
    })
}

fn open(options: &BackendOptions) -> Result<AnyBackend, BackendError> {
    let config = config_of(options, options.device)?;
    Ok(AnyBackend::new(VulkanDevice::open(&config)?))
}

/// Opens `options.world_size` devices and one communicator over them. Host waits on
/// these devices give up after twice `options.timeout`.
pub fn open_vulkan_world(
    options: &WorldOptions,
) -> Result<Vec<(VulkanDevice, VulkanCommunicator)>, BackendError> {
    let n = options.world_size;
    if n == 0 {
        return Err(BackendError::invalid_argument(
            BACKEND,
            "open_world",
            "a world needs at least one rank",
        ));
    }
    // As the mock's: a host wait twice as long as a missing peer is given is stuck.
    let host_timeout = options.timeout.saturating_mul(2);
    let devices = (0..n)
        .map(|r| {
            VulkanDevice::open(&DeviceConfig {
                host_timeout,
                ..config_of(&options.backend, r)?
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let comms = communicators(devices.clone(), options.timeout)?;
    Ok(devices.into_iter().zip(comms).collect())
}

fn open_world(options: &WorldOptions) -> Result<Vec<RankEndpoint>, BackendError> {
    Ok(open_vulkan_world(options)?
        .into_iter()
        .enumerate()
        .map(|(rank, (device, comm))| RankEndpoint {
            rank,
            backend: AnyBackend::new(device),
            communicator: Box::new(ErasedCommunicator::<VulkanDevice>::new(Box::new(comm))),
        })
        .collect())
}

memreuse_core::inventory::submit! {
    BackendRegistration {
        name: BACKEND,
        summary: "Vulkan 1.3 through ash (loader opened at run time; one VkDevice per device; CI: Mesa lavapipe)",
        device_count,
        open,
    }
}

memreuse_core::inventory::submit! {
    WorldRegistration { backend: BACKEND, open_world }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_count_variable_is_checked() {
        assert_eq!(parse_device_count(None).unwrap(), DEFAULT_DEVICES);
        assert_eq!(parse_device_count(Some(" 4 ")).unwrap(), 4);
        for bad in ["0", "257", "four", ""] {
            let e = parse_device_count(Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains(DEVICES_VAR) && e.contains("1 to 256"),
                "{bad}: {e}"
            );
        }
    }
}
