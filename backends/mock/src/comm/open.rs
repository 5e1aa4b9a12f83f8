//! Opening a mock world: a cluster of devices and the world communicator over them.

use memreuse_core::comm::ErasedCommunicator;
use memreuse_core::{AnyBackend, BackendError, RankEndpoint, WorldOptions};

use super::family::{Family, MockCommunicator};
use crate::cluster::MockCluster;
use crate::config::{DEFAULT_CAPACITY, MockConfig};
use crate::device::MockDevice;

/// Opens `options.world_size` mock devices in one cluster, with one world communicator.
/// Returns, per rank, the concrete device and communicator (for tests that want the mock's
/// extras: fault injection, race reports).
pub fn open_mock_world(
    world_size: usize,
    config: MockConfig,
) -> Result<Vec<(MockDevice, MockCommunicator)>, BackendError> {
    let cluster = MockCluster::new(world_size, config)?;
    let devices = cluster.into_devices();
    let family = Family::new(devices.clone())?;
    Ok(devices
        .into_iter()
        .enumerate()
        .map(|(rank, d)| {
            (
                d,
                MockCommunicator::new(std::sync::Arc::clone(&family), rank),
            )
        })
        .collect())
}

/// The `WorldRegistration` entry point: erased endpoints for the conformance runner.
pub(crate) fn open_world(options: &WorldOptions) -> Result<Vec<RankEndpoint>, BackendError> {
    let config = MockConfig {
        capacity: options.backend.memory_capacity.unwrap_or(DEFAULT_CAPACITY),
        deterministic_seed: options.backend.deterministic_seed,
        joint_timeout: options.timeout,
        race_detection: !options.backend.disable_native_race_detection,
        ..MockConfig::default()
    };
    Ok(open_mock_world(options.world_size, config)?
        .into_iter()
        .enumerate()
        .map(|(rank, (device, comm))| RankEndpoint {
            rank,
            backend: AnyBackend::new(device),
            communicator: Box::new(ErasedCommunicator::<MockDevice>::new(Box::new(comm))),
        })
        .collect())
}

memreuse_core::inventory::submit! {
    memreuse_core::WorldRegistration { backend: crate::error::BACKEND_NAME, open_world }
}
