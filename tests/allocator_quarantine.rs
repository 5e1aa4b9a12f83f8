//! A failed collective must not poison the allocator (issue 12 item 1): a block whose event
//! query fails is quarantined, the error reaches the caller once (the failed wait), every
//! other request is served, and the block returns to the pool after a successful
//! synchronize of its streams.

mod common;

use common::{Setup, run};
use memreuse::comm::ReduceOp;
use memreuse::process_group::ReuseMode;

const MIB: u64 = 1 << 20;
/// 4 MiB of f32.
const ELEMS: usize = (4 * MIB / 4) as usize;

#[derive(Debug)]
struct Seen {
    /// Errors returned by the nine allocator calls after the failed wait.
    errors: Vec<String>,
    /// The 4 MiB block was handed out again while quarantined.
    reused: bool,
    quarantined: u64,
    pending: u64,
    /// Bytes `release_quarantined` returned after the device error was handled.
    recovered: u64,
    quarantined_after: u64,
}

#[test]
fn a_failed_collective_quarantines_its_block_and_the_allocator_keeps_serving() {
    for mode in [ReuseMode::RecordStream, ReuseMode::EraseRecordStream] {
        let mut setup = Setup::new(2, mode);
        setup.inject_collective_failures = vec![0];
        setup.expect_device_errors = true;
        setup.blocking_wait = true;
        let out = run(&setup, |r| {
            let c = &r.compute;
            let t = r.tensor(ELEMS, 1.0, c);
            let addr = t.ptr();
            let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
            drop(t); // freed before the blocking wait
            assert!(w.wait(c).is_err(), "the injected failure is reported");
            let mut errors = Vec::new();
            let mut reused = false;
            let mut keep = Vec::new();
            for _ in 0..3 {
                match r.allocator.allocate(MIB, c) {
                    Ok(s) => keep.push(s),
                    Err(e) => errors.push(e.to_string()),
                }
                if let Err(e) = r.allocator.process_events() {
                    errors.push(e.to_string());
                }
                if let Err(e) = r.allocator.empty_cache() {
                    errors.push(e.to_string());
                }
            }
            // A request the quarantined block would fit best is served elsewhere.
            let big = r.allocator.allocate(4 * MIB, c).expect("served");
            reused |= keep.iter().chain([&big]).any(|s| {
                s.ptr().addr() < addr.addr() + 4 * MIB && addr.addr() < s.ptr().addr() + s.size()
            });
            let stats = r.allocator.stats();
            drop((keep, big));
            // The device error is handled (as the owner of the communicator would), so a
            // synchronize of the block's streams succeeds again.
            let _ = r.device.take_last_error();
            let recovered = r
                .allocator
                .release_quarantined()
                .expect("streams synchronize");
            Seen {
                errors,
                reused,
                quarantined: stats.quarantined_bytes,
                pending: stats.pending_free_bytes,
                recovered,
                quarantined_after: r.allocator.stats().quarantined_bytes,
            }
        });
        for (rank, seen) in out.values.iter().enumerate() {
            let ctx = format!("mode {mode} rank {rank}: {seen:?}");
            // The error reached the caller once, through the work's wait (asserted above);
            // the allocator serves every later request instead of repeating it.
            assert!(
                seen.errors.is_empty(),
                "the allocator does not fail unrelated calls: {ctx}"
            );
            assert!(!seen.reused, "a quarantined block is never reused: {ctx}");
            assert_eq!(seen.quarantined, 4 * MIB, "{ctx}");
            assert_eq!(seen.pending, 0, "quarantined is not pending: {ctx}");
            assert_eq!(seen.recovered, 4 * MIB, "{ctx}");
            assert_eq!(seen.quarantined_after, 0, "{ctx}");
        }
    }
}
