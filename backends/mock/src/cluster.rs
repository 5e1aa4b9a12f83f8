//! [`MockCluster`]: several mock devices sharing one executor, so that joint ops (the
//! mock communicator's collectives) can span them.

use memreuse_core::BackendError;

use crate::config::MockConfig;
use crate::device::MockDevice;
use crate::error::BACKEND_NAME;
use crate::joint::JointGroup;
use crate::owner::Owner;

/// `n` mock devices created together: one configuration, one executor (one scheduler in
/// deterministic mode), and joint ops across them.
#[derive(Clone, Debug)]
pub struct MockCluster {
    devices: Vec<MockDevice>,
}

impl MockCluster {
    /// Creates `n >= 1` devices with indices `config.first_device_index ..`.
    pub fn new(n: usize, config: MockConfig) -> Result<MockCluster, BackendError> {
        if n == 0 {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "MockCluster::new",
                "a cluster needs at least one device",
            ));
        }
        let first_index = config.first_device_index;
        let owner = Owner::start(n, config)?;
        let devices = (0..n)
            .map(|slot| {
                MockDevice::from_parts(std::sync::Arc::clone(&owner), slot, first_index + slot)
            })
            .collect();
        Ok(MockCluster { devices })
    }

    /// The devices, in order.
    pub fn devices(&self) -> &[MockDevice] {
        &self.devices
    }

    /// Device `i`, if it exists.
    pub fn device(&self, i: usize) -> Option<&MockDevice> {
        self.devices.get(i)
    }

    /// The devices, owned.
    pub fn into_devices(self) -> Vec<MockDevice> {
        self.devices
    }

    /// A joint-op group over all devices of the cluster, rank `r` on device `r`.
    pub fn group(&self) -> Result<JointGroup, BackendError> {
        JointGroup::new(&self.devices)
    }
}
