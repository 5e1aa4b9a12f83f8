//! What `run` prints after the table: the tally of statuses, the negative-control verdicts,
//! and for each `--require-backend` backend why it cannot count as tested.

use crate::availability;
use crate::report::{Report, RunRecord, RunStatus, Verdict};
use crate::skip::SkipReason;
use crate::stdout::Stdout;

/// `N runs in T s: P passed, F failed, E errors, S skipped`.
pub(super) fn print_totals(out: &mut Stdout, report: &Report, wall_s: f64) {
    let counts = |s: RunStatus| {
        report
            .runs
            .iter()
            .filter(|r| r.status == s && !r.is_declared())
            .count()
    };
    let declared = report.runs.iter().filter(|r| r.is_declared()).count();
    let declared = if declared > 0 {
        format!(", {declared} out of memory as declared")
    } else {
        String::new()
    };
    out.line(&format!(
        "{} runs in {wall_s:.1} s: {} passed{declared}, {} failed, {} errors, {} skipped",
        report.runs.len(),
        counts(RunStatus::Passed),
        counts(RunStatus::Failed),
        counts(RunStatus::Error),
        counts(RunStatus::Skipped)
    ));
}

/// Prints expected vs found for every judged negative-control run, and a tally.
pub(super) fn print_verdicts(out: &mut Stdout, report: &Report) {
    let judged: Vec<&RunRecord> = report
        .runs
        .iter()
        .filter(|r| {
            r.negative_control_expects_reuse_race.is_some() && r.status != RunStatus::Skipped
        })
        .collect();
    if judged.is_empty() {
        return;
    }
    out.line("negative control (expected vs found):");
    let mut matching = 0;
    for r in &judged {
        let expected = if r.negative_control_expects_reuse_race == Some(true) {
            "reuse race"
        } else {
            "no race"
        };
        let found = r.races.map_or_else(
            || "nothing (no race checker ran)".to_owned(),
            |c| format!("{} reuse, {} schedule", c.reuse, c.schedule),
        );
        let verdict = r
            .negative_control_verdict
            .map_or("unjudged", Verdict::as_str);
        if r.as_expected() {
            matching += 1;
        }
        let checker = r.race_checker.as_deref().unwrap_or("none");
        out.line(&format!(
            "  {:<28} {:<7} expected {expected:<10} found {found:<22} by {checker:<7} {verdict}",
            r.schedule, r.backend
        ));
    }
    out.line(&format!(
        "negative control: {matching} of {} verdicts match the declarations",
        judged.len()
    ));
}

/// What the `--require-backend` backends amount to after the runs.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Required {
    /// Skips that are counted, not failed (too few devices, an unsupported allocator
    /// configuration): one line per backend and kind.
    pub(super) counted: Vec<String>,
    /// Why a backend cannot count as tested; any makes the run exit 1.
    pub(super) missing: Vec<String>,
}

/// For each `--require-backend` name, why it cannot count as tested: not compiled in,
/// unavailable, or a run of it skipped as unavailable. Runs skipped for too few devices or
/// an unsupported allocator configuration are counted, not failed. `skips` holds every
/// skipped run's backend and reason.
pub(super) fn check_required(required: &[String], skips: &[(String, SkipReason)]) -> Required {
    let mut out = Required::default();
    for name in required {
        let registration = match availability::registration(name) {
            Ok(r) => r,
            Err(not_compiled) => {
                out.missing.push(format!("`{name}` is {not_compiled}"));
                continue;
            }
        };
        match (registration.device_count)() {
            Err(e) => out.missing.push(format!("`{name}` is unavailable: {e}")),
            Ok(0) => out
                .missing
                .push(format!("`{name}` is unavailable: no device")),
            Ok(_) => {
                let of_backend = || skips.iter().filter(|(b, _)| b == name).map(|(_, s)| s);
                let too_few = of_backend()
                    .filter(|s| matches!(s, SkipReason::TooFewDevices { .. }))
                    .count();
                if too_few > 0 {
                    out.counted.push(format!(
                        "required backend `{name}`: {too_few} runs skipped for too few devices"
                    ));
                }
                let unsupported = of_backend()
                    .filter(|s| matches!(s, SkipReason::UnsupportedConfig { .. }))
                    .count();
                if unsupported > 0 {
                    out.counted.push(format!(
                        "required backend `{name}`: {unsupported} runs skipped for an allocator configuration it does not support"
                    ));
                }
                if let Some(reason) = of_backend().find_map(|s| match s {
                    SkipReason::Unavailable { reason } => Some(reason),
                    _ => None,
                }) {
                    out.missing
                        .push(format!("`{name}` is unavailable: {reason}"));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kind of a skip decides, not its words: a configuration string that reads like
    /// a device count is an unsupported configuration (counted once, as that), and an
    /// unavailable backend fails the requirement whatever its message says.
    #[test]
    fn a_required_backend_is_judged_by_the_kind_of_each_skip() {
        let mock = "mock".to_owned();
        let skips = [
            (
                mock.clone(),
                SkipReason::UnsupportedConfig {
                    conf: "needs 2 devices".to_owned(),
                    key: "expandable_segments".to_owned(),
                    needs: "the virtual_memory capability".to_owned(),
                    backend: mock.clone(),
                },
            ),
            (
                mock.clone(),
                SkipReason::TooFewDevices {
                    backend: mock.clone(),
                    needs: 2048,
                    has: 1024,
                },
            ),
            (
                mock.clone(),
                SkipReason::Unavailable {
                    reason: "the simulated driver is gone".to_owned(),
                },
            ),
            (
                "cuda".to_owned(),
                SkipReason::Unavailable {
                    reason: "not this backend".to_owned(),
                },
            ),
        ];
        let required = check_required(std::slice::from_ref(&mock), &skips);
        assert_eq!(
            required,
            Required {
                counted: vec![
                    "required backend `mock`: 1 runs skipped for too few devices".to_owned(),
                    "required backend `mock`: 1 runs skipped for an allocator configuration it does not support".to_owned(),
                ],
                missing: vec!["`mock` is unavailable: the simulated driver is gone".to_owned()],
            }
        );
    }

    /// A backend that is not linked is missing with the feature that would link it.
    #[test]
    fn a_required_backend_that_is_not_compiled_in_names_its_feature() {
        if memreuse::find_backend("vulkan").is_some() {
            return; // linked in this build: nothing to check
        }
        let required = check_required(&["vulkan".to_owned()], &[]);
        assert_eq!(
            required.missing,
            ["`vulkan` is not compiled into this build (cargo feature `vulkan`)"]
        );
        assert!(required.counted.is_empty());
    }
}
