//! Model test: random interleavings of allocator calls over three streams, checked after
//! every step against a simple model of what must hold.
//!
//! (Exact equality with the previous implementation's addresses, statistics and snapshots
//! is pinned separately by `allocator_golden.rs`.)
//!
//! The model tracks live allocations, the owners of their stream uses, and for each freed
//! block the position each using stream must reach before the memory may be handed out
//! again ("protected until stream s advances"). The manual backend never reuses addresses,
//! so an overlap with an earlier hand-out can only be the allocator's reuse.

mod common;

use std::sync::Arc;

use common::{MIB, check_identities, setup_with};
use memreuse_core::allocator::UseOwner;
use memreuse_core::testing::{ManualBackend, ManualStream};
use memreuse_core::{AllocError, BlockRef, EraseOutcome, Storage, WorkId};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        stream: usize,
        bytes: u64,
    },
    Free {
        idx: usize,
    },
    Record {
        idx: usize,
        stream: usize,
    },
    RecordForWork {
        idx: usize,
        stream: usize,
        work: u64,
    },
    Erase {
        idx: usize,
        stream: usize,
        work: u64,
        current: usize,
    },
    EraseByBlock {
        idx: usize,
        pick: usize,
        exact: bool,
        stream: usize,
        work: u64,
        current: usize,
    },
    Advance {
        stream: usize,
    },
    ProcessEvents,
    EmptyCache,
}

fn bytes() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1u64..4096,
        3 => 4096u64..=MIB,
        2 => (MIB + 1)..12 * MIB,
        1 => (20 * MIB)..26 * MIB,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let s = || 0usize..3;
    let w = || 0u64..3;
    prop_oneof![
        6 => (s(), bytes()).prop_map(|(stream, bytes)| Op::Alloc { stream, bytes }),
        4 => any::<usize>().prop_map(|idx| Op::Free { idx }),
        2 => (any::<usize>(), s()).prop_map(|(idx, stream)| Op::Record { idx, stream }),
        3 => (any::<usize>(), s(), w()).prop_map(|(idx, stream, work)| Op::RecordForWork { idx, stream, work }),
        2 => (any::<usize>(), s(), w(), s()).prop_map(|(idx, stream, work, current)| Op::Erase { idx, stream, work, current }),
        2 => (any::<usize>(), any::<usize>(), any::<bool>(), s(), w(), s()).prop_map(
            |(idx, pick, exact, stream, work, current)| Op::EraseByBlock { idx, pick, exact, stream, work, current }
        ),
        3 => s().prop_map(|stream| Op::Advance { stream }),
        1 => Just(Op::ProcessEvents),
        1 => Just(Op::EmptyCache),
    ]
}

const CONFIGS: &[&str] = &[
    "",
    "max_split_size_mb:20",
    "lazy_reclaim:1",
    "roundup_power2_divisions:4",
    "per_process_memory_fraction:0.8,garbage_collection_threshold:0.5",
];

/// Expandable segments (docs/expandable-segments.md): the same model holds (a page unmapped
/// and mapped again reuses addresses only within its own stream's segment), and reserved
/// bytes are the device's mapped bytes.
const EXPANDABLE_CONFIGS: &[&str] = &[
    "expandable_segments:True",
    "expandable_segments:True,expandable_segments_page_size_mb:2",
    "expandable_segments:True,per_process_memory_fraction:0.8,garbage_collection_threshold:0.5",
    "expandable_segments:True,expandable_segments_trim:True",
    "expandable_segments:True,expandable_segments_page_size_mb:2,expandable_segments_trim:True",
];

struct Live {
    storage: Storage<ManualBackend>,
    stream: usize,
    uses: Vec<(usize, UseOwner)>,
}

struct Freed {
    block: BlockRef,
    start: u64,
    end: u64,
    stream: usize,
    uses: Vec<(usize, UseOwner)>,
    /// Position each used stream must complete (indexed by stream).
    pos: [u64; 3],
    /// The allocator said the block went back to the pool.
    released: bool,
}

struct Model {
    backend: Arc<ManualBackend>,
    streams: [ManualStream; 3],
    live: Vec<Live>,
    freed: Vec<Freed>,
    /// Every range ever handed out, with its stream.
    history: Vec<(u64, u64, usize)>,
    record_calls: u64,
    erase_calls: u64,
}

