//! memreuse's expandable segments against an independent model of PyTorch's rules
//! (`pytorch_expandable`), on the recorded model traces (`traces/*.trace.gz`), at device
//! capacities on the 2 MiB grid from just below the live peak to just above the setting's
//! reserved peak on an unlimited device: the first out-of-memory entry, the reserved peak
//! and the device-allocation count must be equal. Every capacity of the grid is checked
//! (about 130 replays through each allocator: under 2 s in a debug build).

mod pytorch_expandable;

use std::path::Path;

use memreuse_conformance::whatif::{Action, CAPACITY_STEP, ReplayHistory, import_file, replay};
use memreuse_core::AllocatorConfig;
use pytorch_expandable::{Model, ModelConfig, ModelFigures};

/// The settings compared: expandable segments alone, with 2 MiB large pages, and with
/// PyTorch's garbage collection (a memory fraction of the whole device).
const SETTINGS: [&str; 3] = [
    "expandable_segments:True",
    "expandable_segments:True,expandable_segments_page_size_mb:2",
    "expandable_segments:True,garbage_collection_threshold:0.8,per_process_memory_fraction:1.0",
];

fn model_config(conf: &str) -> ModelConfig {
    let mut cfg = ModelConfig {
        fraction: conf
            .contains("per_process_memory_fraction:1.0")
            .then_some(1.0),
        ..ModelConfig::default()
    };
    if conf.contains("expandable_segments_page_size_mb:2") {
        cfg.large_page = 2 << 20;
    }
    cfg
}

/// Replays `history` through the model on a device of `capacity` bytes.
fn model_replay(history: &ReplayHistory, cfg: ModelConfig, capacity: u64) -> ModelFigures {
    let mut model = Model::new(cfg, capacity);
    let mut ptrs: Vec<Option<u64>> = vec![None; history.ids];
    for b in &history.initial {
        if b.size > 0 {
            ptrs[b.id] = Some(model.malloc(b.size, b.stream).expect("initial blocks fit"));
        }
    }
    for entry in &history.entries {
        match entry.action {
            Action::Alloc { size, stream } => {
                if size > 0 {
                    let Some(p) = model.malloc(size, stream) else {
                        model.figures.first_oom = Some(entry.source);
                        break;
                    };
                    ptrs[entry.id] = Some(p);
                }
            }
            Action::Free => {
                if let Some(p) = ptrs[entry.id].take() {
                    model.free(p, None);
                }
            }
            Action::FreeRequested => {
                if let Some(p) = ptrs[entry.id] {
                    model.free(p, Some(entry.id));
                }
            }
            Action::FreeCompleted => {
                if let Some(p) = ptrs[entry.id].take() {
                    model.complete(p, entry.id);
                }
            }
        }
    }
    model.figures
}

fn memreuse_replay(history: &ReplayHistory, conf: &str, capacity: u64) -> ModelFigures {
    let config = AllocatorConfig::parse(conf).expect("valid setting");
    let f = replay(history, config, capacity, &mut |_| {}).expect("replay");
    ModelFigures {
        reserved_peak: f.reserved_peak_bytes,
        device_allocs: f.device_allocations,
        first_oom: f.first_oom_entry,
    }
}

/// The capacities compared for one setting: the 2 MiB grid from the step below the live
/// peak to the step above the unlimited reserved peak (above it nothing changes: no request
/// fails, so the chain that depends on the capacity never runs).
fn grid(history: &ReplayHistory, unlimited_peak: u64) -> Vec<u64> {
    let lo = (history.live_peak_bytes() / CAPACITY_STEP).saturating_sub(1);
    let hi = unlimited_peak.div_ceil(CAPACITY_STEP) + 1;
    (lo..=hi).map(|s| s * CAPACITY_STEP).collect()
}

fn compare_trace(name: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../traces")
        .join(format!("{name}.trace.gz"));
    let history = import_file(&path, None).expect("recorded trace");
    let mut differences = Vec::new();
    let mut compared = 0;
    for conf in SETTINGS {
        let unlimited = memreuse_replay(&history, conf, u64::MAX);
        let cfg = model_config(conf);
        assert_eq!(
            model_replay(&history, cfg, u64::MAX),
            unlimited,
            "{name} {conf}: unlimited device"
        );
        for capacity in grid(&history, unlimited.reserved_peak) {
            let ours = memreuse_replay(&history, conf, capacity);
            let theirs = model_replay(&history, cfg, capacity);
            compared += 1;
            if ours != theirs {
                differences.push(format!(
                    "{name} {conf} at {} MiB: memreuse {ours:?}, PyTorch model {theirs:?}",
                    capacity >> 20
                ));
            }
        }
    }
    assert!(compared > 3 * 10, "{name}: only {compared} capacities");
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

#[test]
fn gpt2_small_expandable_matches_the_pytorch_model() {
    compare_trace("gpt2-small");
}

#[test]
fn llama_expandable_matches_the_pytorch_model() {
    compare_trace("llama");
}

/// A deterministic pseudo-random history the recorded traces do not cover: two streams,
/// pending frees (`free_requested` long before `free_completed`), requests in both pools
/// and across the 1 MiB, 10 MiB and page boundaries.
fn random_history(seed: u64, len: usize) -> ReplayHistory {
    let mut state = seed;
    let mut next = move |n: u64| {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n
    };
    let (mut live, mut pending, mut entries, mut ids) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for source in 0..len as u64 {
        let roll = next(100);
        let action = if roll < 50 || live.is_empty() {
            let size = match next(3) {
                0 => 1 + next(1 << 20),
                1 => (1 << 20) + next(9 << 20),
                _ => (10 << 20) + next(54 << 20),
            };
            live.push(ids);
            ids += 1;
            (
                ids - 1,
                Action::Alloc {
                    size,
                    stream: next(2) as usize,
                },
            )
        } else if roll < 85 {
            let id = live.swap_remove(next(live.len() as u64) as usize);
            (id, Action::Free)
        } else if roll < 95 {
            let id = live.swap_remove(next(live.len() as u64) as usize);
            pending.push(id);
            (id, Action::FreeRequested)
        } else if let Some(id) =
            (!pending.is_empty()).then(|| pending.swap_remove(next(pending.len() as u64) as usize))
        {
            (id, Action::FreeCompleted)
        } else {
            continue;
        };
        entries.push(memreuse_conformance::whatif::Entry {
            id: action.0,
            action: action.1,
            source,
        });
    }
    ReplayHistory {
        format: "random".to_owned(),
        streams: vec![0, 1],
        entries,
        ids,
        ..ReplayHistory::default()
    }
}

#[test]
fn random_two_stream_histories_with_pending_frees_match_the_pytorch_model() {
    let mut differences = Vec::new();
    for seed in 1..=3 {
        let history = random_history(seed * 0x9e37_79b9, 1200);
        for conf in SETTINGS {
            let cfg = model_config(conf);
            let unlimited = memreuse_replay(&history, conf, u64::MAX);
            assert_eq!(
                model_replay(&history, cfg, u64::MAX),
                unlimited,
                "seed {seed} {conf}: unlimited device"
            );
            // About a dozen capacities spread over the grid keep the test short.
            let all = grid(&history, unlimited.reserved_peak);
            for capacity in all.iter().copied().step_by(all.len().div_ceil(12)) {
                let ours = memreuse_replay(&history, conf, capacity);
                let theirs = model_replay(&history, cfg, capacity);
                if ours != theirs {
                    differences.push(format!(
                        "seed {seed} {conf} at {} MiB: memreuse {ours:?}, PyTorch model {theirs:?}",
                        capacity >> 20
                    ));
                }
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
