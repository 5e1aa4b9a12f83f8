//! The race-checking adaptor (`memreuse_core::race`) over mock worlds: over the
//! detector-less mock it catches planted bugs in collectives and point-to-point operations
//! by itself; over the mock with its native detector on, both see the same calls and must
//! report exactly the same races (one engine).

use std::sync::Arc;

use memreuse_core::comm::{Communicator, DType, ReduceOp};
use memreuse_core::race::{RaceCheckedComm, RaceChecker, RaceWorld};
use memreuse_core::{AllocationId, AllocatorConfig, Backend, CachingAllocator, RaceKind};
use memreuse_mock::{MockConfig, MockDevice, open_mock_world};

type Rank = (RaceChecker<MockDevice>, RaceCheckedComm<MockDevice>);

/// A two-rank mock world wrapped in the adaptor; `native` switches the mock's own detector.
fn world(native: bool) -> Vec<Rank> {
    let config = MockConfig {
        race_detection: native,
        joint_timeout: std::time::Duration::from_secs(2),
        ..MockConfig::with_capacity(1 << 24)
    };
    let race_world = RaceWorld::new(100);
    let family = race_world.new_family();
    open_mock_world(2, config)
        .unwrap()
        .into_iter()
        .map(|(dev, comm)| {
            let checker = RaceChecker::new(&race_world, dev);
            let comm = RaceCheckedComm::new(Box::new(comm), checker.clone(), family);
            (checker, comm)
        })
        .collect()
}

fn adaptor_kinds(rank: &Rank) -> Vec<RaceKind> {
    rank.0
        .race_reports()
        .unwrap()
        .iter()
        .map(|r| r.kind)
        .collect()
}

/// Every race either detector reported, per rank: (native, adaptor).
fn both(ranks: &[Rank]) -> Vec<(Vec<String>, Vec<String>)> {
    ranks
        .iter()
        .map(|(c, _)| {
            let native = c.inner().race_reports().unwrap_or_default();
            let adaptor = c.race_reports().unwrap();
            (
                native.iter().map(ToString::to_string).collect(),
                adaptor.iter().map(ToString::to_string).collect(),
            )
        })
        .collect()
}

const N: usize = 1024;
const BYTES: u64 = (N * 4) as u64;

#[test]
fn the_detector_less_mock_reports_nothing_itself() {
    let ranks = world(false);
    assert!(ranks[0].0.inner().race_reports().is_none());
    assert!(!ranks[0].0.inner().capabilities().native_race_detection);
    assert_eq!(ranks[0].0.race_reports(), Some(Vec::new()));
}

#[test]
fn a_block_freed_while_a_collective_still_reads_it_is_a_reuse_race() {
    let ranks = world(false);
    let allocs: Vec<_> = ranks
        .iter()
        .map(|(c, _)| CachingAllocator::new(Arc::new(c.clone()), AllocatorConfig::default()))
        .collect();
    let mut kept = Vec::new();
    for (i, (c, comm)) in ranks.iter().enumerate() {
        let compute = c.default_stream();
        let side = c.create_stream().unwrap();
        let input = allocs[i].allocate(BYTES, &compute).unwrap();
        let output = allocs[i].allocate(2 * BYTES, &compute).unwrap();
        c.memset_zero(input.ptr(), BYTES, &compute).unwrap();
        let ev = c.create_event().unwrap();
        c.record_event(&ev, &compute).unwrap();
        c.stream_wait_event(&side, &ev).unwrap();
        comm.all_gather(input.ptr(), output.ptr(), N, DType::F32, &side)
            .unwrap();
        // The input is freed without record_stream while the gather may still read it,
        // and the next allocation on compute gets the same block.
        let ptr = input.ptr();
        drop(input);
        let next = allocs[i].allocate(BYTES, &compute).unwrap();
        assert_eq!(next.ptr(), ptr);
        c.memset_zero(next.ptr(), BYTES, &compute).unwrap();
        // Both ranks must have issued the gather before anyone waits for it.
        kept.push((next, output));
    }
    for (c, _) in &ranks {
        c.synchronize_device().unwrap();
    }
    for r in &ranks {
        assert_eq!(adaptor_kinds(r), vec![RaceKind::Reuse]);
        let report = &r.0.race_reports().unwrap()[0];
        assert!(report.earlier.op.starts_with("all_gather"), "{report}");
        assert!(report.later.op.starts_with("memset_zero"), "{report}");
    }
}

