//! Golden test: every observable effect of long deterministic call sequences is pinned.
//!
//! The allocator core was rewritten (a device-free block index, size-class bitmaps instead
//! of ordered B-tree sets, eager split/merge instead of lazily coalesced bins) under the
//! promise that nothing observable changes: addresses, sizes, every statistic (peaks and
//! cumulative counts included), fragmentation, snapshots, trace entries (times excepted),
//! out-of-memory reports, erase outcomes and `process_events` results. This test replays
//! seeded random sequences of allocate / free / record_stream / per-work uses / erase /
//! stream progress / `process_events` / `empty_cache` / peak resets under several
//! configurations, folds each step's observables into an FNV-1a digest, and compares the
//! digest after every 250 steps with `data/allocator_golden.txt`, which was produced by the
//! implementation before the rewrite (the B-tree pools with lazy coalescing).
//!
//! To regenerate the file after a *deliberate* change of observable behaviour, run with
//! `MEMREUSE_GOLDEN_WRITE=1` and say in the commit why the figures changed.

use std::fmt::Write as _;
use std::sync::Arc;

use memreuse_core::testing::{ManualBackend, ManualStream, SplitMix64};
use memreuse_core::{AllocatorConfig, Backend, BlockRef, CachingAllocator, Storage, WorkId};

const MIB: u64 = 1 << 20;
const STEPS: usize = 3000;
const CHUNK: usize = 250;

/// Configurations exercised (each with its own seed).
const CONFIGS: [&str; 5] = [
    "",
    "max_split_size_mb:40",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
    "lazy_reclaim:1,max_split_size_mb:24",
];

struct Fnv(u64);

