//! Registers the mock as backend `mock` for run-time selection by name.

use memreuse_core::{AnyBackend, BackendError, BackendOptions, BackendRegistration};

use crate::config::{DEFAULT_CAPACITY, MockConfig};
use crate::device::MockDevice;

/// Simulated devices exist in any number; this is what `device_count` reports.
const MOCK_DEVICE_COUNT: usize = 1024;

#[expect(
    clippy::unnecessary_wraps,
    reason = "the signature is fixed by BackendRegistration"
)]
fn device_count() -> Result<usize, BackendError> {
    Ok(MOCK_DEVICE_COUNT)
}

/// Opens an independent mock device (its own executor) as asked by `options`.
fn open(options: &BackendOptions) -> Result<AnyBackend, BackendError> {
    let config = MockConfig {
        capacity: options.memory_capacity.unwrap_or(DEFAULT_CAPACITY),
        deterministic_seed: options.deterministic_seed,
        first_device_index: options.device,
        race_detection: !options.disable_native_race_detection,
        ..MockConfig::default()
    };
    Ok(AnyBackend::new(MockDevice::new(config)?))
}

memreuse_core::inventory::submit! {
    BackendRegistration {
        name: crate::error::BACKEND_NAME,
        summary: "strict simulated device: host memory, async streams, happens-before race detector",
        device_count,
        open,
    }
}
