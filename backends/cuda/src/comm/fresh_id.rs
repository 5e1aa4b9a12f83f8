//! Sub-groups without `ncclCommSplit` (an NCCL older than 2.18, or a library that lacks the
//! symbol): each sub-group is a fresh communicator from a fresh unique id. The sub-group's
//! first listed rank makes the id (`ncclGetUniqueId`) and hands it to the other members
//! through the world's [`SplitFamily`] (every rank of an in-process world shares one); then
//! every member joins with the blocking `ncclCommInitRank`. One process per rank has no
//! shared family: there `new_group` stays `Unsupported`, naming the missing symbol.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cudarc::nccl::result as nccl;
use cudarc::nccl::sys;
use memreuse_core::BackendError;
use memreuse_core::comm::{CommError, Communicator};
use parking_lot::{Condvar, Mutex};

use super::NcclCommunicator;
use crate::device::CudaDevice;
use crate::error::{BACKEND_NAME, nccl_comm};

/// How long members wait for the first rank's id.
const ID_WAIT: Duration = Duration::from_secs(60);

/// What the ranks of one in-process world share for `new_group` without `ncclCommSplit`:
/// the unique id of each sub-group, by `new_group` call number.
#[derive(Default)]
pub(crate) struct SplitFamily {
    ids: Mutex<HashMap<u64, sys::ncclUniqueId>>,
    cv: Condvar,
}

impl SplitFamily {
    /// A family for a new world.
    pub(crate) fn new() -> Arc<SplitFamily> {
        Arc::new(SplitFamily::default())
    }
}

impl NcclCommunicator {
    /// `new_group` through a fresh unique id (see the module docs). `position` is this
    /// rank's index in `ranks`, `None` when it is not a member.
    pub(super) fn new_group_fresh_id(
        &self,
        ranks: &[usize],
        position: Option<usize>,
    ) -> Result<Option<Box<dyn Communicator<CudaDevice>>>, CommError> {
        let Some(family) = &self.family else {
            return Err(CommError::Backend(BackendError::unsupported(
                BACKEND_NAME,
                "new_group",
                "the loaded NCCL does not export ncclCommSplit (NCCL < 2.18), and ranks in \
                 separate processes share no store to hand out a fresh unique id",
            )));
        };
        // Every rank counts every call, member or not, so the numbers agree.
        let seq = self.splits.fetch_add(1, Ordering::AcqRel);
        let Some(position) = position else {
            return Ok(None);
        };
        self.check_alive()?;
        self.device.bind()?;
        let id = if position == 0 {
            let id = nccl::get_uniqueid().map_err(|e| nccl_comm("ncclGetUniqueId", &e))?;
            family.ids.lock().insert(seq, id);
            family.cv.notify_all();
            id
        } else {
            let mut ids = family.ids.lock();
            loop {
                if let Some(id) = ids.get(&seq) {
                    break *id;
                }
                if family.cv.wait_for(&mut ids, ID_WAIT).timed_out() {
                    return Err(CommError::Backend(BackendError::Timeout {
                        backend: BACKEND_NAME.to_owned(),
                        what: format!("the unique id of sub-group #{seq} from rank {}", ranks[0]),
                        millis: ID_WAIT.as_millis() as u64,
                    }));
                }
            }
        };
        let n = i32::try_from(ranks.len())
            .map_err(|_| CommError::invalid_argument("new_group", "too many ranks"))?;
        let mut child: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: `child` is a valid out pointer, `id` the sub-group's id made by its first
        // rank, `position < n`, and the device's context is current (bound above).
        unsafe { nccl::comm_init_rank(&raw mut child, n, id, position as i32) }
            .map_err(|e| nccl_comm("ncclCommInitRank", &e))?;
        // SAFETY: a fresh, initialized blocking communicator of `ranks.len()` ranks in which
        // this process is `position`, on this device, owned by nobody else.
        let mut sub = unsafe {
            NcclCommunicator::from_raw(self.device.clone(), child, position, ranks.len(), None)
        }?;
        sub.family = Some(Arc::clone(family));
        Ok(Some(Box::new(sub)))
    }
}
