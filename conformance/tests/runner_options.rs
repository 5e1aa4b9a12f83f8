//! The runner without the command line: driven by its own `RunOptions`, and one wording of
//! "not compiled into this build" whether the replay, the runner or `list` says it.

use std::process::ExitCode;

use memreuse_conformance::availability::{NotCompiled, registration};
use memreuse_conformance::replay::{ModeChoice, ReplayOptions, replay};
use memreuse_conformance::runner::{RunOptions, plan, run};
use memreuse_conformance::skip::SkipReason;
use memreuse_conformance::validate::load_str;

const EXAMPLE: &str = include_str!("data/e1-ddp-buckets.json");

fn example_path() -> String {
    format!(
        "{}/tests/data/e1-ddp-buckets.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn the_runner_runs_from_its_own_options_and_writes_the_report() {
    let dir = std::env::temp_dir().join(format!("memreuse-runner-options-{}", std::process::id()));
    let json = dir.join("report.json");
    let options = RunOptions {
        backends: vec!["mock".to_owned()],
        modes: vec!["2".to_owned()],
        schedules: vec![example_path().into()],
        deterministic: true,
        json: Some(json.clone()),
        quiet: true,
        ..RunOptions::default()
    };
    assert_eq!(run(&options), ExitCode::SUCCESS);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("report")).expect("json");
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["status"], "passed");
    assert_eq!(runs[0]["digest"], "9d15e2948ee6df12");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn options_are_checked_by_the_runner_with_the_command_line_messages() {
    let bad_mode = RunOptions {
        modes: vec!["4".to_owned()],
        ..RunOptions::default()
    };
    let err = plan(&bad_mode).err().expect("mode 4 is refused");
    assert_eq!(err.0, "invalid mode `4`; valid: 0, 1, 2, 3, unsafe, all");
    let bad_check = RunOptions {
        race_check: "native".to_owned(),
        ..RunOptions::default()
    };
    let err = plan(&bad_check).err().expect("native is refused");
    assert_eq!(
        err.0,
        "invalid --race-check `native`; valid: auto, adaptor, off"
    );
    // `--require-backend` implies `--backend`, once.
    let required = RunOptions {
        backends: vec!["mock".to_owned()],
        require_backends: vec!["mock".to_owned()],
        schedules: vec![example_path().into()],
        ..RunOptions::default()
    };
    let p = plan(&required).expect("valid");
    assert_eq!(p.backends, ["mock"]);
    assert_eq!(p.required, ["mock"]);
    assert_eq!(p.modes, ModeChoice::public_modes());
}

/// The replay called directly says "not compiled" exactly as the runner's report does
/// (before, it left out the cargo feature).
#[test]
fn a_backend_not_in_this_build_is_skipped_with_one_wording_everywhere() {
    let Some(name) = ["cuda", "ascend", "vulkan"]
        .into_iter()
        .find(|n| memreuse::find_backend(n).is_none())
    else {
        return; // every known backend is linked in this build
    };
    let not_compiled = NotCompiled {
        backend: name.to_owned(),
        feature: name.to_owned(),
    };
    assert_eq!(registration(name).err(), Some(not_compiled.clone()));
    let valid = load_str("e1-ddp-buckets.json", EXAMPLE).expect("valid");
    let options = ReplayOptions::new(name, ModeChoice::Unsafe);
    let outcome = replay(&valid.schedule, &valid.reference, &options);
    assert_eq!(outcome.skip, Some(SkipReason::NotCompiled(not_compiled)));
    assert_eq!(
        outcome.record.skip_reason.as_deref(),
        Some(
            format!("backend `{name}` is not compiled into this build (cargo feature `{name}`)")
                .as_str()
        )
    );
}
