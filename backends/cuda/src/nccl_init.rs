//! A deadline for NCCL communicator initialization.
//!
//! `ncclCommInitRank` blocks until every rank joined, with no deadline of its own: one rank
//! that never arrives hangs the others forever. [`init_rank_with_deadline`] creates the
//! communicator non-blocking instead (`ncclCommInitRankConfig` with `blocking = 0`), polls
//! `ncclCommGetAsyncError` while it reports `ncclInProgress`, and on timeout aborts it
//! (`ncclCommAbort`) and returns [`InitError::TimedOut`].
//!
//! Opt-in, as in PyTorch (`TORCH_NCCL_USE_COMM_NONBLOCKING`): only when
//! [`NCCL_INIT_TIMEOUT_ENV`] is set (whole seconds) does a launched rank use it; unset, the
//! rank initializes with the blocking `ncclCommInitRank`, the path every NCCL user runs.
//! The non-blocking path has not yet run against a real NCCL (no GPU was lent to the session
//! that wrote it); [`SUGGESTED_NCCL_INIT_TIMEOUT`] is a sensible value to set.
//!
//! The non-blocking path needs two symbols the blocking one does not,
//! `ncclCommInitRankConfig` and `ncclCommFinalize` (NCCL 2.14+; a non-blocking communicator
//! is finalized before it is destroyed). Each is probed by name before first use
//! ([`missing_nonblocking_symbol`]; cudarc panics at the first call of a missing symbol, and
//! `ncclGetVersion` does not prove a symbol is there). The documented fallback when either is
//! absent: the rank initializes with the blocking `ncclCommInitRank` (no deadline) and a
//! warning names the missing symbol.
//!
//! A non-blocking communicator may answer `ncclInProgress` to any later call too, and NCCL
//! then wants its state polled before the next call: [`NcclCommunicator`](crate::NcclCommunicator)
//! does that after every call on such a communicator ([`wait_ready`]).

use std::time::{Duration, Instant};

use cudarc::nccl::result as nccl;
use cudarc::nccl::sys;
use thiserror::Error;

use memreuse_core::BackendError;
use memreuse_core::comm::CommError;

use crate::error::{BACKEND_NAME, NcclFailure};

/// The variable holding the communicator-init timeout in whole seconds.
pub const NCCL_INIT_TIMEOUT_ENV: &str = "MEMREUSE_NCCL_INIT_TIMEOUT_S";
/// A sensible value for [`NCCL_INIT_TIMEOUT_ENV`] (unset means no deadline).
pub const SUGGESTED_NCCL_INIT_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest accepted timeout (one day).
pub const MAX_NCCL_INIT_TIMEOUT_S: u64 = 86_400;
/// How often the state is polled.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(1);
/// `NCCL_CONFIG_UNDEF_INT`: NCCL picks its default.
const UNDEF_INT: std::ffi::c_int = std::ffi::c_int::MIN;
/// `NCCL_VERSION(2, 30, 0)`: the `ncclConfig_t` layout cudarc binds. An older NCCL copies
/// only the fields it knows (it reads `size` first), so the larger struct is safe.
const CONFIG_VERSION: std::ffi::c_uint = 23_000;

/// The symbols the non-blocking path calls and the blocking one does not.
pub(crate) const NONBLOCKING_SYMBOLS: [&str; 2] = ["ncclCommInitRankConfig", "ncclCommFinalize"];

/// The first of [`NONBLOCKING_SYMBOLS`] the loaded NCCL does not export (`None`: the
/// non-blocking path can run). Probed by name, never called.
pub(crate) fn missing_nonblocking_symbol() -> Option<&'static str> {
    NONBLOCKING_SYMBOLS
        .iter()
        .copied()
        .find(|name| !crate::standin::nccl_has(name))
}

/// The init deadline a rank can honour: `requested`, or `None` (blocking init) when the
/// loaded NCCL lacks a symbol of the non-blocking path, with a warning naming it.
pub(crate) fn usable_init_timeout(requested: Option<Duration>) -> Option<Duration> {
    let limit = requested?;
    match missing_nonblocking_symbol() {
        None => Some(limit),
        Some(missing) => {
            tracing::warn!(
                "{NCCL_INIT_TIMEOUT_ENV} is set, but the loaded NCCL does not export {missing} \
                 (NCCL 2.14+): initializing with the blocking ncclCommInitRank, without a deadline"
            );
            None
        }
    }
}

