//! Closing a rank's communicator: destroyed when healthy (a non-blocking one finalized and
//! waited for first), aborted when it failed or may still be in progress, then the barrier
//! buffer freed once nothing can use it.

use cudarc::nccl::result as nccl;
use memreuse_core::Backend;
use memreuse_core::comm::Communicator;

use super::NcclCommunicator;
use crate::error;
use crate::nccl_init::wait_ready;

impl Drop for NcclCommunicator {
    fn drop(&mut self) {
        // A communicator marked aborted (a timed-out call) may still be in progress: abort it,
        // never finalize it.
        let mut failed = self.aborted.lock().is_some() || self.async_error().is_some();
        if let Some(comm) = self.comm.get_mut().take() {
            let _ = self.device.bind();
            if let (false, Some(limit)) = (failed, self.nonblocking) {
                // A non-blocking communicator is finalized (which may answer
                // `ncclInProgress`) and waited for before it is destroyed; if that fails
                // or takes too long, it is aborted instead.
                // SAFETY: the communicator is live and owned here alone (`&mut self`).
                let finalized = unsafe { nccl::comm_finalize(comm.0) }.is_ok()
                    // SAFETY: as above; it stays live during the wait.
                    && unsafe { wait_ready(comm.0, limit) }.is_ok();
                failed = !finalized;
            }
            // SAFETY: the communicator is live and owned here alone (`&mut self`). A healthy
            // one is destroyed (flushing its work); a failed one is aborted so a dead peer
            // cannot hang the drop.
            let r = unsafe {
                if failed {
                    nccl::comm_abort(comm.0)
                } else {
                    nccl::comm_destroy(comm.0)
                }
            };
            if let Err(e) = r {
                tracing::warn!("{}", error::nccl("ncclCommDestroy", &e));
            }
        }
        // The barrier buffer goes last, once nothing can still use it.
        let _ = self.device.synchronize_device();
        if let Some(p) = self.scratch.get_mut().take() {
            let _ = self.device.free(p);
        }
    }
}
