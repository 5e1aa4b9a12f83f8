//! A rank that fails aborts its communicators: its peers fail at once with the cause
//! named instead of waiting out the communicator timeout (before: 60 s per mode, and the
//! peer's failed collective showed only as `mismatches: 1`).

use std::time::Duration;

use memreuse_conformance::replay::{ModeChoice, ReplayOptions, replay};
use memreuse_conformance::report::RunStatus;
use memreuse_conformance::validate::load_str;

/// Rank 1 runs out of memory before the first collective; rank 0 waits for it there.
const ONE_RANK_OOM: &str = r#"{"format": "memreuse.schedule/1", "name": "oom-one-rank",
  "world_size": 2, "device_memory": 16777216,
  "body": [
    {"op": "alloc", "t": "big", "elems": 8388608, "ranks": [1]},
    {"op": "alloc", "t": "a", "elems": 16}, {"op": "upload", "t": "a", "seed": 1},
    {"op": "all_reduce", "t": "a"}, {"op": "check", "t": "a"}, {"op": "free", "t": "a"},
    {"op": "free", "t": "big", "ranks": [1]}]}"#;

#[test]
fn a_failing_rank_aborts_its_peers_with_the_cause_named() {
    let valid = load_str("oom-one-rank.json", ONE_RANK_OOM).expect("valid");
    for mode in ModeChoice::public_modes() {
        let mut options = ReplayOptions::new("mock", mode);
        // Long enough that a peer left waiting reports a timeout, not the abort.
        options.timeout = Duration::from_secs(5);
        let out = replay(&valid.schedule, &valid.reference, &options);
        assert_eq!(out.record.status, RunStatus::Error, "mode {}", mode.name());
        let error = out.record.error.clone().unwrap_or_default();
        // The root cause comes first, then the peer, which names the abort by rank 1.
        assert!(
            error.starts_with("rank 1: body iter 0 op 0 `alloc`: ")
                && error.contains("out of memory"),
            "mode {}: {error}",
            mode.name()
        );
        let peer = error
            .split("; rank 0: ")
            .nth(1)
            .unwrap_or_else(|| panic!("mode {}: rank 0 reports no error: {error}", mode.name()));
        assert!(
            peer.contains("aborted by rank 1") && !peer.contains("timed out"),
            "mode {}: {peer}",
            mode.name()
        );
    }
}