/// [`NCCL_INIT_TIMEOUT_ENV`] holds something other than whole seconds in range.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "{NCCL_INIT_TIMEOUT_ENV}={value:?} is invalid: expected whole seconds \
     1..={MAX_NCCL_INIT_TIMEOUT_S} (unset: blocking init with no deadline)"
)]
pub struct InitTimeoutError {
    /// The value found.
    pub value: String,
}

/// Parses the timeout variable's value (`None`: unset, so no deadline and blocking init).
/// Surrounding whitespace is allowed; anything but ASCII digits (signs, units, fractions),
/// 0 and values above a day are errors.
pub fn parse_init_timeout(value: Option<&str>) -> Result<Option<Duration>, InitTimeoutError> {
    let Some(raw) = value else {
        return Ok(None);
    };
    let t = raw.trim();
    let bad = || InitTimeoutError {
        value: raw.to_owned(),
    };
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match t.parse::<u64>() {
        Ok(s) if (1..=MAX_NCCL_INIT_TIMEOUT_S).contains(&s) => Ok(Some(Duration::from_secs(s))),
        _ => Err(bad()),
    }
}

/// Reads [`NCCL_INIT_TIMEOUT_ENV`].
pub fn init_timeout_from_env() -> Result<Option<Duration>, InitTimeoutError> {
    match std::env::var(NCCL_INIT_TIMEOUT_ENV) {
        Ok(v) => parse_init_timeout(Some(&v)),
        Err(std::env::VarError::NotPresent) => parse_init_timeout(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(InitTimeoutError {
            value: v.to_string_lossy().into_owned(),
        }),
    }
}

/// What one poll saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Poll {
    /// Still `ncclInProgress`.
    Pending,
    /// Done (`ncclSuccess`).
    Ready,
}

/// Why [`wait_until`] stopped without the operation becoming ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WaitError<E> {
    /// Still pending after `waited`.
    TimedOut { waited: Duration },
    /// The poll reported an error.
    Failed(E),
}

/// Polls until `poll` reports ready, fails, or `timeout` has passed on `elapsed` (polling
/// once more at the deadline); sleeps `interval` between polls. Clock and sleep are
/// injected so the logic is tested without NCCL.
pub(crate) fn wait_until<E>(
    timeout: Duration,
    interval: Duration,
    mut poll: impl FnMut() -> Result<Poll, E>,
    mut elapsed: impl FnMut() -> Duration,
    mut sleep: impl FnMut(Duration),
) -> Result<(), WaitError<E>> {
    loop {
        let seen = elapsed();
        match poll().map_err(WaitError::Failed)? {
            Poll::Ready => return Ok(()),
            Poll::Pending if seen >= timeout => return Err(WaitError::TimedOut { waited: seen }),
            Poll::Pending => sleep(interval.min(timeout.saturating_sub(seen))),
        }
    }
}

/// The communicator's state from `ncclCommGetAsyncError`.
///
/// # Safety
/// `comm` is a live communicator (possibly still initializing).
pub(crate) unsafe fn comm_state(comm: sys::ncclComm_t) -> Result<Poll, nccl::NcclError> {
    let mut state = sys::ncclResult_t::ncclSuccess;
    // SAFETY: `comm` is live (caller) and `state` a valid out pointer.
    unsafe { sys::ncclCommGetAsyncError(comm, &raw mut state) }.result()?;
    match state.result()? {
        nccl::NcclStatus::InProgress => Ok(Poll::Pending),
        _ => Ok(Poll::Ready),
    }
}

/// Waits (real clock) while a non-blocking communicator reports `ncclInProgress`.
///
/// # Safety
/// `comm` is a live communicator.
pub(crate) unsafe fn wait_ready(
    comm: sys::ncclComm_t,
    timeout: Duration,
) -> Result<(), WaitError<nccl::NcclError>> {
    let start = Instant::now();
    wait_until(
        timeout,
        POLL_INTERVAL,
        // SAFETY: the caller keeps `comm` live for the whole wait.
        || unsafe { comm_state(comm) },
        || start.elapsed(),
        std::thread::sleep,
    )
}

