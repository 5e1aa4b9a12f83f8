//! Synchronous collectives (issue 26 item 1): by default they run on the caller's current
//! stream, as PyTorch 2.8+ launches them, in every mode: no comm-stream hop, no reuse
//! event, no `record_stream`, no stash, and stream order alone makes freeing and reusing
//! their tensors race-free. `SyncCollectives::CommStream` keeps the old path (PyTorch <=
//! 2.7, torch_npu): the hop and each mode's protection, waited at once.

// Results are exact by construction: bit equality is the point.
#![allow(clippy::float_cmp)]

mod common;

use common::{Setup, run};
use memreuse::Backend;
use memreuse::comm::ReduceOp;
use memreuse::process_group::{ReuseMode, SyncCollectives};

const ELEMS: usize = 4096;

/// What one rank saw of a synchronous all_reduce whose tensor it freed at once and whose
/// memory it re-allocated and overwrote.
#[derive(Debug, PartialEq)]
struct Seen {
    /// The all_reduce's result, read before the free.
    result: Vec<f32>,
    /// The re-allocation got the freed block back.
    reused: bool,
    /// Streams the mock executed an all_reduce on: (on the current stream, on the comm
    /// stream).
    ran_on: (usize, usize),
    reuse_events: u64,
    record_stream_calls: u64,
    shelf_stashes: u64,
    works_issued: u64,
}

fn sync_all_reduce(mode: ReuseMode, path: SyncCollectives) -> Vec<Seen> {
    let mut setup = Setup::new(2, mode);
    setup.sync_collectives = path;
    setup.config.trace_capacity = 10_000;
    let out = run(&setup, |r| {
        let c = &r.compute;
        let t = r.tensor(ELEMS, 1.0, c);
        let addr = t.ptr();
        r.pg.all_reduce(&t, ReduceOp::Sum, c, false).unwrap();
        let result = r.read(&t, c);
        drop(t);
        // The freed block is the best fit: overwritten at once on the same stream.
        let u = r.tensor(ELEMS, 50.0, c);
        let reused = u.ptr() == addr;
        assert_eq!(r.read(&u, c), vec![50.0 + r.rank as f32; ELEMS]);
        r.device.synchronize_device().unwrap();
        let (current, comm) = (
            r.device.stream_id(c),
            r.device.stream_id(r.pg.comm_stream()),
        );
        let trace = r.device.execution_trace();
        let on = |s| {
            trace
                .iter()
                .filter(|op| op.stream == s && op.op.contains("all_reduce"))
                .count()
        };
        let s = r.allocator.stats();
        Seen {
            result,
            reused,
            ran_on: (on(current), on(comm)),
            reuse_events: s.reuse_events_created,
            record_stream_calls: s.record_stream_calls,
            shelf_stashes: r.pg.stats().shelf_stashes,
            works_issued: r.pg.stats().works_issued,
        }
    });
    assert!(out.races.is_empty(), "mode {mode} {path}: {:?}", out.races);
    out.values
}

#[test]
fn a_synchronous_collective_runs_on_the_current_stream_with_no_event_and_no_stash_in_every_mode() {
    for mode in ReuseMode::ALL {
        for (rank, seen) in sync_all_reduce(mode, SyncCollectives::CurrentStream)
            .into_iter()
            .enumerate()
        {
            let what = format!("mode {mode} rank {rank}");
            assert_eq!(seen.result, vec![3.0; ELEMS], "{what}");
            assert!(seen.reused, "{what}: the block is reusable at once");
            assert_eq!(seen.ran_on, (1, 0), "{what}: on the current stream only");
            assert_eq!(
                (
                    seen.reuse_events,
                    seen.record_stream_calls,
                    seen.shelf_stashes
                ),
                (0, 0, 0),
                "{what}: no reuse event, no record_stream, no stash"
            );
            assert_eq!(seen.works_issued, 1, "{what}");
        }
    }
}

