//! The verdict of a report: counts per (backend, mode) and the negative-control tally,
//! shown at the top of the HTML page and as the Markdown summary (`summary.md`, for CI job
//! summaries such as `$GITHUB_STEP_SUMMARY`).

use std::fmt::Write as _;

use super::json::{Report, RunRecord, RunStatus};
use super::meta::RunMeta;
use super::verdict::{judge, skip_notes};

/// Runs of one (backend, mode, allocator configuration) by status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Backend name.
    pub backend: String,
    /// Mode name.
    pub mode: String,
    /// The runs' allocator configuration (`None`: the default).
    pub alloc_conf: Option<String>,
    /// Passed runs.
    pub passed: usize,
    /// Failed runs.
    pub failed: usize,
    /// Runs that errored.
    pub error: usize,
    /// Skipped runs.
    pub skipped: usize,
    /// Runs that ran out of memory as their schedule declares (not counted in `error`).
    pub declared: usize,
}

/// One tally per (backend, mode, allocator configuration), in the order they first ran.
pub fn tallies(report: &Report) -> Vec<Tally> {
    let mut out: Vec<Tally> = Vec::new();
    for r in &report.runs {
        let i = if let Some(i) = out.iter().position(|t| {
            t.backend == r.backend && t.mode == r.mode && t.alloc_conf == r.alloc_conf
        }) {
            i
        } else {
            out.push(Tally {
                backend: r.backend.clone(),
                mode: r.mode.clone(),
                alloc_conf: r.alloc_conf.clone(),
                ..Tally::default()
            });
            out.len() - 1
        };
        let t = &mut out[i];
        if r.is_declared() {
            t.declared += 1;
            continue;
        }
        match r.status {
            RunStatus::Passed => t.passed += 1,
            RunStatus::Failed => t.failed += 1,
            RunStatus::Error => t.error += 1,
            RunStatus::Skipped => t.skipped += 1,
        }
    }
    out
}

/// `(matching, judged)` negative-control verdicts.
pub fn negative_control(report: &Report) -> (usize, usize) {
    let judged: Vec<_> = report
        .runs
        .iter()
        .filter(|r| r.negative_control_verdict.is_some())
        .collect();
    let matching = judged.iter().filter(|r| r.as_expected()).count();
    (matching, judged.len())
}

/// The one-line verdict, [`judge`]'s: `PASS: ...`, `FAIL: ...` or `NOTHING RAN: ...`,
/// the word first and then the reason.
pub fn headline(report: &Report) -> String {
    judge(report).to_string()
}

/// Whether some run ran out of memory as declared (the tables then get a `declared`
/// column).
pub(super) fn has_declared(report: &Report) -> bool {
    report.runs.iter().any(RunRecord::is_declared)
}

