//! Many sub-groups replay: 128 ranks x 10 groups of one rank each, one barrier per
//! group (before: over 120 s, past the 60 s communicator timeout, because every op woke
//! every stream worker of the cluster; now well under a second of work per group).

use memreuse_conformance::replay::{ModeChoice, ReplayOptions, replay};
use memreuse_conformance::report::RunStatus;
use memreuse_conformance::validate::load_str;
use serde_json::json;

#[test]
fn many_single_rank_groups_replay_within_the_communicator_timeout() {
    let (ranks, groups) = (128usize, 10usize);
    let lists: Vec<Vec<usize>> = (0..ranks).map(|r| vec![r]).collect();
    let group_map: serde_json::Map<String, serde_json::Value> = (0..groups)
        .map(|g| (format!("g{g}"), json!(lists)))
        .collect();
    let body: Vec<serde_json::Value> = (0..groups)
        .map(|g| json!({"op": "barrier", "group": format!("g{g}")}))
        .collect();
    let text = json!({"format": "memreuse.schedule/1", "name": "subgroups",
        "world_size": ranks, "groups": group_map, "body": body})
    .to_string();
    let valid = load_str("subgroups.json", &text).expect("valid");
    let out = replay(
        &valid.schedule,
        &valid.reference,
        &ReplayOptions::new(
            "mock",
            ModeChoice::Mode(memreuse_core::process_group::ReuseMode::RecordStream),
        ),
    );
    assert_eq!(
        out.record.status,
        RunStatus::Passed,
        "{:?}",
        out.record.error
    );
}
