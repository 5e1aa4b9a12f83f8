//! [`MockCluster`]: several mock devices sharing one executor, so that joint ops (the
//! mock communicator's collectives) can span them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use memreuse_core::BackendError;
use parking_lot::{Condvar, Mutex};

use crate::config::MockConfig;
use crate::device::{MockDevice, Owner};
use crate::error::invalid;
use crate::joint::JointGroup;
use crate::memory::Memory;
use crate::world::{Core, DeviceState, World};
use memreuse_core::testing::SplitMix64;

static NEXT_CLUSTER_UID: AtomicU64 = AtomicU64::new(1);

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
            return Err(invalid(
                "MockCluster::new",
                "a cluster needs at least one device",
            ));
        }
        let devices = (0..n)
            .map(|i| DeviceState {
                memory: Memory::new(
                    config.first_device_index + i,
                    config.capacity,
                    config.backing,
                    config.malloc_fault,
                ),
                host: memreuse_core::race::VClock::default(),
                streams: Vec::new(),
                label: Arc::from(""),
                detector: memreuse_core::race::DeviceDetector::new(config.max_race_reports),
                last_error: None,
            })
            .collect();
        let first_index = config.first_device_index;
        let world = World {
            devices,
            streams: Vec::new(),
            groups: Vec::new(),
            next_op: 0,
            rng: config.deterministic_seed.map(SplitMix64::new),
            driving: false,
            shutdown: false,
            trace: Vec::new(),
            race_detection: config.race_detection,
        };
        let core = Arc::new(Core {
            world: Mutex::new(world),
            cv: Condvar::new(),
            config,
            uid: NEXT_CLUSTER_UID.fetch_add(1, Ordering::Relaxed),
        });
        let owner = Arc::new(Owner {
            core: Arc::clone(&core),
        });
        {
            let mut w = core.world.lock();
            for slot in 0..n {
                // The default (`compute`) stream.
                MockDevice::add_stream(&core, &mut w, slot)?;
            }
        }
        let devices = (0..n)
            .map(|slot| MockDevice::from_parts(Arc::clone(&owner), slot, first_index + slot))
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