/// The Markdown summary: verdict, metadata, the tally table and the runs that went wrong.
pub fn render_markdown(report: &Report, meta: &RunMeta) -> String {
    let mut out = String::from("# memreuse conformance\n\n");
    let _ = writeln!(out, "**{}**\n", headline(report));
    for (label, value) in meta.fields() {
        let _ = writeln!(out, "- {label}: `{}`", value.replace('`', "'"));
    }
    let has_confs = report.runs.iter().any(|r| r.alloc_conf.is_some());
    let declared = has_declared(report);
    let (conf_head, conf_rule) = if has_confs {
        (" config |", "---|")
    } else {
        ("", "")
    };
    let (declared_head, declared_rule) = if declared {
        (" declared |", "---:|")
    } else {
        ("", "")
    };
    let _ = writeln!(
        out,
        "\n| backend | mode |{conf_head} passed |{declared_head} failed | error | skipped |\n|---|---|{conf_rule}---:|{declared_rule}---:|---:|---:|"
    );
    for t in tallies(report) {
        let conf = if has_confs {
            format!(
                " `{}` |",
                t.alloc_conf
                    .as_deref()
                    .unwrap_or("default")
                    .replace('`', "'")
            )
        } else {
            String::new()
        };
        let declared_cell = if declared {
            format!(" {} |", t.declared)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {} | {} |{conf} {} |{declared_cell} {} | {} | {} |",
            t.backend, t.mode, t.passed, t.failed, t.error, t.skipped
        );
    }
    let notes = skip_notes(report);
    if !notes.is_empty() {
        out.push_str("\n## Skipped\n\n");
        for (i, n) in notes.iter().enumerate() {
            let _ = writeln!(
                out,
                "{}. {} ({} runs): {}",
                i + 1,
                n.backend,
                n.runs,
                n.reason.replace('\n', " ")
            );
        }
    }
    let (matching, judged) = negative_control(report);
    if judged > 0 {
        let _ = writeln!(
            out,
            "\nNegative control: {matching} of {judged} verdicts match the declarations."
        );
    }
    let wrong: Vec<_> = report.runs.iter().filter(|r| !r.as_expected()).collect();
    if !wrong.is_empty() {
        out.push_str("\n## Not as expected\n\n");
        for r in wrong {
            let why = r
                .error
                .as_deref()
                .map(str::to_owned)
                .or_else(|| {
                    r.negative_control_verdict
                        .map(|v| format!("verdict {}", v.as_str()))
                })
                .unwrap_or_else(|| {
                    format!("mismatches {}, leaked {} B", r.mismatches, r.leaked_bytes)
                });
            let conf = r
                .alloc_conf
                .as_deref()
                .map_or_else(String::new, |c| format!(" / `{}`", c.replace('`', "'")));
            let _ = writeln!(
                out,
                "- {} / {} / mode {}{conf}: {} ({})",
                r.schedule,
                r.backend,
                r.mode,
                r.status.as_str(),
                why.replace('\n', " ")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::json::RunRecord;

    fn run(backend: &str, mode: &str, status: RunStatus) -> RunRecord {
        let mut r = RunRecord::empty("s", backend, mode, 1, 1);
        r.status = status;
        r
    }

    #[test]
    fn tallies_count_per_backend_and_mode_and_the_headline_names_failures() {
        let mut report = Report::new();
        report.runs.push(run("mock", "0", RunStatus::Passed));
        report.runs.push(run("mock", "0", RunStatus::Failed));
        report.runs.push(run("cuda", "0", RunStatus::Skipped));
        let t = tallies(&report);
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].passed, t[0].failed, t[0].skipped), (1, 1, 0));
        assert_eq!((t[1].backend.as_str(), t[1].skipped), ("cuda", 1));
        assert_eq!(headline(&report), "FAIL: 1 of 3 runs not as expected");
        let md = render_markdown(&report, &RunMeta::default());
        assert!(md.contains("| mock | 0 | 1 | 1 | 0 | 0 |"), "{md}");
        assert!(md.contains("- s / mock / mode 0: failed"), "{md}");
        report.runs.remove(1);
        assert_eq!(headline(&report), "PASS: 2 runs as expected");
        // A configuration is its own tally and column.
        let mut r = run("mock", "0", RunStatus::Failed);
        r.alloc_conf = Some("max_split_size_mb:20".into());
        report.runs.push(r);
        let t = tallies(&report);
        assert_eq!(t.len(), 3);
        assert_eq!(t[2].alloc_conf.as_deref(), Some("max_split_size_mb:20"));
        let md = render_markdown(&report, &RunMeta::default());
        assert!(md.contains("| backend | mode | config |"), "{md}");
        assert!(
            md.contains("| mock | 0 | `default` | 1 | 0 | 0 | 0 |"),
            "{md}"
        );
        assert!(
            md.contains("| mock | 0 | `max_split_size_mb:20` | 0 | 1 | 0 | 0 |"),
            "{md}"
        );
        assert!(
            md.contains("- s / mock / mode 0 / `max_split_size_mb:20`: failed"),
            "{md}"
        );
    }
}
