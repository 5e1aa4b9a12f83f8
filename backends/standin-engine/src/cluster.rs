//! The mock cluster behind a stand-in's devices: created with the default configuration on
//! first use, replaced whole by `memreuse_standin_configure`.

use std::time::Duration;

use memreuse_core::BackendError;
use memreuse_mock::{DEFAULT_CAPACITY, MockCluster, MockConfig, MockDevice};
use parking_lot::Mutex;

/// Devices of the configuration a process starts with (every built-in schedule fits:
/// device caps, 4-rank groups).
pub const DEFAULT_DEVICES: usize = 16;

/// The configured cluster, with what the face keeps per configuration (`X`).
pub struct Cluster<X> {
    /// The devices, in ordinal order.
    pub devices: Vec<MockDevice>,
    /// How long a joint operation (collective) waits for its peers.
    pub timeout: Duration,
    /// The face's per-configuration state (e.g. CUDA's primary contexts).
    pub extra: X,
}

/// A lazily configured [`Cluster`], meant for a `static`.
pub struct ClusterCell<X> {
    state: Mutex<Option<Cluster<X>>>,
    extra: fn(usize) -> X,
}

impl<X> ClusterCell<X> {
    /// An unconfigured cell; `extra(devices)` makes the face's state of each configuration.
    #[must_use]
    pub const fn new(extra: fn(usize) -> X) -> Self {
        Self {
            state: Mutex::new(None),
            extra,
        }
    }

    /// Replaces the cluster with `devices` fresh devices of `config` (every device, stream
    /// and event of the old one becomes unknown to the mock). On error the old one stays.
    pub fn configure(&self, devices: usize, config: MockConfig) -> Result<(), BackendError> {
        let timeout = config.joint_timeout;
        let fresh = Cluster {
            devices: MockCluster::new(devices, config)?.into_devices(),
            timeout,
            extra: (self.extra)(devices),
        };
        *self.state.lock() = Some(fresh);
        Ok(())
    }

    /// Runs `f` on the cluster (under its lock), configuring the default one first if none
    /// was.
    pub fn with<T>(&self, f: impl FnOnce(&mut Cluster<X>) -> T) -> Result<T, BackendError> {
        let mut guard = self.state.lock();
        if guard.is_none() {
            drop(guard);
            self.configure(DEFAULT_DEVICES, MockConfig::with_capacity(DEFAULT_CAPACITY))?;
            guard = self.state.lock();
        }
        let cluster = guard.as_mut().ok_or_else(|| {
            BackendError::invalid_argument(
                "standin",
                "configure",
                "the cluster was replaced while it was being created",
            )
        })?;
        Ok(f(cluster))
    }

    /// Devices of the cluster (0 if it cannot be created).
    pub fn device_count(&self) -> usize {
        self.with(|c| c.devices.len()).unwrap_or(0)
    }

    /// Device `index`, if it exists.
    pub fn device(&self, index: usize) -> Option<MockDevice> {
        self.with(|c| c.devices.get(index).cloned()).ok().flatten()
    }

    /// The joint-operation timeout (60 s if the cluster cannot be created).
    pub fn timeout(&self) -> Duration {
        self.with(|c| c.timeout).unwrap_or(Duration::from_secs(60))
    }

    /// Races the devices' detectors found, over every device.
    pub fn race_count(&self) -> u64 {
        self.with(|c| c.devices.iter().map(MockDevice::race_count).sum())
            .unwrap_or(0)
    }
}
