//! Every reuse mode on 2- and 4-rank mock groups: results are correct, the race detector
//! stays silent, and memory returns exactly when the mode says it does.

// Results are exact by construction: bit equality is the point.
#![allow(clippy::float_cmp)]

mod common;

use common::{Setup, run};
use memreuse::Backend;
use memreuse::comm::ReduceOp;
use memreuse::process_group::ReuseMode;

const ELEMS: usize = 4096;

/// Expected all-reduce sum of `value + rank` over `world` ranks.
fn sum_of(value: f32, world: usize) -> f32 {
    (0..world).map(|r| value + r as f32).sum()
}

#[derive(Clone, Copy, Debug)]
enum Scenario {
    FreedBeforeWait,
    FreedAfterWait,
    NeverWaited,
}

#[test]
fn every_mode_is_correct_and_race_free_whenever_the_tensor_is_freed() {
    for mode in ReuseMode::ALL {
        for world in [2, 4] {
            for scenario in [
                Scenario::FreedBeforeWait,
                Scenario::FreedAfterWait,
                Scenario::NeverWaited,
            ] {
                let out = run(&Setup::new(world, mode), |r| {
                    let c = &r.compute;
                    let t = r.tensor(ELEMS, 1.0, c);
                    let work = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
                    match scenario {
                        Scenario::FreedBeforeWait => {
                            drop(t);
                            // The freed block is the best fit for this request: if the
                            // policy failed to protect it, this write races the collective.
                            let u = r.tensor(ELEMS, 100.0, c);
                            work.wait(c).unwrap();
                            r.read(&u, c)
                        }
                        Scenario::FreedAfterWait => {
                            work.wait(c).unwrap();
                            let v = r.read(&t, c);
                            drop(t);
                            v
                        }
                        Scenario::NeverWaited => {
                            drop(work);
                            r.device.synchronize_device().unwrap();
                            r.read(&t, c)
                        }
                    }
                });
                assert!(
                    out.races.is_empty(),
                    "mode {mode} world {world} {scenario:?}: {:?}",
                    out.races
                );
                for (rank, v) in out.values.iter().enumerate() {
                    let want = match scenario {
                        Scenario::FreedBeforeWait => 100.0 + rank as f32,
                        _ => sum_of(1.0, world),
                    };
                    assert!(
                        v.iter().all(|&x| x == want),
                        "mode {mode} world {world} {scenario:?} rank {rank}: got {}",
                        v[0]
                    );
                }
            }
        }
    }
}

#[test]
fn mode_0_returns_memory_only_after_events_complete_and_process_events_runs() {
    let out = run(&Setup::new(2, ReuseMode::RecordStream), |r| {
        let c = &r.compute;
        let t = r.tensor(ELEMS, 1.0, c);
        let bytes = t.size();
        let work = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
        drop(t);
        let pending_after_free = r.allocator.stats().pending_free_bytes;
        work.wait(c).unwrap();
        let pending_after_wait = r.allocator.stats().pending_free_bytes;
        r.device.synchronize_device().unwrap();
        r.allocator.process_events().unwrap();
        let s = r.allocator.stats();
        (
            bytes,
            pending_after_free,
            pending_after_wait,
            s.pending_free_bytes,
            s.reuse_events_created,
        )
    });
    for (bytes, after_free, after_wait, after_process, events) in out.values {
        assert_eq!(after_free, bytes, "freed with a comm-stream use: pending");
        assert_eq!(after_wait, bytes, "mode 0 erases nothing at wait");
        assert_eq!(
            after_process, 0,
            "returned once the event completed and was processed"
        );
        assert!(events >= 1);
    }
}

