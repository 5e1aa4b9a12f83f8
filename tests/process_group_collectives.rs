//! Every collective kind produces the right values on 2 and 4 ranks in mode 2 (stash) and
//! mode 1 (record_stream + erase): all_gather, reduce_scatter (sum, max, min), all_to_all,
//! broadcast from the first and the last rank, barrier, send/recv, a batched ring of
//! sends and receives, and sub-groups. The race detector stays silent throughout.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::{Outcome, Setup, run};
use memreuse::comm::ReduceOp;
use memreuse::process_group::{P2pOp, ReuseMode};

const CONFIGS: [(ReuseMode, usize); 4] = [
    (ReuseMode::AvoidRecordStream, 2),
    (ReuseMode::AvoidRecordStream, 4),
    (ReuseMode::EraseRecordStream, 2),
    (ReuseMode::EraseRecordStream, 4),
];

/// Distinct values per rank and position: `rank * 100 + i`.
fn pattern(rank: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| (rank * 100 + i) as f32).collect()
}

/// Runs `body` for every configuration and checks each rank's result with `expect`.
fn check(
    what: &str,
    setup: impl Fn(usize, ReuseMode) -> Setup,
    body: impl Fn(&common::Rank) -> Vec<f32> + Sync,
    expect: impl Fn(usize, usize) -> Vec<f32>,
) {
    for (mode, world) in CONFIGS {
        let out: Outcome<Vec<f32>> = run(&setup(world, mode), &body);
        assert!(out.races.is_empty(), "{what} mode {mode} world {world}");
        for (rank, got) in out.values.iter().enumerate() {
            assert_eq!(
                *got,
                expect(world, rank),
                "{what}: mode {mode} world {world} rank {rank}"
            );
        }
    }
}

#[test]
fn all_gather_concatenates_by_rank() {
    const N: usize = 5;
    check(
        "all_gather",
        Setup::new,
        |r| {
            let c = &r.compute;
            let input = r.tensor_with(&pattern(r.rank, N), c);
            let output = r.tensor(N * r.world, -1.0, c);
            let w = r.pg.all_gather(&input, &output, c, true).unwrap();
            drop(input);
            w.wait(c).unwrap();
            r.read(&output, c)
        },
        |world, _| (0..world).flat_map(|q| pattern(q, N)).collect(),
    );
}

#[test]
fn reduce_scatter_sum_max_and_min() {
    const N: usize = 3;
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
        check(
            &format!("reduce_scatter({op})"),
            Setup::new,
            |r| {
                let c = &r.compute;
                let input = r.tensor_with(&pattern(r.rank, N * r.world), c);
                let output = r.tensor(N, -1.0, c);
                // Synchronous: collective + immediate wait.
                r.pg.reduce_scatter(&input, &output, op, c, false).unwrap();
                r.read(&output, c)
            },
            |world, rank| {
                (0..N)
                    .map(|j| {
                        let at = |q: usize| (q * 100 + rank * N + j) as f32;
                        match op {
                            ReduceOp::Sum => (0..world).map(at).sum(),
                            ReduceOp::Max => at(world - 1),
                            ReduceOp::Min => at(0),
                            ReduceOp::Prod => (0..world).map(at).product(),
                            ReduceOp::Avg => (0..world).map(at).sum::<f32>() / world as f32,
                        }
                    })
                    .collect()
            },
        );
    }
}

#[test]
fn all_to_all_transposes_chunks() {
    const CHUNK: usize = 3;
    // Rank q's chunk j holds q * 100 + j * 10 + e; it lands in chunk q of rank j.
    let chunked = |q: usize, world: usize| -> Vec<f32> {
        (0..world)
            .flat_map(|j| (0..CHUNK).map(move |e| (q * 100 + j * 10 + e) as f32))
            .collect()
    };
    check(
        "all_to_all",
        Setup::new,
        |r| {
            let c = &r.compute;
            let input = r.tensor_with(&chunked(r.rank, r.world), c);
            let output = r.tensor(CHUNK * r.world, -1.0, c);
            let w = r.pg.all_to_all(&input, &output, c, true).unwrap();
            w.wait(c).unwrap();
            r.read(&output, c)
        },
        |world, rank| {
            (0..world)
                .flat_map(|i| (0..CHUNK).map(move |e| (i * 100 + rank * 10 + e) as f32))
                .collect()
        },
    );
}

#[test]
fn broadcast_from_the_first_and_the_last_rank() {
    const N: usize = 4;
    for last in [false, true] {
        check(
            &format!("broadcast(last root: {last})"),
            Setup::new,
            |r| {
                let c = &r.compute;
                let root = if last { r.world - 1 } else { 0 };
                let t = r.tensor_with(&pattern(r.rank, N), c);
                r.pg.broadcast(&t, root, c, true).unwrap().wait(c).unwrap();
                r.read(&t, c)
            },
            |world, _| pattern(if last { world - 1 } else { 0 }, N),
        );
    }
}