impl Model {
    fn protected_streams(&self, f: &Freed) -> Vec<usize> {
        (0..3)
            .filter(|&s| {
                f.uses.iter().any(|u| u.0 == s)
                    && self.backend.completed(&self.streams[s]) < f.pos[s]
            })
            .collect()
    }

    /// Checks the outcome of an erase of `key` from freed block `fi` with `cur` current, and
    /// applies it to the model.
    fn check_erase_by_block(
        &mut self,
        fi: usize,
        got: EraseOutcome,
        key: (usize, UseOwner),
        cur: usize,
    ) {
        let prot_before = self.protected_streams(&self.freed[fi]);
        let f = &mut self.freed[fi];
        if f.released {
            assert_eq!(
                got,
                EraseOutcome::StaleBlock,
                "a released block's ref must be stale"
            );
            return;
        }
        match got {
            EraseOutcome::StaleBlock => {
                assert!(
                    prot_before.is_empty(),
                    "block released while streams {prot_before:?} still use it"
                );
                f.released = true;
            }
            EraseOutcome::NotCurrentStream => assert_ne!(f.stream, cur),
            EraseOutcome::NoSuchUse => {
                assert_eq!(f.stream, cur);
                assert!(!f.uses.contains(&key));
            }
            EraseOutcome::Erased | EraseOutcome::FreedNow => {
                assert_eq!(f.stream, cur);
                let i = f
                    .uses
                    .iter()
                    .position(|u| *u == key)
                    .expect("erased a use the model has");
                f.uses.swap_remove(i);
                if got == EraseOutcome::FreedNow {
                    f.released = true;
                    let prot = self.protected_streams(&self.freed[fi]);
                    assert!(prot.is_empty(), "freed while streams {prot:?} still use it");
                }
            }
        }
    }

    fn check_new_block(&self, start: u64, end: u64, stream: usize) {
        for l in &self.live {
            let (ls, le) = (
                l.storage.ptr().addr(),
                l.storage.ptr().addr() + l.storage.size(),
            );
            assert!(
                end <= ls || le <= start,
                "live allocations overlap: [{start:#x},{end:#x}) and [{ls:#x},{le:#x})"
            );
        }
        for f in &self.freed {
            if f.start < end && start < f.end {
                let prot = self.protected_streams(f);
                assert!(
                    prot.is_empty(),
                    "[{start:#x},{end:#x}) handed out while still used by streams {prot:?}"
                );
            }
        }
        for &(hs, he, hstream) in &self.history {
            if hs < end && start < he {
                assert_eq!(
                    hstream, stream,
                    "a free block of stream {hstream} was handed to stream {stream}"
                );
            }
        }
    }
}