#[test]
fn mode_1_erases_at_wait_only_from_the_blocks_own_stream() {
    let out = run(&Setup::new(2, ReuseMode::EraseRecordStream), |r| {
        let c = &r.compute;
        // Waited from the allocation stream: the use is erased, the free is immediate.
        let t = r.tensor(ELEMS, 1.0, c);
        r.pg.all_reduce(&t, ReduceOp::Sum, c, true)
            .unwrap()
            .wait(c)
            .unwrap();
        let before = r.allocator.stats();
        drop(t);
        let after = r.allocator.stats();
        let immediate = (
            after.pending_free_bytes,
            after.reuse_events_created - before.reuse_events_created,
        );

        // Waited from another stream: not erased (the block's own stream could reuse the
        // memory while the collective still runs), so the free records an event.
        let side = r.device.create_stream().unwrap();
        let t = r.tensor(ELEMS, 1.0, c);
        let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
        w.wait(&side).unwrap();
        let before = r.allocator.stats();
        drop(t);
        let after = r.allocator.stats();
        (
            immediate,
            after.reuse_events_created - before.reuse_events_created,
            after.erase_stream_calls,
        )
    });
    for ((pending, events), events_other_stream, erase_calls) in out.values {
        assert_eq!(
            pending, 0,
            "erased at wait: the free returns the block at once"
        );
        assert_eq!(events, 0, "erased at wait: no event at free");
        assert_eq!(
            events_other_stream, 1,
            "not erased from another stream: one event at free"
        );
        assert_eq!(erase_calls, 2);
    }
}

#[test]
fn mode_2_releases_at_wait_and_creates_no_event_for_collectives() {
    let out = run(&Setup::new(4, ReuseMode::AvoidRecordStream), |r| {
        let c = &r.compute;
        let t = r.tensor(ELEMS, 1.0, c);
        let work = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
        drop(t);
        let held_before_wait = r.allocator.stats().allocated_bytes.current;
        work.wait(c).unwrap();
        let s = r.allocator.stats();
        (
            held_before_wait,
            s.allocated_bytes.current,
            s.reuse_events_created,
            s.record_stream_calls,
            r.pg.stats().shelf_stashes,
        )
    });
    for (held, after_wait, events, records, stashes) in out.values {
        assert!(
            held >= (ELEMS * 4) as u64,
            "the shelf keeps the freed tensor alive until wait"
        );
        assert_eq!(after_wait, 0, "nothing held after wait()");
        assert_eq!(events, 0, "mode 2 creates no reuse event for collectives");
        assert_eq!(records, 0);
        assert_eq!(stashes, 1);
    }
}

#[test]
fn mode_2_never_waited_work_is_released_through_the_watchdog_hand_off() {
    let mut setup = Setup::new(2, ReuseMode::AvoidRecordStream);
    setup.watchdog = None; // the test drives the watchdog pass itself
    let out = run(&setup, |r| {
        let c = &r.compute;
        let t = r.tensor(ELEMS, 1.0, c);
        drop(r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap());
        drop(t);
        let held = r.allocator.stats().allocated_bytes.current;
        r.device.synchronize_device().unwrap();
        r.pg.run_watchdog_once();
        let after_watchdog = r.allocator.stats().allocated_bytes.current;
        // The main thread drains the hand-off list at its next process-group call.
        r.pg.release_completed();
        (
            held,
            after_watchdog,
            r.allocator.stats().allocated_bytes.current,
            r.pg.stats().shelf_unstashed_by_watchdog,
        )
    });
    for (held, after_watchdog, after_call, handed) in out.values {
        assert!(held > 0);
        assert_eq!(
            after_watchdog, held,
            "the watchdog never drops storages itself"
        );
        assert_eq!(after_call, 0, "drained by the main thread");
        assert_eq!(handed, 1);
    }
}

#[test]
fn mode_2_oom_callback_drains_completed_shelves_before_failing() {
    let mut setup = Setup::new(2, ReuseMode::AvoidRecordStream);
    setup.watchdog = None;
    setup.config.capacity = 24 << 20;
    let big = (10 << 20) / 4; // 10 MiB tensors: two do not fit next to each other
    let out = run(&setup, move |r| {
        let c = &r.compute;
        let t = r.tensor(big, 1.0, c);
        drop(r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap());
        drop(t);
        r.device.synchronize_device().unwrap();
        // Only the shelf holds the 20 MiB segment; a request on another stream cannot use
        // the cached block, so it needs the shelf released (and the cache freed).
        let side = r.device.create_stream().unwrap();
        let u = r
            .allocator
            .allocate((big * 4) as u64, &side)
            .expect("served after the OOM callback");
        drop(u);
        r.pg.stats().shelf_released_by_oom_callback
    });
    assert!(out.values.iter().all(|&n| n == 1), "{:?}", out.values);
}

