//! Mode 2 and point-to-point: sends and receives (single or batched) fall back to
//! `record_stream`, since nothing obliges a user to wait on an `isend`, and say so with a
//! warning emitted once per process; collectives in the same process still create no
//! reuse event.
//!
//! Its own test binary with a single test: the warning's once-flag is process-global, and
//! so is the `tracing` subscriber that counts it.

mod common;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Setup, run};
use memreuse::comm::ReduceOp;
use memreuse::process_group::{P2pOp, ReuseMode};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// WARN events that announce the mode-2 point-to-point fallback.
static P2P_WARNINGS: AtomicUsize = AtomicUsize::new(0);

/// The smallest subscriber that counts the fallback warning.
struct WarnCounter;

/// Collects an event's `message` field.
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}

impl Subscriber for WarnCounter {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() == Level::WARN
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        if message.0.contains("MULTI_STREAM_MEMORY_REUSE=2") && message.0.contains("point-to-point")
        {
            P2P_WARNINGS.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

const ELEMS: usize = 1024;
const ROUNDS: usize = 3;

#[test]
fn mode_2_p2p_records_streams_and_warns_once_while_collectives_create_no_event() {
    tracing::subscriber::set_global_default(WarnCounter).expect("first subscriber");

    let out = run(&Setup::new(2, ReuseMode::AvoidRecordStream), |r| {
        let c = &r.compute;
        let peer = 1 - r.rank;

        // A collective with its tensor freed before wait: stashed, no event.
        let before = r.allocator.stats();
        let t = r.tensor(ELEMS, 1.0, c);
        let w = r.pg.all_reduce(&t, ReduceOp::Sum, c, true).unwrap();
        drop(t);
        w.wait(c).unwrap();
        let after = r.allocator.stats();
        let collective = (
            after.reuse_events_created - before.reuse_events_created,
            after.record_stream_calls - before.record_stream_calls,
        );

        // Async send/recv: the sender frees its tensor before waiting.
        let mut received = Vec::new();
        for round in 0..ROUNDS {
            let buf = r.tensor(ELEMS, 10.0 * round as f32, c);
            let w = if r.rank == 0 {
                r.pg.send(&buf, peer, c, true).unwrap()
            } else {
                r.pg.recv(&buf, peer, c, true).unwrap()
            };
            if r.rank == 0 {
                drop(buf);
                w.wait(c).unwrap();
            } else {
                w.wait(c).unwrap();
                received.push(r.read(&buf, c)[0]);
            }
        }

        // A batch: both ranks send and receive; the sent tensor is freed before wait.
        let out = r.tensor(ELEMS, 100.0, c);
        let inp = r.tensor(ELEMS, -1.0, c);
        let w =
            r.pg.batch_isend_irecv(&[P2pOp::Send(&out, peer), P2pOp::Recv(&inp, peer)], c)
                .unwrap();
        drop(out);
        w.wait(c).unwrap();
        received.push(r.read(&inp, c)[0]);

        let s = r.allocator.stats();
        (
            collective,
            s.record_stream_calls,
            s.reuse_events_created,
            r.pg.stats().p2p_record_stream_fallbacks,
            received,
        )
    });

    assert!(out.races.is_empty(), "{:?}", out.races);
    for (rank, (collective, records, events, fallbacks, received)) in out.values.iter().enumerate()
    {
        assert_eq!(
            *collective,
            (0, 0),
            "rank {rank}: a mode-2 collective creates no reuse event and records no stream"
        );
        assert_eq!(
            *records,
            (ROUNDS + 2) as u64,
            "rank {rank}: every p2p tensor is recorded on the comm stream"
        );
        assert!(
            *events > 0,
            "rank {rank}: a p2p tensor freed before wait gets a reuse event"
        );
        assert_eq!(*fallbacks, (ROUNDS + 1) as u64, "rank {rank}");
        let mut want: Vec<f32> = if rank == 1 {
            (0..ROUNDS).map(|round| 10.0 * round as f32).collect()
        } else {
            Vec::new()
        };
        want.push(100.0 + (1 - rank) as f32);
        assert_eq!(*received, want, "rank {rank}");
    }
    assert_eq!(
        P2P_WARNINGS.load(Ordering::SeqCst),
        1,
        "the fallback warning is emitted exactly once per process"
    );
}
