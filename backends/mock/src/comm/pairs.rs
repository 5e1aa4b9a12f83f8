//! [`PairGroups`]: the two-rank joint groups a communicator's point-to-point ops run on.

use std::collections::HashMap;

use memreuse_core::BackendError;
use parking_lot::Mutex;

use crate::device::MockDevice;
use crate::error::BACKEND_NAME;
use crate::joint::JointGroup;

/// One two-rank [`JointGroup`] per ordered `(sender, receiver)` pair of a communicator's
/// ranks, created on first use and shared by every member.
///
/// Why one group per ordered pair: joint ops match in issue order within a group, so
/// giving each direction its own group makes the k-th send from a to b match the k-th
/// receive at b from a (NCCL's rule), whatever else either rank sends or receives. In each
/// pair group the sender is rank 0 and the receiver rank 1, the layout
/// [`collective::send_recv`](crate::collective::send_recv) expects.
pub struct PairGroups {
    /// Device of each communicator rank.
    devices: Vec<MockDevice>,
    /// Created lazily: most of the n² pairs of a large communicator are never used, and
    /// each group is a slot in the cluster's state.
    groups: Mutex<HashMap<(usize, usize), JointGroup>>,
}

impl std::fmt::Debug for PairGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PairGroups({} ranks, {} pairs in use)",
            self.devices.len(),
            self.groups.lock().len()
        )
    }
}

impl PairGroups {
    /// The pair groups of a communicator whose rank `r` runs on `devices[r]` (all of one
    /// [`MockCluster`](crate::MockCluster)); no group exists until [`PairGroups::get`].
    pub fn new(devices: &[MockDevice]) -> PairGroups {
        PairGroups {
            devices: devices.to_vec(),
            groups: Mutex::new(HashMap::new()),
        }
    }

    /// The group of `sender` -> `receiver` (communicator ranks), created on first use. The
    /// same group is returned to every caller, so both ends submit into one issue order.
    /// Refuses, with `InvalidArgument`, ranks out of range or equal.
    pub fn get(&self, sender: usize, receiver: usize) -> Result<JointGroup, BackendError> {
        let size = self.devices.len();
        if sender >= size || receiver >= size || sender == receiver {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "PairGroups::get",
                format!("({sender}, {receiver}) is not a pair of distinct ranks below {size}"),
            ));
        }
        // Held across creation so two members asking at once cannot create two groups for
        // one pair (their ops would then never match).
        let mut groups = self.groups.lock();
        if let Some(g) = groups.get(&(sender, receiver)) {
            return Ok(g.clone());
        }
        let g = JointGroup::new(&[self.devices[sender].clone(), self.devices[receiver].clone()])?;
        groups.insert((sender, receiver), g.clone());
        Ok(g)
    }

    /// [`JointGroup::abort`]s every pair group created so far: a communicator abort must
    /// also fail the point-to-point ops still waiting for a peer, not only collectives.
    pub fn abort(&self, reason: &str) {
        for g in self.groups.lock().values() {
            g.abort(reason);
        }
    }
}