#[test]
fn mode_3_returns_a_dropped_tensor_at_wait_and_ignores_stale_block_ids() {
    let out = run(
        &Setup::new(2, ReuseMode::EraseRecordStreamWithOptimize),
        |r| {
            let c = &r.compute;
            let t = r.tensor(ELEMS, 1.0, c);
            let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
            drop(t);
            let pending_before_wait = r.allocator.stats().pending_free_bytes;
            w.wait(c).unwrap();
            let pending_after_wait = r.allocator.stats().pending_free_bytes;

            // Stale id: the block goes back to the pool and is handed out again before wait.
            let t = r.tensor(ELEMS, 1.0, c);
            let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
            drop(t);
            r.device.synchronize_device().unwrap();
            r.allocator.process_events().unwrap();
            let u = r.tensor(ELEMS, 7.0, c); // reuses the block: new generation
            let side_use = r.device.create_stream().unwrap();
            r.allocator.record_stream(&u, &side_use);
            w.wait(c).unwrap(); // erase by the stale id must not touch u's block
            let before = r.allocator.stats().reuse_events_created;
            drop(u);
            let events_for_u = r.allocator.stats().reuse_events_created - before;
            (pending_before_wait, pending_after_wait, events_for_u)
        },
    );
    for (before, after, events_for_u) in out.values {
        assert!(
            before > 0,
            "dropped before wait: pending on the comm stream's event"
        );
        assert_eq!(after, 0, "mode 3 erases by block id at wait");
        assert_eq!(
            events_for_u, 1,
            "the new owner's user use survived the stale erase"
        );
    }
}

/// Modes 1 and 3 are one policy with a parameter: each group still reports its own mode's
/// name, and only mode 3 returns a tensor dropped before `wait()` at the wait itself.
#[test]
fn modes_1_and_3_keep_their_names_and_differ_only_for_a_tensor_dropped_before_wait() {
    for (mode, name, returned_at_wait) in [
        (ReuseMode::EraseRecordStream, "1", false),
        (ReuseMode::EraseRecordStreamWithOptimize, "3", true),
    ] {
        let out = run(&Setup::new(2, mode), |r| {
            let c = &r.compute;
            let t = r.tensor(ELEMS, 1.0, c);
            let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
            drop(t);
            let pending_before_wait = r.allocator.stats().pending_free_bytes;
            w.wait(c).unwrap();
            let pending_after_wait = r.allocator.stats().pending_free_bytes;
            (r.pg.policy_name(), pending_before_wait, pending_after_wait)
        });
        for (rank, (policy, before, after)) in out.values.into_iter().enumerate() {
            assert_eq!(policy, name, "mode {mode} rank {rank}: policy name");
            assert!(before > 0, "mode {mode} rank {rank}: pending before wait");
            assert_eq!(
                after == 0,
                returned_at_wait,
                "mode {mode} rank {rank}: {after} bytes still pending after wait"
            );
        }
    }
}

#[test]
fn side_stream_tensor_freed_before_wait_is_race_free_in_every_mode() {
    for mode in ReuseMode::ALL {
        let out = run(&Setup::new(2, mode), |r| {
            let c = &r.compute;
            let side = r.device.create_stream().unwrap();
            let t = r.tensor(ELEMS, 1.0, &side);
            // The collective runs after the current stream, which must see the side fill.
            let ev = r.device.create_event().unwrap();
            r.device.record_event(&ev, &side).unwrap();
            r.device.stream_wait_event(c, &ev).unwrap();
            let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
            drop(t);
            w.wait(c).unwrap();
            // The side stream allocates and writes at once, with no host synchronisation.
            let u = r.tensor(ELEMS, 5.0, &side);
            r.read(&u, &side)
        });
        assert!(out.races.is_empty(), "mode {mode}: {:?}", out.races);
        assert!(
            out.values
                .iter()
                .enumerate()
                .all(|(rank, v)| v.iter().all(|&x| x == 5.0 + rank as f32))
        );
    }
}

#[test]
fn two_in_flight_collectives_on_one_tensor_stay_protected_after_the_first_wait() {
    for mode in ReuseMode::ALL {
        let out = run(&Setup::new(2, mode), |r| {
            let c = &r.compute;
            let t = r.tensor(ELEMS, 1.0, c);
            let w1 = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
            let w2 = r.pg.all_reduce(&t, ReduceOp::Max, c, true).unwrap();
            w1.wait(c).unwrap();
            drop(t);
            let u = r.tensor(ELEMS, 9.0, c); // re-requests the memory while w2 may run
            w2.wait(c).unwrap();
            r.read(&u, c)
        });
        assert!(out.races.is_empty(), "mode {mode}: {:?}", out.races);
        assert!(
            out.values
                .iter()
                .enumerate()
                .all(|(rank, v)| v.iter().all(|&x| x == 9.0 + rank as f32))
        );
    }
}

