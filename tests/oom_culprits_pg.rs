//! Issue 17 item 3 on live process groups over the mock: the `OutOfMemory` message names
//! the work a late `wait()` leaves memory pending behind (mode 1), and the shelf of a work
//! never waited (mode 2), with the work's id and collective.

mod common;

use std::time::Duration;

use common::{Setup, run};
use memreuse::comm::ReduceOp;
use memreuse::process_group::ReuseMode;
use memreuse::{AllocError, Backend};

const MIB: u64 = 1 << 20;

#[test]
fn late_wait_in_mode_1_names_the_pending_collective() {
    let mut setup = Setup::new(2, ReuseMode::EraseRecordStream);
    setup.watchdog = None;
    setup.config.capacity = 40 * MIB;
    setup.config.delays.joint = Duration::from_millis(200);
    let out = run(&setup, |r| {
        let c = &r.compute;
        let t = r.tensor((20 * MIB / 4) as usize, 1.0, c);
        let work = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
        // The program frees its input before waiting: the block waits for the collective.
        drop(t);
        let held = r.tensor((12 * MIB / 4) as usize, 2.0, c);
        let msg = match r.allocator.allocate(30 * MIB, c) {
            Err(AllocError::OutOfMemory(oom)) => oom.to_string(),
            other => panic!("expected out of memory, got {other:?}"),
        };
        work.wait(c).unwrap();
        drop(held);
        (msg, work.id(), r.device.stream_id(r.pg.comm_stream()))
    });
    for (msg, work, comm) in out.values {
        assert!(
            msg.contains(&format!(
                "pending: 20.00 MiB (1 blocks) pending behind {work} (all_reduce) on {comm}"
            )),
            "{msg}"
        );
    }
}

#[test]
fn never_waited_work_in_mode_2_is_named_with_its_shelf() {
    let mut setup = Setup::new(2, ReuseMode::AvoidRecordStream);
    setup.watchdog = None;
    setup.config.capacity = 24 * MIB;
    setup.config.delays.joint = Duration::from_millis(200);
    let out = run(&setup, |r| {
        let c = &r.compute;
        let t = r.tensor((10 * MIB / 4) as usize, 1.0, c);
        let work = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
        let id = work.id();
        drop(work);
        // The program still holds the tensor as well, so waiting for the collective would
        // free nothing: the memory-pressure callback leaves it in flight, on its shelf.
        let side = r.device.create_stream().unwrap();
        let msg = match r.allocator.allocate(16 * MIB, &side) {
            Err(AllocError::OutOfMemory(oom)) => oom.to_string(),
            other => panic!("expected out of memory, got {other:?}"),
        };
        drop(t);
        r.device.synchronize_device().unwrap();
        r.pg.release_completed();
        (msg, id, r.allocator.stats().allocated_bytes.current)
    });
    for (msg, work, after) in out.values {
        assert!(
            msg.contains(&format!(
                "held on shelves: 10.00 MiB (1 storages) on the shelf of {work} (all_reduce), never waited"
            )),
            "{msg}"
        );
        assert_eq!(after, 0, "released once the work completed");
    }
}

#[test]
fn a_completed_work_never_waited_that_holds_memory_is_warned_about_once() {
    let mut setup = Setup::new(2, ReuseMode::EraseRecordStream);
    setup.watchdog = None;
    setup.unwaited_warning_after = Duration::ZERO;
    let out = run(&setup, |r| {
        let c = &r.compute;
        let t = r.tensor(4096, 1.0, c);
        drop(r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap());
        let waited = r.tensor(4096, 1.0, c);
        let w = r.pg.all_reduce(&waited, ReduceOp::Sum, c, true).unwrap();
        w.wait(c).unwrap();
        r.device.synchronize_device().unwrap();
        // The poll sees both complete and warns (delay zero) about the never-waited one only.
        r.pg.release_completed();
        r.pg.release_completed();
        let first = r.pg.stats().never_waited_warnings;
        r.pg.release_completed();
        let again = r.pg.stats().never_waited_warnings;
        drop((t, waited));
        (first, again)
    });
    for (first, again) in out.values {
        assert_eq!(first, 1, "one warning, for the never-waited work");
        assert_eq!(again, 1, "once per work");
    }
}