#[test]
fn a_collective_orders_every_member_after_every_member() {
    // Rank 1 writes, all ranks all_reduce on their compute streams, then rank 1 reads on a
    // side stream that waited for an event recorded after the collective: ordered.
    // Without the wait, the same read is a schedule race.
    for wait in [true, false] {
        let ranks = world(false);
        let mut bufs = Vec::new();
        for (c, comm) in &ranks {
            let s = c.default_stream();
            let p = c.malloc(BYTES).unwrap();
            c.annotate_allocation(p, BYTES, AllocationId(7));
            c.memset_zero(p, BYTES, &s).unwrap();
            comm.all_reduce(p, N, DType::F32, ReduceOp::Sum, &s)
                .unwrap();
            bufs.push(p);
        }
        let (c, _) = &ranks[1];
        let side = c.create_stream().unwrap();
        if wait {
            let ev = c.create_event().unwrap();
            c.record_event(&ev, &c.default_stream()).unwrap();
            c.stream_wait_event(&side, &ev).unwrap();
        }
        let mut out = vec![0u8; 16];
        c.copy_device_to_host(&mut out, bufs[1], &side).unwrap();
        let expected = if wait {
            vec![]
        } else {
            vec![RaceKind::Schedule]
        };
        assert_eq!(adaptor_kinds(&ranks[1]), expected, "wait {wait}");
        assert_eq!(adaptor_kinds(&ranks[0]), vec![]);
        for (c, _) in &ranks {
            c.synchronize_device().unwrap();
        }
    }
}

#[test]
fn a_receive_into_a_buffer_still_being_read_is_caught_and_a_batch_is_one_op() {
    let ranks = world(false);
    let mut bufs = Vec::new();
    for (c, _) in &ranks {
        let p = c.malloc(2 * BYTES).unwrap();
        c.memset_zero(p, 2 * BYTES, &c.default_stream()).unwrap();
        bufs.push(p);
    }
    // A ring exchange issued as one batch per rank: send the low half, receive into the
    // high half, on each rank's compute stream (ordered after the memset).
    let ring = || {
        for (i, (c, comm)) in ranks.iter().enumerate() {
            let s = c.default_stream();
            comm.group_start().unwrap();
            comm.send(bufs[i], N, DType::F32, 1 - i, &s).unwrap();
            comm.recv(bufs[i].offset(BYTES), N, DType::F32, 1 - i, &s)
                .unwrap();
            comm.group_end().unwrap();
        }
    };
    ring();
    for (c, _) in &ranks {
        c.synchronize_device().unwrap();
        assert_eq!(c.race_reports().unwrap(), vec![]);
    }
    // A stream created now is ordered after everything so far; the second ring is not.
    let (c, _) = &ranks[0];
    let side = c.create_stream().unwrap();
    ring();
    // Rank 0 reads the high half on the side stream without waiting: the receive writes it.
    let mut out = vec![0u8; 8];
    c.copy_device_to_host(&mut out, bufs[0].offset(BYTES), &side)
        .unwrap();
    let reports = c.race_reports().unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].earlier.op, "send/recv+send/recv");
    assert_eq!(reports[0].kind, RaceKind::Schedule);
    for (c, _) in &ranks {
        c.synchronize_device().unwrap();
    }
}

/// The same calls seen by the mock's native detector and by the adaptor.
#[test]
fn native_detector_and_adaptor_report_the_same_races() {
    let ranks = world(true);
    let mut bufs = Vec::new();
    for (i, (c, comm)) in ranks.iter().enumerate() {
        c.set_op_label(&format!("rank {i}"));
        let s = c.default_stream();
        let side = c.create_stream().unwrap();
        let p = c.malloc(4 * BYTES).unwrap();
        c.annotate_allocation(p, 2 * BYTES, AllocationId(10 + i as u64));
        c.annotate_allocation(p.offset(2 * BYTES), 2 * BYTES, AllocationId(20 + i as u64));
        c.memset_zero(p, 4 * BYTES, &s).unwrap();
        // Schedule race: the side stream reads what compute wrote.
        c.copy_device_to_device(p.offset(2 * BYTES), p, 64, &side)
            .unwrap();
        // A collective on the side stream, then a reuse race: compute rewrites the other
        // hand-out while the collective may still read it.
        comm.broadcast(p.offset(3 * BYTES), N, DType::F32, 0, &side)
            .unwrap();
        c.annotate_allocation(p.offset(2 * BYTES), 2 * BYTES, AllocationId(30 + i as u64));
        c.memset_zero(p.offset(3 * BYTES), BYTES, &s).unwrap();
        comm.barrier(&s).unwrap();
        bufs.push(p);
    }
    for (i, (c, comm)) in ranks.iter().enumerate() {
        let s = c.default_stream();
        comm.group_start().unwrap();
        comm.send(bufs[i], N, DType::F32, 1 - i, &s).unwrap();
        comm.recv(bufs[i].offset(BYTES), N, DType::F32, 1 - i, &s)
            .unwrap();
        comm.group_end().unwrap();
        // Freed while the batch may still run: a reuse race with the host.
        c.free(bufs[i]).unwrap();
    }
    for (c, _) in &ranks {
        c.synchronize_device().unwrap();
    }
    let seen = both(&ranks);
    for (rank, (native, adaptor)) in seen.iter().enumerate() {
        assert!(
            native.len() >= 3,
            "rank {rank}: the planted races are there: {native:#?}"
        );
        assert_eq!(native, adaptor, "rank {rank}");
    }
}