/// Maps the outcome of [`wait_ready`] after `call` on a non-blocking communicator.
pub(crate) fn wait_settled(
    call: &'static str,
    r: Result<(), WaitError<nccl::NcclError>>,
    limit: Duration,
) -> Result<(), CommError> {
    match r {
        Ok(()) => Ok(()),
        Err(WaitError::Failed(e)) => Err(crate::error::nccl_comm(call, &e)),
        Err(WaitError::TimedOut { .. }) => Err(still_in_progress(call, limit)),
    }
}

/// The error of a non-blocking communicator still `ncclInProgress` after `limit`.
pub(crate) fn still_in_progress(call: &'static str, limit: Duration) -> CommError {
    CommError::Backend(BackendError::Device {
        backend: BACKEND_NAME.to_owned(),
        call,
        code: sys::ncclResult_t::ncclInProgress as i64,
        code_name: "ncclInProgress".to_owned(),
        message: format!(
            "the non-blocking communicator was still in progress after {}s",
            limit.as_secs()
        ),
    })
}

/// `NCCL_CONFIG_INITIALIZER` with `blocking = 0`.
pub(crate) fn nonblocking_config() -> sys::ncclConfig_t {
    sys::ncclConfig_t {
        size: std::mem::size_of::<sys::ncclConfig_t>(),
        magic: 0xcafe_beef,
        version: CONFIG_VERSION,
        blocking: 0,
        cgaClusterSize: UNDEF_INT,
        minCTAs: UNDEF_INT,
        maxCTAs: UNDEF_INT,
        netName: std::ptr::null(),
        splitShare: UNDEF_INT,
        trafficClass: UNDEF_INT,
        commName: std::ptr::null(),
        collnetEnable: UNDEF_INT,
        CTAPolicy: UNDEF_INT,
        shrinkShare: UNDEF_INT,
        nvlsCTAs: UNDEF_INT,
        nChannelsPerNetPeer: UNDEF_INT,
        nvlinkCentricSched: UNDEF_INT,
        graphUsageMode: UNDEF_INT,
        numRmaCtx: UNDEF_INT,
        maxP2pPeers: UNDEF_INT,
    }
}

/// Why `init_rank_with_deadline` (the opt-in non-blocking init of `open_rank`) returned no communicator.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum InitError {
    /// Not every rank joined within the timeout; the communicator was aborted.
    #[error(
        "NCCL communicator init (rank {rank} of {size}) did not complete within {}s \
         ({NCCL_INIT_TIMEOUT_ENV}); the communicator was aborted",
        timeout.as_secs()
    )]
    TimedOut {
        /// This rank.
        rank: usize,
        /// World size.
        size: usize,
        /// The deadline.
        timeout: Duration,
    },
    /// An NCCL call failed (the communicator, if any, was aborted).
    #[error(transparent)]
    Nccl(#[from] NcclFailure),
}

/// Aborts a communicator that will not be used, logging a failure.
///
/// # Safety
/// `comm` is live (or null) and owned by the caller, who never uses it again.
unsafe fn abort(comm: sys::ncclComm_t) {
    if comm.is_null() {
        return;
    }
    // SAFETY: per the caller, `comm` is live and unused from now on.
    if let Err(e) = unsafe { nccl::comm_abort(comm) } {
        tracing::warn!("{}", NcclFailure::new("ncclCommAbort", &e));
    }
}