impl Fnv {
    fn add(&mut self, s: &str) {
        for b in s.bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

fn bytes(rng: &mut SplitMix64) -> u64 {
    match rng.below(10) {
        0..=3 => rng.range_inclusive(1, 4095),
        4..=6 => rng.range_inclusive(4096, MIB),
        7 | 8 => rng.range_inclusive(MIB + 1, 12 * MIB),
        _ => rng.range_inclusive(20 * MIB, 46 * MIB),
    }
}

/// The observable text of a snapshot, without trace times.
fn snapshot_text(alloc: &CachingAllocator<ManualBackend>) -> String {
    let snap = alloc.snapshot();
    // `is_expandable` is newer than the golden file; it is false without expandable
    // segments, so it is left out of the text.
    assert!(snap.segments.iter().all(|s| !s.is_expandable));
    let mut out = format!("{:?}", snap.segments).replace(" is_expandable: false,", "");
    for t in &snap.traces {
        let _ = write!(
            out,
            "|{}:{:#x}:{}:{}:{:?}",
            t.action.as_str(),
            t.addr,
            t.size,
            t.stream,
            t.device_free
        );
    }
    out
}

/// Runs one configuration; returns the digest after every [`CHUNK`] steps.
fn run(conf: &str, seed: u64) -> Vec<u64> {
    let backend = Arc::new(ManualBackend::new(320 * MIB));
    let config = AllocatorConfig::parse(conf)
        .expect("config parses")
        .with_trace_capacity(64);
    let alloc = CachingAllocator::new(Arc::clone(&backend), config);
    let streams: [ManualStream; 3] = [
        backend.default_stream(),
        backend.create_stream().unwrap(),
        backend.create_stream().unwrap(),
    ];
    let mut rng = SplitMix64::new(seed);
    let mut live: Vec<Storage<ManualBackend>> = Vec::new();
    let mut dropped: Vec<BlockRef> = Vec::new();
    let mut digest = Fnv(0xcbf2_9ce4_8422_2325);
    let mut chunks = Vec::new();
    for step in 0..STEPS {
        let mut line = String::new();
        match rng.below(100) {
            0..=39 => {
                let s = rng.below(3);
                let n = bytes(&mut rng);
                match alloc.allocate(n, &streams[s]) {
                    Ok(st) => {
                        let _ = write!(line, "A{s}:{n}->{:#x}+{}", st.ptr().addr(), st.size());
                        live.push(st);
                    }
                    Err(e) => {
                        let _ = write!(line, "A{s}:{n}->{e}");
                    }
                }
            }
            40..=69 if !live.is_empty() => {
                let st = live.swap_remove(rng.below(live.len()));
                let _ = write!(line, "F{:#x}", st.ptr().addr());
                dropped.push(st.block_ref());
                if dropped.len() > 16 {
                    dropped.remove(0);
                }
                drop(st);
            }
            70..=75 if !live.is_empty() => {
                let i = rng.below(live.len());
                let s = rng.below(3);
                backend.enqueue_work(&streams[s]).unwrap();
                alloc.record_stream(&live[i], &streams[s]);
                let _ = write!(line, "R{i}:{s}");
            }
            76..=81 if !live.is_empty() => {
                let i = rng.below(live.len());
                let s = rng.below(3);
                let w = WorkId(rng.below(3) as u64 + 1);
                backend.enqueue_work(&streams[s]).unwrap();
                alloc.record_stream_for_work(&live[i], &streams[s], w);
                let _ = write!(line, "W{i}:{s}:{w}");
            }
            82..=85 => {
                let s = rng.below(3);
                let cur = rng.below(3);
                let w = WorkId(rng.below(3) as u64 + 1);
                let out = if !dropped.is_empty() && rng.chance(500) {
                    let r = dropped[rng.below(dropped.len())];
                    alloc.erase_stream_by_block(r, w, &streams[s], &streams[cur])
                } else if !live.is_empty() {
                    let i = rng.below(live.len());
                    alloc.erase_stream(&live[i], &streams[s], w, &streams[cur])
                } else {
                    memreuse_core::EraseOutcome::StaleBlock
                };
                let _ = write!(line, "E{s}:{cur}:{w}->{out:?}");
            }
            86..=92 => {
                let s = rng.below(3);
                backend.advance(&streams[s]);
                let _ = write!(line, "V{s}");
            }
            93..=95 => {
                let r = alloc.process_events();
                let _ = write!(line, "P{r:?}");
            }
            96 => {
                let r = alloc.empty_cache();
                let _ = write!(line, "C{r:?}");
            }
            97 => {
                alloc.reset_peak_stats();
                line.push('K');
            }
            _ => {
                backend.advance_all();
                line.push_str("VA");
            }
        }
        // `quarantined_bytes` is newer than the golden file; it stays 0 here (the manual
        // backend's event queries never fail), so it is left out of the digest. So are
        // `num_device_map` / `num_device_unmap`, 0 without expandable segments.
        let stats = alloc.stats();
        assert_eq!(stats.quarantined_bytes, 0);
        assert_eq!((stats.num_device_map, stats.num_device_unmap), (0, 0));
        let stats = format!("{stats:?}")
            .replace(", quarantined_bytes: 0", "")
            .replace(", num_device_map: 0, num_device_unmap: 0", "");
        let _ = write!(line, "|{stats}");
        if step % 97 == 0 {
            line.push_str(&snapshot_text(&alloc));
        }
        digest.add(&line);
        if (step + 1) % CHUNK == 0 {
            chunks.push(digest.0);
        }
    }
    let s = alloc.stats();
    eprintln!(
        "{conf}: ooms {} retries {} device frees {} sync-all {}",
        s.num_ooms, s.num_alloc_retries, s.num_device_free, s.num_sync_all_streams
    );
    drop(live);
    chunks
}

#[test]
fn observable_effects_match_the_previous_implementation() {
    let mut text = String::new();
    for (i, conf) in CONFIGS.iter().enumerate() {
        let chunks = run(conf, 0x601D + i as u64);
        for (k, d) in chunks.iter().enumerate() {
            let _ = writeln!(text, "{i} {} {d:016x}", (k + 1) * CHUNK);
        }
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/allocator_golden.txt"
    );
    if std::env::var_os("MEMREUSE_GOLDEN_WRITE").is_some() {
        std::fs::write(path, &text).expect("write golden file");
        return;
    }
    let golden = std::fs::read_to_string(path).expect("golden file present");
    for (got, want) in text.lines().zip(golden.lines()) {
        let (i, _) = got.split_once(' ').unwrap();
        assert_eq!(
            got,
            want,
            "observable effects differ from the previous implementation (config `{}`, \
             first differing chunk shown as `config steps digest`)",
            CONFIGS[i.parse::<usize>().unwrap()]
        );
    }
    assert_eq!(text.lines().count(), golden.lines().count());
}