#[test]
fn the_comm_stream_path_keeps_each_modes_old_counters() {
    for mode in ReuseMode::ALL {
        for (rank, seen) in sync_all_reduce(mode, SyncCollectives::CommStream)
            .into_iter()
            .enumerate()
        {
            let what = format!("mode {mode} rank {rank}");
            assert_eq!(seen.result, vec![3.0; ELEMS], "{what}");
            assert_eq!(seen.ran_on, (0, 1), "{what}: hopped to the comm stream");
            if mode == ReuseMode::AvoidRecordStream {
                assert_eq!(
                    (
                        seen.reuse_events,
                        seen.record_stream_calls,
                        seen.shelf_stashes
                    ),
                    (0, 0, 1),
                    "{what}: stashed, released by the immediate wait"
                );
                assert!(seen.reused, "{what}");
            } else {
                assert_eq!(
                    (seen.record_stream_calls, seen.shelf_stashes),
                    (1, 0),
                    "{what}: one record_stream for the one tensor"
                );
            }
        }
    }
}

/// Every synchronous entry point takes the current-stream path: barrier, broadcast,
/// all_gather, reduce_scatter, all_to_all, send and recv; asynchronous ones still hop.
#[test]
fn every_synchronous_operation_stays_on_the_current_stream_and_asynchronous_ones_still_hop() {
    for mode in ReuseMode::ALL {
        let mut setup = Setup::new(2, mode);
        setup.config.trace_capacity = 10_000;
        let out = run(&setup, |r| {
            let c = &r.compute;
            let world = r.world;
            let a = r.tensor(ELEMS, 1.0, c);
            let full = r.tensor(ELEMS * world, 0.0, c);
            let shard = r.tensor(ELEMS, 0.0, c);
            let sent = r.tensor(ELEMS, 7.0, c);
            r.pg.barrier(c).unwrap();
            r.pg.broadcast(&a, 0, c, false).unwrap();
            r.pg.all_gather(&a, &full, c, false).unwrap();
            r.pg.reduce_scatter(&full, &shard, ReduceOp::Sum, c, false)
                .unwrap();
            let exchanged = r.tensor(ELEMS * world, 0.0, c);
            r.pg.all_to_all(&full, &exchanged, c, false).unwrap();
            if r.rank == 0 {
                r.pg.send(&sent, 1, c, false).unwrap();
            } else {
                r.pg.recv(&sent, 0, c, false).unwrap();
            }
            let received = r.read(&sent, c);
            let before = r.allocator.stats().record_stream_calls;
            let stashes = r.pg.stats().shelf_stashes;
            // One asynchronous collective: each mode protects it as before.
            r.pg.all_reduce(&a, ReduceOp::Sum, c, true)
                .unwrap()
                .wait(c)
                .unwrap();
            r.device.synchronize_device().unwrap();
            let comm = r.device.stream_id(r.pg.comm_stream());
            let on_comm: Vec<String> = r
                .device
                .execution_trace()
                .into_iter()
                .filter(|op| op.stream == comm)
                .map(|op| op.op)
                .collect();
            drop((a, full, shard, sent, exchanged));
            (
                received,
                before,
                stashes,
                on_comm,
                r.allocator.stats().record_stream_calls - before,
                r.pg.stats().shelf_stashes - stashes,
            )
        });
        assert!(out.races.is_empty(), "mode {mode}: {:?}", out.races);
        for (rank, (received, records, stashes, on_comm, async_records, async_stashes)) in
            out.values.into_iter().enumerate()
        {
            let what = format!("mode {mode} rank {rank}");
            assert_eq!(received, vec![7.0; ELEMS], "{what}: rank 0's tensor");
            assert_eq!((records, stashes), (0, 0), "{what}: synchronous ops");
            assert!(
                !on_comm.is_empty() && on_comm.iter().all(|op| !op.contains("barrier")),
                "{what}: only the asynchronous all_reduce hopped: {on_comm:?}"
            );
            let want = if mode == ReuseMode::AvoidRecordStream {
                (0, 1)
            } else {
                (1, 0)
            };
            assert_eq!(
                (async_records, async_stashes),
                want,
                "{what}: async ops keep the mode"
            );
        }
    }
}
