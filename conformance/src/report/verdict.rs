//! The one judgement of a run (issue 30): PASS, FAIL or NOTHING RAN, with its reason. It
//! decides the exit status, the terminal's last line, `summary.md` and the HTML verdict,
//! so none of them can say PASS when the run failed or nothing ran. Also the skip reasons,
//! each (backend, reason) once, for the rows that refer to them.

use std::fmt::Write as _;

use super::json::{Report, RunRecord, RunStatus};

/// What a run amounts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every run as expected, and at least one ran.
    Pass,
    /// A run not as expected, or a `--require-backend` backend that did not run.
    Fail,
    /// Every selected run was skipped (or none was selected): exit 0, so a job on a
    /// machine without the hardware keeps passing, but never called PASS.
    NothingRan,
}

impl Outcome {
    /// `PASS`, `FAIL` or `NOTHING RAN`: the word every output leads with.
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::NothingRan => "NOTHING RAN",
        }
    }

    /// The runner's exit status: 1 for FAIL, else 0.
    pub fn exit_status(self) -> u8 {
        u8::from(self == Outcome::Fail)
    }
}

/// The judgement of a report: the outcome and its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// The outcome.
    pub outcome: Outcome,
    /// Why, in words (`76 runs as expected`, `required backend ...`).
    pub reason: String,
}

impl std::fmt::Display for Judgement {
    /// `WORD: reason`, the one line every output carries.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.outcome.word(), self.reason)
    }
}

/// One distinct skip reason of a backend, numbered from 1 in the order first met.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkipNote {
    /// The backend whose runs were skipped.
    pub backend: String,
    /// The reason, as in each run's `skip_reason`.
    pub reason: String,
    /// How many runs it skipped.
    pub runs: usize,
}

/// Every distinct (backend, skip reason) of the report, in the order first met.
pub fn skip_notes(report: &Report) -> Vec<SkipNote> {
    let mut notes: Vec<SkipNote> = Vec::new();
    for r in report
        .runs
        .iter()
        .filter(|r| r.status == RunStatus::Skipped)
    {
        let reason = r.skip_reason.as_deref().unwrap_or("");
        match notes
            .iter_mut()
            .find(|n| n.backend == r.backend && n.reason == reason)
        {
            Some(n) => n.runs += 1,
            None => notes.push(SkipNote {
                backend: r.backend.clone(),
                reason: reason.to_owned(),
                runs: 1,
            }),
        }
    }
    notes
}

/// The number (from 1) of `run`'s skip note in `notes`, `None` for a run not skipped.
pub fn skip_note_number(notes: &[SkipNote], run: &RunRecord) -> Option<usize> {
    if run.status != RunStatus::Skipped {
        return None;
    }
    let reason = run.skip_reason.as_deref().unwrap_or("");
    notes
        .iter()
        .position(|n| n.backend == run.backend && n.reason == reason)
        .map(|i| i + 1)
}

/// Judges `report`: FAIL when a required backend did not run (`required_missing`) or a
/// run is not as expected; NOTHING RAN when every run was skipped; else PASS.
pub fn judge(report: &Report) -> Judgement {
    let total = report.runs.len();
    let unexpected = report.runs.iter().filter(|r| !r.as_expected()).count();
    let skipped = report
        .runs
        .iter()
        .filter(|r| r.status == RunStatus::Skipped)
        .count();
    let declared = report.runs.iter().filter(|r| r.is_declared()).count();
    if !report.required_missing.is_empty() {
        let mut reason = report
            .required_missing
            .iter()
            .map(|m| format!("required backend {m}"))
            .collect::<Vec<_>>()
            .join("; ");
        if unexpected > 0 {
            let _ = write!(reason, "; {unexpected} of {total} runs not as expected");
        }
        return Judgement {
            outcome: Outcome::Fail,
            reason,
        };
    }
    if unexpected > 0 {
        return Judgement {
            outcome: Outcome::Fail,
            reason: format!("{unexpected} of {total} runs not as expected"),
        };
    }
    if skipped == total {
        let notes = skip_notes(report);
        let reason = match notes.as_slice() {
            [] => "no run was selected".to_owned(),
            [only] => format!("all {total} runs skipped: {}", only.reason),
            _ => format!(
                "all {total} runs skipped, for {} reasons (listed with the runs)",
                notes.len()
            ),
        };
        return Judgement {
            outcome: Outcome::NothingRan,
            reason,
        };
    }
    let mut reason = format!("{total} runs as expected");
    if declared > 0 {
        let _ = write!(reason, " ({declared} out of memory as declared)");
    }
    Judgement {
        outcome: Outcome::Pass,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(backend: &str, status: RunStatus) -> RunRecord {
        let mut r = RunRecord::empty("s", backend, "0", 1, 1);
        r.status = status;
        r
    }

    /// All skipped is NOTHING RAN (exit 0) with the reason; a missing required backend is
    /// FAIL (exit 1) even when every run was skipped; one run that ran makes PASS.
    #[test]
    fn the_judgement_tells_pass_from_nothing_ran_and_a_missing_backend() {
        let mut report = Report::new();
        for _ in 0..2 {
            report.runs.push(RunRecord::skipped(
                "s",
                "cuda",
                "0",
                1,
                1,
                "not compiled".into(),
            ));
        }
        let j = judge(&report);
        assert_eq!(j.outcome, Outcome::NothingRan);
        assert_eq!(
            j.to_string(),
            "NOTHING RAN: all 2 runs skipped: not compiled"
        );
        assert_eq!(j.outcome.exit_status(), 0);
        assert_eq!(
            skip_notes(&report),
            [SkipNote {
                backend: "cuda".into(),
                reason: "not compiled".into(),
                runs: 2
            }]
        );
        report.required_missing = vec!["`cuda` is not compiled".into()];
        let j = judge(&report);
        assert_eq!(j.outcome, Outcome::Fail);
        assert_eq!(
            j.to_string(),
            "FAIL: required backend `cuda` is not compiled"
        );
        assert_eq!(j.outcome.exit_status(), 1);
        report.required_missing.clear();
        report.runs.push(run("mock", RunStatus::Passed));
        assert_eq!(judge(&report).to_string(), "PASS: 3 runs as expected");
        report.runs.push(run("mock", RunStatus::Error));
        assert_eq!(
            judge(&report).to_string(),
            "FAIL: 1 of 4 runs not as expected"
        );
        report.runs[3].declared_outcome = Some(super::super::json::DECLARED_OOM.into());
        assert_eq!(
            judge(&report).to_string(),
            "PASS: 4 runs as expected (1 out of memory as declared)"
        );
    }
}