fn run(conf: &str, ops: &[Op]) {
    let (backend, alloc, streams) = setup_with(96 * MIB, conf);
    let mut model = Model {
        backend: Arc::clone(&backend),
        streams: streams.clone(),
        live: Vec::new(),
        freed: Vec::new(),
        history: Vec::new(),
        record_calls: 0,
        erase_calls: 0,
    };
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Alloc { stream, bytes } => match alloc.allocate(bytes, &streams[stream]) {
                Ok(st) => {
                    assert!(st.size() >= bytes.max(1) && st.size() % 512 == 0);
                    let (start, end) = (st.ptr().addr(), st.ptr().addr() + st.size());
                    model.check_new_block(start, end, stream);
                    model.history.push((start, end, stream));
                    model.live.push(Live {
                        storage: st,
                        stream,
                        uses: Vec::new(),
                    });
                }
                Err(AllocError::OutOfMemory(_)) => {}
                Err(e) => panic!("unexpected error {e}"),
            },
            Op::Free { idx } if !model.live.is_empty() => {
                let i = idx % model.live.len();
                let l = model.live.swap_remove(i);
                let (block, start, end) = (
                    l.storage.block_ref(),
                    l.storage.ptr().addr(),
                    l.storage.ptr().addr() + l.storage.size(),
                );
                drop(l.storage);
                let mut pos = [0; 3];
                for &(s, _) in &l.uses {
                    pos[s] = backend.submitted(&streams[s]);
                }
                model.freed.push(Freed {
                    block,
                    start,
                    end,
                    stream: l.stream,
                    uses: l.uses,
                    pos,
                    released: false,
                });
            }
            Op::Record { idx, stream } | Op::RecordForWork { idx, stream, .. }
                if !model.live.is_empty() =>
            {
                let owner = match *op {
                    Op::RecordForWork { work, .. } => UseOwner::Work(WorkId(work)),
                    _ => UseOwner::User,
                };
                let n = model.live.len();
                let l = &mut model.live[idx % n];
                backend.enqueue_work(&streams[stream]).unwrap(); // the stream uses the tensor
                match owner {
                    UseOwner::User => {
                        alloc.record_stream(&l.storage, &streams[stream]);
                    }
                    UseOwner::Work(w) => {
                        alloc.record_stream_for_work(&l.storage, &streams[stream], w);
                    }
                }
                model.record_calls += 1;
                if stream != l.stream && !l.uses.contains(&(stream, owner)) {
                    l.uses.push((stream, owner));
                }
            }
            Op::Erase {
                idx,
                stream,
                work,
                current,
            } if !model.live.is_empty() => {
                let n = model.live.len();
                let l = &mut model.live[idx % n];
                let got = alloc.erase_stream(
                    &l.storage,
                    &streams[stream],
                    WorkId(work),
                    &streams[current],
                );
                model.erase_calls += 1;
                let key = (stream, UseOwner::Work(WorkId(work)));
                let want = if l.stream != current {
                    EraseOutcome::NotCurrentStream
                } else if let Some(i) = l.uses.iter().position(|u| *u == key) {
                    l.uses.swap_remove(i);
                    EraseOutcome::Erased
                } else {
                    EraseOutcome::NoSuchUse
                };
                assert_eq!(got, want);
            }
            Op::EraseByBlock {
                idx,
                pick,
                exact,
                stream,
                work,
                current,
            } if !model.freed.is_empty() => {
                let fi = idx % model.freed.len();
                let works: Vec<(usize, UseOwner)> = model.freed[fi]
                    .uses
                    .iter()
                    .copied()
                    .filter(|u| matches!(u.1, UseOwner::Work(_)))
                    .collect();
                // Half the time, erase a use the block really has, from the right stream.
                let (used, by, cur) = match (exact, works.is_empty()) {
                    (true, false) => match works[pick % works.len()] {
                        (ws, UseOwner::Work(wid)) => (ws, wid, model.freed[fi].stream),
                        (_, UseOwner::User) => unreachable!("filtered to work uses"),
                    },
                    _ => (stream, WorkId(work), current),
                };
                let got = alloc.erase_stream_by_block(
                    model.freed[fi].block,
                    by,
                    &streams[used],
                    &streams[cur],
                );
                model.erase_calls += 1;
                model.check_erase_by_block(fi, got, (used, UseOwner::Work(by)), cur);
            }
            Op::Advance { stream } => {
                backend.advance(&streams[stream]);
            }
            Op::ProcessEvents => {
                alloc.process_events().unwrap();
            }
            Op::EmptyCache => {
                alloc.empty_cache().unwrap();
            }
            _ => {}
        }
        let st = alloc.stats();
        check_identities(&st);
        assert_eq!(st.allocation.aggregate.current, model.live.len() as u64);
        assert_eq!(
            st.allocated_bytes.aggregate.current,
            model.live.iter().map(|l| l.storage.size()).sum::<u64>()
        );
        assert_eq!(st.record_stream_calls, model.record_calls);
        assert_eq!(st.erase_stream_calls, model.erase_calls);
        assert_eq!(
            st.reserved_bytes.aggregate.current,
            backend.raw_bytes_in_use()
        );
        if step % 4 == 3 {
            let snap = alloc.snapshot();
            common::check_tiling(&snap);
            assert_eq!(
                st.fragmentation,
                memreuse_core::observe::fragmentation(&snap),
                "live fragmentation differs from the snapshot's"
            );
        }
    }
    model.live.clear();
    backend.advance_all();
    alloc.process_events().unwrap();
    alloc.empty_cache().unwrap();
    let st = alloc.stats();
    assert_eq!(st.reserved_bytes.aggregate.current, 0);
    assert_eq!(st.pending_free_bytes, 0);
    assert_eq!(backend.raw_bytes_in_use(), 0);
    assert_eq!(backend.live_raw_allocations(), 0);
    check_identities(&st);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn allocator_matches_model(conf in 0..CONFIGS.len(), ops in prop::collection::vec(op(), 1..200)) {
        run(CONFIGS[conf], &ops);
    }

    #[test]
    fn expandable_allocator_matches_model(conf in 0..EXPANDABLE_CONFIGS.len(), ops in prop::collection::vec(op(), 1..200)) {
        run(EXPANDABLE_CONFIGS[conf], &ops);
    }
}
