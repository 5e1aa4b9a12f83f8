//! Opening a whole communicating world of ranks by backend name (the conformance runner,
//! tests, and single-process multi-device jobs).

use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use crate::comm::Communicator;
use crate::dyn_backend::AnyBackend;
use crate::error::BackendError;
use crate::registry::BackendOptions;

/// How to open a world.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorldOptions {
    /// Number of ranks.
    pub world_size: usize,
    /// Per-device options (`device` is ignored: rank `r` opens device `r`).
    pub backend: BackendOptions,
    /// How long a communication op waits for a missing peer before failing.
    pub timeout: Duration,
}

/// One rank of an opened world: its device and its communicator over every rank.
pub struct RankEndpoint {
    /// Global rank.
    pub rank: usize,
    /// The rank's device.
    pub backend: AnyBackend,
    /// The rank's member of the world communicator.
    pub communicator: Box<dyn Communicator<AnyBackend>>,
}

/// A backend's ability to open all ranks of a world inside this process. Submit it with
/// `inventory::submit!` next to the backend's [`crate::BackendRegistration`].
pub struct WorldRegistration {
    /// The backend's name (as in its `BackendRegistration`).
    pub backend: &'static str,
    /// Opens `options.world_size` ranks, one device each. Fails with
    /// `BackendError::Unavailable` when there are too few devices.
    pub open_world: fn(&WorldOptions) -> Result<Vec<RankEndpoint>, BackendError>,
}

inventory::collect!(WorldRegistration);

/// World openers registered at run time (plugins), beside the `inventory` ones.
static RUNTIME_WORLDS: RwLock<Vec<&'static WorldRegistration>> = RwLock::new(Vec::new());

/// Adds a run-time world opener (called by `crate::register_backend`).
pub(crate) fn push_runtime_world(registration: &'static WorldRegistration) {
    RUNTIME_WORLDS
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .push(registration);
}

/// The world opener of backend `name`, if it registered one (linked in or at run time).
pub fn find_world(name: &str) -> Option<&'static WorldRegistration> {
    inventory::iter::<WorldRegistration>
        .into_iter()
        .find(|r| r.backend == name)
        .or_else(|| {
            RUNTIME_WORLDS
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .copied()
                .find(|r| r.backend == name)
        })
}
