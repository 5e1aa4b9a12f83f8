//! How the communicator contract runs a check: one thread per rank, a deadline after which
//! the check counts as hung (the communicators are then aborted), and the small helpers
//! every check shares. Kept apart so the checks of `comm_contract` and the per-type ones of
//! `comm_contract_types` share one harness.

use std::sync::mpsc;
use std::time::Duration;

use crate::backend::Backend;
use crate::comm::{CommError, Communicator};
use crate::ids::DevicePtr;

/// One rank as the opener returns it: its device and its member of the world communicator.
pub type Rank<B> = (B, Box<dyn Communicator<B>>);

/// What a check gives: `Err` says what went wrong.
pub(super) type CheckResult = Result<(), String>;

/// `r` with its error as a message naming `what` failed.
pub(super) fn comm<T>(what: &str, r: Result<T, CommError>) -> Result<T, String> {
    r.map_err(|e| format!("{what} failed: {e}"))
}

/// Runs `f(rank, device, comm)` on one thread per rank; gives up (aborting every
/// communicator) when they do not all finish within `limit`.
pub(super) fn per_rank<B: Backend>(
    ranks: &[Rank<B>],
    limit: Duration,
    f: &(dyn Fn(usize, &B, &dyn Communicator<B>) -> CheckResult + Sync),
) -> CheckResult {
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for (r, (dev, c)) in ranks.iter().enumerate() {
            let tx = tx.clone();
            scope.spawn(move || {
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    f(r, dev, c.as_ref())
                }))
                .unwrap_or_else(|_| Err(format!("rank {r}: the communicator panicked")));
                let _ = tx.send((r, out));
            });
        }
        drop(tx);
        let mut errors = Vec::new();
        let deadline = std::time::Instant::now() + limit;
        for _ in 0..ranks.len() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok((r, Err(e))) => errors.push(format!("rank {r}: {e}")),
                Ok((_, Ok(()))) => {}
                Err(_) => {
                    errors.push(format!(
                        "a rank did not finish within {limit:?}: hang (communicators aborted)"
                    ));
                    for (_, c) in ranks {
                        c.abort();
                    }
                    break;
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            errors.sort();
            Err(errors.join("; "))
        }
    })
}

/// Waits for the device, then frees `ptrs`.
pub(super) fn free_all<B: Backend>(dev: &B, ptrs: &[DevicePtr]) -> CheckResult {
    dev.synchronize_device()
        .map_err(|e| format!("synchronize_device: {e}"))?;
    for &p in ptrs {
        dev.free(p).map_err(|e| format!("free: {e}"))?;
    }
    Ok(())
}
