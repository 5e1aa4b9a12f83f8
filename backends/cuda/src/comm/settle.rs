//! Waiting for a non-blocking communicator after each call (NCCL forbids the next call
//! while one is `ncclInProgress`).

use cudarc::nccl::sys;
use memreuse_core::comm::CommError;
use std::time::Duration;

use super::NcclCommunicator;
use crate::error::nccl_comm;
use crate::nccl_init::{POLL_INTERVAL, WaitError, comm_state, still_in_progress, wait_until};

impl NcclCommunicator {
    /// Polls a non-blocking communicator until `call` settled. Stops early when `abort()`
    /// was called meanwhile (it waits for the read lock this caller holds, so it must not
    /// wait `limit` long). On a timeout the communicator is marked aborted: NCCL forbids the
    /// next call while it is in progress, and the process group's `abort` or the drop then
    /// aborts it for real.
    pub(super) fn settle(
        &self,
        call: &'static str,
        comm: sys::ncclComm_t,
        limit: Duration,
    ) -> Result<(), CommError> {
        let start = std::time::Instant::now();
        let r = wait_until(
            limit,
            POLL_INTERVAL,
            || {
                if let Some(reason) = self.aborted.lock().clone() {
                    return Err(CommError::Aborted { reason });
                }
                // SAFETY: the caller holds the read lock: `comm` stays live.
                unsafe { comm_state(comm) }.map_err(|e| nccl_comm(call, &e))
            },
            || start.elapsed(),
            std::thread::sleep,
        );
        match r {
            Ok(()) => Ok(()),
            Err(WaitError::Failed(e)) => Err(e),
            Err(WaitError::TimedOut { .. }) => {
                let e = still_in_progress(call, limit);
                self.aborted.lock().get_or_insert_with(|| e.to_string());
                Err(e)
            }
        }
    }
}