/// `ncclCommInitRankConfig` (non-blocking), then polls its state for at most `timeout`.
///
/// # Safety
/// The device's context is current on this thread, `id` is the job's unique id and
/// `rank < size`.
pub(crate) unsafe fn init_rank_with_deadline(
    size: usize,
    id: sys::ncclUniqueId,
    rank: usize,
    timeout: Duration,
) -> Result<sys::ncclComm_t, InitError> {
    let bad = |what: &str| {
        InitError::Nccl(NcclFailure {
            call: "ncclCommInitRankConfig",
            code: sys::ncclResult_t::ncclInvalidArgument as i64,
            code_name: "ncclInvalidArgument".into(),
            message: format!("{what} does not fit in a C int"),
        })
    };
    let n = std::ffi::c_int::try_from(size).map_err(|_| bad("world size"))?;
    let r = std::ffi::c_int::try_from(rank).map_err(|_| bad("rank"))?;
    let mut config = nonblocking_config();
    let mut comm: sys::ncclComm_t = std::ptr::null_mut();
    // SAFETY: `comm` and `config` are valid pointers for the call; the rest per the caller.
    let started = unsafe { nccl::comm_init_rank_config(&raw mut comm, n, id, r, &raw mut config) };
    if let Err(e) = started {
        // SAFETY: a handle NCCL may have produced before failing is ours alone.
        unsafe { abort(comm) };
        return Err(NcclFailure::new("ncclCommInitRankConfig", &e).into());
    }
    // SAFETY: `comm` is the live, initializing communicator created just now.
    match unsafe { wait_ready(comm, timeout) } {
        Ok(()) => Ok(comm),
        Err(e) => {
            // SAFETY: the communicator is ours alone and is dropped here.
            unsafe { abort(comm) };
            Err(match e {
                WaitError::TimedOut { .. } => InitError::TimedOut {
                    rank,
                    size,
                    timeout,
                },
                WaitError::Failed(e) => NcclFailure::new("ncclCommInitRankConfig", &e).into(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn timeout_values_are_parsed_strictly() {
        assert_eq!(parse_init_timeout(None), Ok(None));
        assert_eq!(
            parse_init_timeout(Some("45")),
            Ok(Some(Duration::from_secs(45)))
        );
        assert_eq!(
            parse_init_timeout(Some(" 7\n")),
            Ok(Some(Duration::from_secs(7)))
        );
        assert_eq!(
            parse_init_timeout(Some("86400")),
            Ok(Some(Duration::from_secs(86_400)))
        );
        for bad in [
            "",
            " ",
            "0",
            "-1",
            "+5",
            "1.5",
            "10s",
            "abc",
            "86401",
            "99999999999999999999",
        ] {
            let e = parse_init_timeout(Some(bad)).expect_err(bad);
            assert_eq!(e.value, bad);
            assert!(e.to_string().contains(NCCL_INIT_TIMEOUT_ENV), "{e}");
        }
    }

    /// A fake clock advanced only by the injected sleep.
    fn run(
        timeout: u64,
        mut poll: impl FnMut(u32) -> Result<Poll, &'static str>,
    ) -> (Result<(), WaitError<&'static str>>, u32, Duration) {
        let now = Cell::new(Duration::ZERO);
        let calls = Cell::new(0u32);
        let r = wait_until(
            Duration::from_millis(timeout),
            Duration::from_millis(10),
            || {
                calls.set(calls.get() + 1);
                poll(calls.get())
            },
            || now.get(),
            |d| now.set(now.get() + d),
        );
        (r, calls.get(), now.get())
    }

    #[test]
    fn ready_at_once_or_after_some_polls() {
        assert_eq!(run(100, |_| Ok(Poll::Ready)), (Ok(()), 1, Duration::ZERO));
        let (r, calls, t) = run(100, |n| Ok(if n < 4 { Poll::Pending } else { Poll::Ready }));
        assert_eq!((r, calls, t), (Ok(()), 4, Duration::from_millis(30)));
    }

    #[test]
    fn pending_past_the_deadline_times_out_after_a_last_poll() {
        let (r, calls, t) = run(25, |_| Ok(Poll::Pending));
        // Polls at 0, 10, 20, then a short sleep to exactly 25 and a final poll.
        assert_eq!(calls, 4);
        assert_eq!(t, Duration::from_millis(25));
        assert_eq!(
            r,
            Err(WaitError::TimedOut {
                waited: Duration::from_millis(25)
            })
        );
        // Ready on the very last poll still counts.
        let (r, _, _) = run(25, |n| Ok(if n < 4 { Poll::Pending } else { Poll::Ready }));
        assert_eq!(r, Ok(()));
    }

    #[test]
    fn a_failed_poll_stops_at_once() {
        let (r, calls, _) = run(1000, |n| {
            if n == 3 {
                Err("remote error")
            } else {
                Ok(Poll::Pending)
            }
        });
        assert_eq!((r, calls), (Err(WaitError::Failed("remote error")), 3));
    }

    #[test]
    fn the_config_is_nccls_initializer_with_blocking_off() {
        let c = nonblocking_config();
        assert_eq!(c.size, std::mem::size_of::<sys::ncclConfig_t>());
        assert_eq!((c.magic, c.version, c.blocking), (0xcafe_beef, 23_000, 0));
        assert_eq!((c.cgaClusterSize, c.maxP2pPeers), (UNDEF_INT, UNDEF_INT));
        assert!(c.netName.is_null() && c.commName.is_null());
    }
}
