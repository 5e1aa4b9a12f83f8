//! `--race-check adaptor` over the detector-less mock judges every built-in run as the
//! mock's native detector does: per run, (reuse races > 0, schedule races > 0) are equal,
//! in modes 0-3 and in the negative control, under deterministic execution.

use memreuse_conformance::race_check::RaceCheck;
use memreuse_conformance::replay::{ModeChoice, ReplayOptions, replay};
use memreuse_conformance::suite::suite;

const SEED: u64 = 11;

#[test]
fn adaptor_verdicts_equal_the_native_detectors_over_the_builtin_suite() {
    let entries = suite("builtin").expect("builtin suite builds");
    let mut modes = ModeChoice::public_modes();
    modes.push(ModeChoice::Unsafe);
    let mut differ = Vec::new();
    let mut caught = 0;
    for entry in &entries {
        let s = &entry.valid.schedule;
        for &mode in &modes {
            let verdict = |check: RaceCheck| {
                let mut o = ReplayOptions::new("mock", mode);
                o.deterministic = true;
                o.seed = Some(SEED);
                o.race_check = check;
                let out = replay(s, &entry.valid.reference, &o);
                let races = out.record.races.expect("a checker ran");
                (
                    out.record.race_checker.clone(),
                    (races.reuse > 0, races.schedule > 0),
                )
            };
            let (native_by, native) = verdict(RaceCheck::Auto);
            let (adaptor_by, adaptor) = verdict(RaceCheck::Adaptor);
            assert_eq!(native_by.as_deref(), Some("native"));
            assert_eq!(adaptor_by.as_deref(), Some("adaptor"));
            if native != adaptor {
                differ.push(format!(
                    "{} mode {}: native {native:?}, adaptor {adaptor:?}",
                    s.name,
                    mode.name()
                ));
            }
            if mode == ModeChoice::Unsafe && adaptor.0 {
                caught += 1;
            }
        }
    }
    assert!(differ.is_empty(), "{differ:#?}");
    assert!(
        caught > 0,
        "the adaptor caught the negative control somewhere"
    );
}

#[test]
fn off_leaves_races_null_and_says_so() {
    let entries = suite("builtin").expect("builtin suite builds");
    let entry = &entries[0];
    let mut o = ReplayOptions::new("mock", ModeChoice::Unsafe);
    o.race_check = RaceCheck::Off;
    let out = replay(&entry.valid.schedule, &entry.valid.reference, &o);
    assert_eq!(out.record.races, None);
    assert_eq!(out.record.race_checker.as_deref(), Some("none"));
}