#[test]
fn barrier_waits_for_every_rank_and_keeps_the_collective_order() {
    let arrived: Vec<AtomicBool> = (0..4).map(|_| AtomicBool::new(false)).collect();
    check(
        "barrier",
        |world, mode| {
            for a in &arrived {
                a.store(false, Ordering::SeqCst);
            }
            let mut s = Setup::new(world, mode);
            s.blocking_wait = true; // the host returns from barrier() only once it ran
            s
        },
        |r| {
            let c = &r.compute;
            if r.rank == r.world - 1 {
                // The last rank is late: a barrier that does not wait for it lets the
                // others see its flag unset. (Not a wait for a condition: a correct
                // barrier passes whatever the timing.)
                std::thread::sleep(std::time::Duration::from_millis(30));
            }
            arrived[r.rank].store(true, Ordering::SeqCst);
            r.pg.barrier(c).unwrap();
            let all_arrived = arrived[..r.world].iter().all(|a| a.load(Ordering::SeqCst));
            // The next collective still matches across ranks.
            let t = r.tensor(2, 1.0, c);
            r.pg.all_reduce(&t, ReduceOp::Sum, c, false).unwrap();
            let mut v = r.read(&t, c);
            v.push(if all_arrived { 1.0 } else { 0.0 });
            v.push(r.pg.stats().works_issued as f32);
            v
        },
        |world, _| {
            let sum = (0..world).map(|q| 1.0 + q as f32).sum();
            vec![sum, sum, 1.0, 2.0]
        },
    );
}

#[test]
fn send_and_recv_between_pairs() {
    const N: usize = 6;
    check(
        "send/recv",
        Setup::new,
        |r| {
            let c = &r.compute;
            let peer = r.rank ^ 1;
            let mine = r.tensor_with(&pattern(r.rank, N), c);
            let theirs = r.tensor(N, -1.0, c);
            // Even ranks send first, odd ranks receive first: unbatched point-to-point
            // runs in issue order on each comm stream.
            if r.rank % 2 == 0 {
                let s = r.pg.send(&mine, peer, c, true).unwrap();
                r.pg.recv(&theirs, peer, c, false).unwrap();
                s.wait(c).unwrap();
            } else {
                let rv = r.pg.recv(&theirs, peer, c, true).unwrap();
                r.pg.send(&mine, peer, c, false).unwrap();
                rv.wait(c).unwrap();
            }
            r.read(&theirs, c)
        },
        |_, rank| pattern(rank ^ 1, N),
    );
}

#[test]
fn batched_ring_of_sends_and_receives() {
    const N: usize = 4;
    // Every rank sends to the next and receives from the previous: issued one by one,
    // every send waits for a receive queued behind its peer's own send (a deadlock);
    // batched, the sends and receives of a rank never wait for each other.
    check(
        "batch_isend_irecv ring",
        Setup::new,
        |r| {
            let c = &r.compute;
            let next = (r.rank + 1) % r.world;
            let prev = (r.rank + r.world - 1) % r.world;
            let out = r.tensor_with(&pattern(r.rank, N), c);
            let inp = r.tensor(N, -1.0, c);
            let w =
                r.pg.batch_isend_irecv(&[P2pOp::Send(&out, next), P2pOp::Recv(&inp, prev)], c)
                    .unwrap();
            drop(out);
            w.wait(c).unwrap();
            r.read(&inp, c)
        },
        |world, rank| pattern((rank + world - 1) % world, N),
    );
}

#[test]
fn sub_groups_reduce_independently() {
    for mode in [ReuseMode::AvoidRecordStream, ReuseMode::EraseRecordStream] {
        let out = run(&Setup::new(4, mode), |r| {
            let c = &r.compute;
            // Every rank creates every group, in the same order.
            let low = r.pg.new_group(&[0, 1]).unwrap();
            let high = r.pg.new_group(&[2, 3]).unwrap();
            let even = r.pg.new_group(&[0, 2]).unwrap();
            let (mine, other) = if r.rank < 2 { (low, high) } else { (high, low) };
            assert!(other.is_none(), "rank {}: not a member", r.rank);
            let mine = mine.expect("member");
            assert_eq!((mine.rank(), mine.size()), (r.rank % 2, 2));
            assert_eq!(even.is_some(), r.rank % 2 == 0, "rank {}", r.rank);

            let pair = r.tensor(8, 1.0, c); // 1 + rank
            let pair_work = mine.all_reduce(&pair, ReduceOp::Sum, c, true).unwrap();
            let evens = r.tensor(8, 10.0, c); // 10 + rank
            if let Some(even) = &even {
                assert_eq!(even.rank(), r.rank / 2);
                even.all_reduce(&evens, ReduceOp::Max, c, true)
                    .unwrap()
                    .wait(c)
                    .unwrap();
            }
            pair_work.wait(c).unwrap();
            // The world group is unaffected by its sub-groups.
            let world = r.tensor(8, 0.0, c);
            r.pg.all_reduce(&world, ReduceOp::Sum, c, false).unwrap();
            (
                r.read(&pair, c)[0],
                r.read(&evens, c)[0],
                r.read(&world, c)[0],
            )
        });
        assert!(out.races.is_empty(), "mode {mode}");
        let want = [
            (3.0, 12.0, 6.0),
            (3.0, 11.0, 6.0),
            (7.0, 12.0, 6.0),
            (7.0, 13.0, 6.0),
        ];
        assert_eq!(
            out.values, want,
            "mode {mode}: (pair sum, even max, world sum)"
        );
    }
}
