//! The negative control (`--mode unsafe`: neither record_stream nor shelf) finds a reuse
//! race on exactly the built-in schedules that declare one, and the four real modes find
//! none anywhere: the detector catches what the policies prevent.

use memreuse_conformance::replay::{ModeChoice, ReplayOptions, replay};
use memreuse_conformance::report::RunStatus;
use memreuse_conformance::suite::suite;

#[test]
fn negative_control_finds_reuse_races_exactly_where_declared() {
    let entries = suite("builtin").expect("builtin suite builds");
    let mut wrong = Vec::new();
    for entry in &entries {
        let s = &entry.valid.schedule;
        let out = replay(
            s,
            &entry.valid.reference,
            &ReplayOptions::new("mock", ModeChoice::Unsafe),
        );
        let races = out.record.races.expect("the mock has a race detector");
        let found = races.reuse > 0;
        if found != entry.negative_control_finds_reuse_race {
            wrong.push(format!(
                "{}: declared {}, found {} reuse races ({:?})",
                s.name, entry.negative_control_finds_reuse_race, races.reuse, out.record.error
            ));
        }
        // A race is a failure, never an error: the run itself must complete.
        assert_ne!(
            out.record.status,
            RunStatus::Error,
            "{}: {:?}",
            s.name,
            out.record.error
        );
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn digests_are_identical_across_modes_and_deterministic_seeds() {
    for entry in suite("builtin").expect("builtin suite builds") {
        let s = &entry.valid.schedule;
        // Every mode free-running, and two deterministic seeds in modes 1 and 2 (the RFC's
        // comparison); `.ci/conformance` runs the whole suite deterministically too.
        let runs = ModeChoice::public_modes()
            .into_iter()
            .map(|m| (m, None))
            .chain([1, 7].into_iter().flat_map(|seed| {
                ModeChoice::public_modes()
                    .into_iter()
                    .skip(1)
                    .take(2)
                    .map(move |m| (m, Some(seed)))
            }));
        {
            for (mode, seed) in runs {
                let mut options = ReplayOptions::new("mock", mode);
                if let Some(seed) = seed {
                    options.deterministic = true;
                    options.seed = Some(seed);
                }
                let r = replay(s, &entry.valid.reference, &options).record;
                assert_eq!(
                    r.status,
                    RunStatus::Passed,
                    "{} mode {} seed {seed:?}: {:?} {:?}",
                    s.name,
                    mode.name(),
                    r.error,
                    r.race_examples
                );
                assert_eq!(
                    r.digest.as_deref(),
                    Some(entry.valid.reference.digest.as_str()),
                    "{} mode {}",
                    s.name,
                    mode.name()
                );
                assert_eq!(r.leaked_bytes, 0);
            }
        }
    }
}
