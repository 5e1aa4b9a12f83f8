//! Failed and timed-out collectives: the error reaches the user through `wait()` (blocking
//! wait) or `is_completed()`/`wait()` (otherwise), names the op, the work leaves the
//! in-flight list, what its policy held is released, and dropping the group leaves zero
//! bytes allocated on every rank (asserted by the harness after each body).
//!
//! Every wait for the watchdog is bounded polling (`Rank::eventually`) or the injected
//! `run_watchdog_once()`, never a bare sleep.

mod common;

use std::time::Duration;

use common::{Setup, run};
use memreuse::BackendError;
use memreuse::comm::{CommError, ReduceOp};
use memreuse::process_group::{PgError, ReuseMode};

const ELEMS: usize = 1024;
const MODES: [ReuseMode; 2] = [ReuseMode::AvoidRecordStream, ReuseMode::EraseRecordStream];

/// A setup whose world communicator fails its collective number `k` on every rank.
fn failing(world: usize, mode: ReuseMode, k: u64, blocking_wait: bool) -> Setup {
    let mut s = Setup::new(world, mode);
    s.inject_collective_failures = vec![k];
    s.expect_device_errors = true;
    s.blocking_wait = blocking_wait;
    s
}

/// The error of a failed collective: the process group's `Comm` variant naming the op,
/// carrying the device's injected fault.
fn assert_injected_failure(err: &PgError, op: &str) {
    assert!(
        matches!(
            err,
            PgError::Comm { op: o, source: CommError::Backend(BackendError::Injected { .. }), .. }
                if *o == op
        ),
        "expected an injected `{op}` failure, got {err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(op) && msg.contains("injected"), "{msg}");
}

#[test]
fn failed_collective_is_reported_by_blocking_wait_and_releases_the_shelf() {
    for mode in MODES {
        // Collective #0 succeeds, #1 fails: the failure is attributed to the right work.
        let out = run(&failing(2, mode, 1, true), |r| {
            let c = &r.compute;
            let t = r.tensor(ELEMS, 1.0, c);
            r.pg.all_reduce(&t, ReduceOp::Sum, c, true)
                .unwrap()
                .wait(c)
                .expect("collective #0 is not the injected one");
            let before = r.read(&t, c);
            let input = r.tensor(ELEMS, 2.0, c);
            let output = r.tensor(ELEMS * r.world, 0.0, c);
            let w = r.pg.all_gather(&input, &output, c, true).unwrap();
            drop(input); // freed while in flight: the policy holds it
            let err = w.wait(c).expect_err("blocking wait reports the failure");
            assert_eq!(w.error().map(|e| e.to_string()), Some(err.to_string()));
            r.pg.release_completed(); // what any next process-group call does first
            let stats = r.pg.stats();
            let inflight = r.pg.inflight_works();
            drop((t, output));
            let held = r.allocator.stats().allocated_bytes.current;
            (before, err, stats.works_failed, inflight, held)
        });
        for (rank, (before, err, failed, inflight, held)) in out.values.iter().enumerate() {
            assert_eq!(*before, vec![3.0; ELEMS], "mode {mode} rank {rank}");
            assert_injected_failure(err, "all_gather");
            assert_eq!(*failed, 1, "mode {mode} rank {rank}: counted once");
            assert_eq!(
                *inflight, 0,
                "mode {mode} rank {rank}: a failed work is done"
            );
            if mode == ReuseMode::AvoidRecordStream {
                assert_eq!(
                    *held, 0,
                    "rank {rank}: the failed wait() released the shelf"
                );
            }
        }
        assert!(out.device_errors.iter().all(Option::is_some), "mode {mode}");
    }
}

#[test]
fn failed_collective_without_blocking_wait_is_reported_by_polling_and_wait() {
    for mode in MODES {
        for world in [2, 4] {
            let out = run(&failing(world, mode, 0, false), |r| {
                let c = &r.compute;
                let t = r.tensor(ELEMS, 1.0, c);
                let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
                drop(t);
                // No process-group call in the loop: the watchdog thread must notice.
                r.eventually("the watchdog to record the failure", || w.error().is_some());
                let polled = w.is_completed().expect_err("is_completed reports it");
                let waited = w.wait(c).expect_err("wait() reports it");
                r.pg.release_completed();
                let s = r.pg.stats();
                let held = r.allocator.stats().allocated_bytes.current;
                (polled, waited, s.works_failed, r.pg.inflight_works(), held)
            });
            for (rank, (polled, waited, failed, inflight, held)) in out.values.iter().enumerate() {
                assert_injected_failure(polled, "all_reduce");
                assert_injected_failure(waited, "all_reduce");
                assert_eq!(*failed, 1, "mode {mode} world {world} rank {rank}");
                assert_eq!(*inflight, 0, "mode {mode} world {world} rank {rank}");
                if mode == ReuseMode::AvoidRecordStream {
                    assert_eq!(*held, 0, "world {world} rank {rank}: shelf released");
                }
            }
        }
    }
}

#[test]
fn collective_a_rank_never_joins_times_out_in_the_communicator() {
    for mode in MODES {
        let mut setup = Setup::new(2, mode);
        setup.config.joint_timeout = Duration::from_millis(300);
        setup.blocking_wait = true;
        setup.expect_device_errors = true;
        let out = run(&setup, |r| {
            if r.rank == 1 {
                return None; // never issues the collective
            }
            let c = &r.compute;
            let t = r.tensor(ELEMS, 1.0, c);
            let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
            drop(t);
            let err = w.wait(c).expect_err("blocking wait reports the timeout");
            r.pg.release_completed();
            let held = r.allocator.stats().allocated_bytes.current;
            Some((err, r.pg.stats().works_failed, r.pg.inflight_works(), held))
        });
        let (err, failed, inflight, held) = out.values[0].as_ref().expect("rank 0 ran");
        assert!(
            matches!(
                err,
                PgError::Comm {
                    op: "all_reduce",
                    source: CommError::Backend(BackendError::Timeout { millis: 300, .. }),
                    ..
                }
            ),
            "mode {mode}: {err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("all_reduce") && msg.contains("timed out"),
            "{msg}"
        );
        assert_eq!((*failed, *inflight), (1, 0), "mode {mode}");
        if mode == ReuseMode::AvoidRecordStream {
            assert_eq!(
                *held, 0,
                "the shelf is released once the timeout is reported"
            );
        }
        assert!(out.device_errors[0].is_some(), "mode {mode}");
    }
}

#[derive(Clone, Copy, Debug)]
enum Observer {
    /// The watchdog thread marks the timeout; the test only reads `work.error()`.
    WatchdogThread,
    /// No thread: the test drives `run_watchdog_once()` itself.
    ManualWatchdog,
    /// No thread: `wait()` with blocking wait reaches the group's timeout.
    BlockingWait,
}

fn timeout_setup(mode: ReuseMode, observer: Observer) -> Setup {
    let mut s = Setup::new(2, mode);
    s.timeout = Duration::from_millis(200); // the mock's own joint timeout stays at 60 s
    s.expect_device_errors = true;
    match observer {
        Observer::WatchdogThread => {}
        Observer::ManualWatchdog => s.watchdog = None,
        Observer::BlockingWait => {
            s.watchdog = None;
            s.blocking_wait = true;
        }
    }
    s
}

#[test]
fn process_group_timeout_fails_the_work_and_aborts_the_group() {
    for mode in MODES {
        for observer in [
            Observer::WatchdogThread,
            Observer::ManualWatchdog,
            Observer::BlockingWait,
        ] {
            let out = run(&timeout_setup(mode, observer), |r| {
                if r.rank == 1 {
                    return None;
                }
                let c = &r.compute;
                let t = r.tensor(ELEMS, 1.0, c);
                // Allocated up front: in mode 1 a later malloc would query the freed
                // tensor's event on the failed comm stream and report that error.
                let u = r.tensor(ELEMS, 1.0, c);
                let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
                drop(t);
                let err = match observer {
                    Observer::WatchdogThread => {
                        r.eventually("the watchdog to time the work out", || w.error().is_some());
                        w.wait(c).expect_err("wait() reports the timeout")
                    }
                    Observer::ManualWatchdog => {
                        r.eventually("a watchdog pass to time the work out", || {
                            r.pg.run_watchdog_once();
                            w.error().is_some()
                        });
                        w.wait(c).expect_err("wait() reports the timeout")
                    }
                    Observer::BlockingWait => w.wait(c).expect_err("blocking wait times out"),
                };
                // A timed-out communicator is aborted: nothing more is issued on it.
                let next = r.pg.all_reduce(&u, ReduceOp::Sum, c, true).map(|_| ());
                drop(u);
                r.pg.release_completed();
                let held = r.allocator.stats().allocated_bytes.current;
                Some((err, next, r.pg.stats().works_failed, held))
            });
            let (err, next, failed, held) = out.values[0].as_ref().expect("rank 0 ran");
            let what = format!("mode {mode} {observer:?}");
            assert!(
                matches!(
                    err,
                    PgError::Timeout {
                        op: "all_reduce",
                        millis: 200,
                        ..
                    }
                ),
                "{what}: {err:?}"
            );
            assert!(err.to_string().contains("timed out after 200 ms"), "{what}");
            assert!(
                matches!(next, Err(PgError::Aborted { .. })),
                "{what}: {next:?}"
            );
            assert_eq!(*failed, 1, "{what}");
            if mode == ReuseMode::AvoidRecordStream {
                assert_eq!(*held, 0, "{what}: nothing held after the timeout");
            }
        }
    }
}

#[test]
fn an_aborted_group_refuses_sub_groups_and_fails_its_peers_at_once() {
    let mut setup = Setup::new(2, ReuseMode::AvoidRecordStream);
    setup.expect_device_errors = true;
    // Long: a peer left waiting would report a timeout, not the abort.
    setup.timeout = Duration::from_secs(600);
    setup.blocking_wait = true;
    let out = run(&setup, |r| {
        let c = &r.compute;
        let t = r.tensor(ELEMS, 1.0, c);
        if r.rank == 1 {
            // Rank 1 fails before the collective and aborts, as a failing rank must.
            r.pg.abort();
            assert!(r.pg.is_aborted());
            let refused = r.pg.new_group(&[0, 1]).map(|g| g.is_some());
            drop(t);
            return refused.map_err(|e| e.to_string());
        }
        let result =
            r.pg.all_reduce(&t, ReduceOp::Sum, c, true)
                .and_then(|w| w.wait(c));
        drop(t);
        result.map(|()| false).map_err(|e| e.to_string())
    });
    let refused = out.values[1]
        .as_ref()
        .expect_err("aborted group made a sub-group");
    assert!(
        refused.contains("aborted") && refused.contains("sub-groups"),
        "{refused}"
    );
    let peer = out.values[0]
        .as_ref()
        .expect_err("the peer's collective must fail");
    assert!(
        peer.contains("aborted by rank 1") && !peer.contains("timed out"),
        "{peer}"
    );
}