#[test]
fn four_rank_event_counts_per_mode() {
    // The figures the closing note quotes: events and record_stream calls per mode for a
    // 4-rank all_reduce + all_gather step with tensors freed before wait.
    for mode in ReuseMode::ALL {
        let out = run(&Setup::new(4, mode), |r| {
            let c = &r.compute;
            for _ in 0..3 {
                let g = r.tensor(ELEMS, 1.0, c);
                let w = r.pg.all_reduce(&g, ReduceOp::Sum, c, true).unwrap();
                let shard = r.tensor(ELEMS / 4, 1.0, c);
                let full = r.allocator.allocate((ELEMS * 4) as u64, c).unwrap();
                let w2 = r.pg.all_gather(&shard, &full, c, true).unwrap();
                drop(g);
                drop(shard);
                w.wait(c).unwrap();
                w2.wait(c).unwrap();
                drop(full);
            }
            let s = r.allocator.stats();
            (
                s.reuse_events_created,
                s.record_stream_calls,
                s.erase_stream_calls,
            )
        });
        let (events, records, erases) = out.values[0];
        println!(
            "mode {mode}: reuse_events_created={events} record_stream_calls={records} erase_stream_calls={erases} (rank 0)"
        );
        assert!(out.races.is_empty());
        if mode == ReuseMode::AvoidRecordStream {
            assert_eq!((events, records), (0, 0));
        } else {
            assert_eq!(
                records, 9,
                "3 steps x (all_reduce tensor + all_gather in + out)"
            );
        }
    }
}

/// The FSDP prefetch pattern behind pytorch/pytorch#147168, with 12 MiB tensors (each its
/// own segment) and collectives slowed to 400 ms on the mock: layer 0's buffer is waited
/// and freed while layer 1's prefetched collective is still queued on the comm stream,
/// then layer 2's buffer is allocated. Mode 0's `record_stream` makes the free wait for the
/// comm stream's *tail* (the prefetch), so layer 2 needs a third segment; modes 1 and 3
/// erase the comm stream's use at `wait()` and mode 2 never recorded it, so layer 2 gets
/// layer 0's block back at once. (Only mode 0's figure depends on timing: it needs the
/// host to allocate layer 2 within the 800 ms the two collectives take.)
#[test]
fn prefetch_pattern_over_allocates_only_in_mode_0() {
    const BIG: usize = 3 << 20; // f32 elements: 12 MiB
    for mode in ReuseMode::ALL {
        let mut setup = Setup::new(2, mode);
        setup.config.delays.joint = std::time::Duration::from_millis(400);
        let out = run(&setup, |r| {
            let c = &r.compute;
            let layer0 = r.tensor(BIG, 1.0, c);
            let first = layer0.ptr();
            let w0 = r.pg.all_reduce(&layer0, ReduceOp::Sum, c, true).unwrap();
            let layer1 = r.tensor(BIG, 2.0, c);
            let w1 = r.pg.all_reduce(&layer1, ReduceOp::Sum, c, true).unwrap();
            w0.wait(c).unwrap();
            drop(layer0);
            let layer2 = r.tensor(BIG, 3.0, c);
            let reused = layer2.ptr() == first;
            let peak = r.allocator.stats().reserved_bytes.aggregate.peak;
            w1.wait(c).unwrap();
            assert_eq!(r.read(&layer1, c)[0], sum_of(2.0, r.world));
            (reused, peak)
        });
        assert_eq!(out.races.len(), 0, "mode {mode:?}: {:?}", out.races);
        for (reused, peak) in out.values {
            if mode == ReuseMode::RecordStream {
                assert!(!reused, "mode 0: layer 0's block waits behind the prefetch");
                assert_eq!(peak, 36 << 20, "mode 0 reserves a third segment");
            } else {
                assert!(reused, "{mode:?}: layer 2 takes layer 0's block");
                assert_eq!(peak, 24 << 20, "{mode:?} needs two segments");
            }
        }
    }
}
