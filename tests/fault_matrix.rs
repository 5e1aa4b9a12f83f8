//! Fault-injection matrix: every injectable fault of the mock (the n-th raw malloc, the
//! k-th collective, an event whose query fails, a collective that times out) in every
//! reuse mode. After each, the allocator keeps serving (`allocate`, `process_events`,
//! `empty_cache` succeed), the error reached the caller exactly once, and nothing leaks
//! (the harness asserts zero bytes allocated on every rank after the group drops).
//!
//! The cases whose freed tensor waits on an event that can only fail (a collective that
//! failed or timed out in modes 0 and 1, an event query error in any mode) rely on the
//! allocator quarantining such blocks (`quarantined_bytes`); they are in their own test.

mod common;

use std::time::Duration;

use common::{Rank, Setup, run};
use memreuse::comm::ReduceOp;
use memreuse::mock::{FaultKind, MallocFault};
use memreuse::process_group::ReuseMode;
use memreuse::{Backend, BackendError};

const MIB: usize = 1 << 20;
const ELEMS: usize = MIB; // 4 MiB of f32

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// The next raw malloc of rank 0's device fails.
    Malloc,
    /// The first collective fails on every rank; a tensor is freed before the wait.
    Collective,
    /// An op fails on a side stream a freed tensor was recorded on.
    EventQuery,
    /// Rank 1 never joins the collective: rank 0's times out.
    Timeout,
}

const FAULTS: [Fault; 4] = [
    Fault::Malloc,
    Fault::Collective,
    Fault::EventQuery,
    Fault::Timeout,
];

/// Whether the case needs the allocator's quarantine (see the module doc).
fn needs_quarantine(fault: Fault, mode: ReuseMode) -> bool {
    match fault {
        Fault::EventQuery => true,
        Fault::Collective | Fault::Timeout => {
            matches!(mode, ReuseMode::RecordStream | ReuseMode::EraseRecordStream)
        }
        Fault::Malloc => false,
    }
}

/// After the fault: what must still work on the rank, as violations.
fn still_serving(r: &Rank, out: &mut Vec<String>) {
    let c = &r.compute;
    match r.allocator.allocate(MIB as u64, c) {
        Ok(s) => drop(s),
        Err(e) => out.push(format!("allocate after the fault: {e}")),
    }
    if let Err(e) = r.allocator.process_events() {
        out.push(format!("process_events after the fault: {e}"));
    }
    if let Err(e) = r.allocator.empty_cache() {
        out.push(format!("empty_cache after the fault: {e}"));
    }
}

/// Runs `fault` in `mode`; returns every violation on every rank.
fn scenario(fault: Fault, mode: ReuseMode) -> Vec<String> {
    let mut setup = Setup::new(2, mode);
    setup.expect_device_errors = fault != Fault::Malloc;
    setup.blocking_wait = true;
    if fault == Fault::Collective {
        setup.inject_collective_failures = vec![0];
    }
    if fault == Fault::Timeout {
        setup.timeout = Duration::from_millis(300);
    }
    let out = run(&setup, |r| {
        let c = &r.compute;
        let mut violations = Vec::new();
        let mut errors = 0;
        match fault {
            Fault::Malloc => {
                if r.rank == 0 {
                    r.device.inject_malloc_fault(MallocFault {
                        nth: 1,
                        kind: FaultKind::Injected,
                    });
                    if r.allocator.allocate((4 * MIB) as u64, c).is_err() {
                        errors += 1;
                    }
                }
                // The group still works with the allocator that saw the fault.
                let t = r.tensor(ELEMS, 1.0, c);
                r.pg.all_reduce(&t, ReduceOp::Sum, c, false)
                    .map_err(|e| violations.push(format!("collective after the fault: {e}")))
                    .ok();
                if r.rank != 0 {
                    errors += 1; // only rank 0 had a fault
                }
            }
            Fault::Collective => {
                let t = r.tensor(ELEMS, 1.0, c);
                let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true);
                drop(t); // freed while the failing collective is in flight
                if w.and_then(|w| w.wait(c)).is_err() {
                    errors += 1;
                }
            }
            Fault::EventQuery => {
                let side = r.device.create_stream().expect("side stream");
                let t = r.tensor(ELEMS, 1.0, c);
                r.allocator.record_stream(&t, &side);
                let failed = r.device.enqueue_custom(&side, "fault", &[], |_| {
                    Err(BackendError::Injected {
                        backend: "mock".to_owned(),
                        what: "event query fault".to_owned(),
                    })
                });
                drop(t);
                if failed.is_ok() && r.device.synchronize_stream(&side).is_err() {
                    errors += 1;
                }
            }
            Fault::Timeout => {
                if r.rank == 0 {
                    let t = r.tensor(ELEMS, 1.0, c);
                    let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true);
                    drop(t);
                    if w.and_then(|w| w.wait(c)).is_err() {
                        errors += 1;
                    }
                } else {
                    errors += 1; // rank 1 skipped the collective: no error is its to see
                }
            }
        }
        if errors != 1 {
            violations.push(format!("the error reached the caller {errors} times"));
        }
        still_serving(r, &mut violations);
        violations
    });
    out.values
        .into_iter()
        .enumerate()
        .flat_map(|(rank, v)| v.into_iter().map(move |e| format!("rank {rank}: {e}")))
        .collect()
}

fn check(select: impl Fn(Fault, ReuseMode) -> bool) {
    let mut failures = Vec::new();
    for fault in FAULTS {
        for mode in ReuseMode::ALL {
            if select(fault, mode) {
                for v in scenario(fault, mode) {
                    failures.push(format!("{fault:?} in mode {mode}: {v}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_fault_in_every_mode_leaves_the_allocator_serving() {
    check(|fault, mode| !needs_quarantine(fault, mode));
}

#[test]
fn faults_that_leave_a_failing_event_need_the_quarantine() {
    check(needs_quarantine);
}
