//! Property test: on random single-device programs, the race detector flags exactly the
//! ops a naive full-vector-clock model (no history pruning, no subsumption) flags.

use std::collections::BTreeSet;

use memreuse_core::{AccessKind, Backend};
use memreuse_mock::{MemAccess, MockConfig, MockDevice};
use proptest::prelude::*;

const STREAMS: usize = 3;
const EVENTS: usize = 2;

#[derive(Clone, Debug)]
enum Step {
    Access {
        stream: usize,
        write: bool,
        start: u64,
        len: u64,
    },
    Record {
        event: usize,
        stream: usize,
    },
    Wait {
        stream: usize,
        event: usize,
    },
    SyncStream(usize),
    SyncDevice,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..STREAMS, any::<bool>(), 0..48u64, 1..16u64)
            .prop_map(|(stream, write, start, len)| Step::Access { stream, write, start, len }),
        2 => (0..EVENTS, 0..STREAMS).prop_map(|(event, stream)| Step::Record { event, stream }),
        2 => (0..STREAMS, 0..EVENTS).prop_map(|(stream, event)| Step::Wait { stream, event }),
        1 => (0..STREAMS).prop_map(Step::SyncStream),
        1 => Just(Step::SyncDevice),
    ]
}

type Vc = [u64; STREAMS];

fn join(a: &mut Vc, b: &Vc) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = (*x).max(*y);
    }
}

/// Indices of the steps that race with some earlier access, by the naive model.
fn model(steps: &[Step]) -> BTreeSet<usize> {
    let mut clocks = [[0u64; STREAMS]; STREAMS];
    let mut host = [0u64; STREAMS];
    let mut events: [Option<Vc>; EVENTS] = [None; EVENTS];
    let mut history: Vec<(Vc, bool, u64, u64)> = Vec::new();
    let mut racy = BTreeSet::new();
    for (i, st) in steps.iter().enumerate() {
        match *st {
            Step::Access {
                stream,
                write,
                start,
                len,
            } => {
                let c = &mut clocks[stream];
                join(c, &host);
                c[stream] += 1;
                let end = start + len;
                let unordered = |vc: &Vc| vc.iter().zip(c.iter()).any(|(e, l)| e > l);
                if history
                    .iter()
                    .any(|(vc, w, s, e)| (*w || write) && *s < end && start < *e && unordered(vc))
                {
                    racy.insert(i);
                }
                history.push((*c, write, start, end));
            }
            Step::Record { event, stream } => events[event] = Some(clocks[stream]),
            Step::Wait { stream, event } => {
                if let Some(ev) = events[event] {
                    join(&mut clocks[stream], &ev);
                }
            }
            Step::SyncStream(s) => join(&mut host, &clocks[s].clone()),
            Step::SyncDevice => {
                for c in clocks {
                    join(&mut host, &c);
                }
            }
        }
    }
    racy
}

/// Indices of the steps the mock names as the later side of a race.
fn mock(steps: &[Step], seed: u64) -> BTreeSet<usize> {
    let dev = MockDevice::new(MockConfig::with_capacity(1 << 16).deterministic(seed)).unwrap();
    let streams: Vec<_> = (0..STREAMS).map(|_| dev.create_stream().unwrap()).collect();
    let events: Vec<_> = (0..EVENTS).map(|_| dev.create_event().unwrap()).collect();
    let p = dev.malloc(64).unwrap();
    for (i, st) in steps.iter().enumerate() {
        dev.set_op_label(&i.to_string());
        match *st {
            Step::Access {
                stream,
                write,
                start,
                len,
            } => {
                let access = if write {
                    MemAccess::write(p.offset(start), len)
                } else {
                    MemAccess::read(p.offset(start), len)
                };
                dev.enqueue_custom(&streams[stream], "op", &[access], |_| Ok(()))
                    .unwrap();
            }
            Step::Record { event, stream } => {
                dev.record_event(&events[event], &streams[stream]).unwrap();
            }
            Step::Wait { stream, event } => dev
                .stream_wait_event(&streams[stream], &events[event])
                .unwrap(),
            Step::SyncStream(s) => dev.synchronize_stream(&streams[s]).unwrap(),
            Step::SyncDevice => dev.synchronize_device().unwrap(),
        }
    }
    let reports = dev.race_reports().unwrap();
    assert!(
        reports
            .iter()
            .all(|r| r.earlier.kind == AccessKind::Write || r.later.kind == AccessKind::Write)
    );
    reports
        .iter()
        .map(|r| {
            let label = r.later.op.trim_start_matches("op [").trim_end_matches(']');
            label.parse().expect("label is the step index")
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn detector_matches_naive_model(steps in proptest::collection::vec(step(), 1..40), seed in 0..4u64) {
        prop_assert_eq!(mock(&steps, seed), model(&steps));
    }
}
