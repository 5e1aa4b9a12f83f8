//! One `run` in progress: each run replayed, judged and recorded in turn, the report
//! rewritten after the first and then at most every few seconds, and at the end the
//! tables, verdicts, the final report and the exit status.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::options::RunOptions;
use super::outputs::{Outputs, Rewrites, RunFiles, artifact_links};
use super::plan::Plan;
use super::progress::Progress;
use super::smallest_device;
use super::summary::{check_required, print_totals, print_verdicts};
use crate::alloc_conf::AllocConf;
use crate::replay::{ModeChoice, ReplayOptions, ReplayOutcome, replay};
use crate::report::{
    DECLARED_OOM, MemorySeries, Report, RunMeta, RunRecord, RunStatus, Verdict, judge, render_table,
};
use crate::skip::SkipReason;
use crate::stdout::Stdout;
use crate::suite::SuiteEntry;

/// How long a communication op waits for a missing peer in every run.
const PEER_TIMEOUT: Duration = Duration::from_secs(60);

/// Everything one `run` gathers as its runs finish.
pub(super) struct Session<'a> {
    options: &'a RunOptions,
    plan: &'a Plan,
    progress: Progress,
    outputs: Outputs,
    meta: RunMeta,
    started: Instant,
    rewrites: Rewrites,
    report: Report,
    series: Vec<MemorySeries>,
    files: Vec<RunFiles>,
    /// Every skipped run's backend and reason, for `--require-backend`.
    skips: Vec<(String, SkipReason)>,
}

/// One run of the plan: an allocator configuration, a schedule, a backend and a mode.
#[derive(Clone, Copy)]
pub(super) struct RunKey<'p> {
    /// The allocator configuration (`None`: the default).
    pub(super) conf: &'p Option<AllocConf>,
    /// The schedule and its expectations.
    pub(super) entry: &'p SuiteEntry,
    /// The backend's name.
    pub(super) backend: &'p str,
    /// The policy.
    pub(super) mode: ModeChoice,
}

impl RunKey<'_> {
    /// ` conf `TEXT`` for a run under a configuration, empty for the default.
    fn conf_label(&self) -> String {
        self.conf
            .as_ref()
            .map_or_else(String::new, |c| format!(" conf `{}`", c.text))
    }

    /// `SCHEDULE on BACKEND mode M[ conf `TEXT`]`: the bar's message and error prefix.
    fn label(&self) -> String {
        format!(
            "{} on {} mode {}{}",
            self.entry.valid.schedule.name,
            self.backend,
            self.mode.name(),
            self.conf_label()
        )
    }
}

impl<'a> Session<'a> {
    /// Starts the clock and the progress display for `plan`'s runs, writing to `outputs`.
    pub(super) fn start(options: &'a RunOptions, plan: &'a Plan, outputs: Outputs) -> Self {
        let mut report = Report::new();
        // A required backend that is not compiled in or has no device fails the run
        // before any of its runs: the partial report never says PASS meanwhile.
        report.required_missing = check_required(&plan.required, &[]).missing;
        let mut meta = RunMeta::capture(if options.deterministic {
            format!("deterministic, seed {}", options.seed.unwrap_or(0))
        } else {
            "free-running threads (no --deterministic)".to_owned()
        });
        meta.allocator.clone_from(&plan.allocator);
        report.allocator = Some(plan.allocator.clone());
        Session {
            options,
            plan,
            progress: Progress::start(options.quiet, plan.total_runs()),
            outputs,
            meta,
            started: Instant::now(),
            rewrites: Rewrites::default(),
            report,
            series: Vec::new(),
            files: Vec::new(),
            skips: Vec::new(),
        }
    }

    /// Replays one run, records it and rewrites the report.
    pub(super) fn run_one(&mut self, key: RunKey<'_>) {
        self.progress.running(&key.label());
        let mut outcome = replay(
            &key.entry.valid.schedule,
            &key.entry.valid.reference,
            &self.replay_options(key),
        );
        if self.options.smallest_device {
            // The probes take longer than the run: the bar says what is going on.
            self.progress
                .running(&format!("{}: searching the smallest device", key.label()));
            let found =
                smallest_device::search(key.entry, &outcome.record, &self.replay_options(key));
            outcome.record.smallest_device_bytes = Some(found.bytes);
            outcome.record.smallest_device_note = Some(found.note);
        }
        self.record(key, outcome);
        self.progress.advance();
        self.write_partial();
    }

    /// The replay's options for `key`, from the command line and the plan.
    fn replay_options(&self, key: RunKey<'_>) -> ReplayOptions {
        let mut options = ReplayOptions::new(key.backend, key.mode);
        options.device_memory = self.options.device_memory;
        options.seed = self.options.seed;
        options.deterministic = self.options.deterministic;
        options.timeout = PEER_TIMEOUT;
        options.snapshot_dir.clone_from(&self.options.snapshot_dir);
        options.trace_dir.clone_from(&self.options.trace_dir);
        options.race_check = self.plan.race_check;
        options.sync_collectives = self.options.sync_collectives;
        options.alloc_conf.clone_from(key.conf);
        options
    }

    /// Keeps what a run produced: its files, its record (judged when it is a
    /// negative-control run of a built-in suite), its memory series and its skip.
    fn record(&mut self, key: RunKey<'_>, outcome: ReplayOutcome) {
        for e in &outcome.artifact_errors {
            eprintln!("memreuse-conformance: {}: could not write {e}", key.label());
        }
        if !outcome.artifacts.is_empty() {
            self.files.push((
                key.entry.valid.schedule.name.clone(),
                key.backend.to_owned(),
                key.mode.name(),
                key.conf.as_ref().map(|c| c.text.clone()),
                outcome.artifacts,
            ));
        }
        let mut record = outcome.record;
        declare_outcome(&mut record, key);
        if self.plan.builtin && key.mode == ModeChoice::Unsafe {
            let expects = key.entry.negative_control_finds_reuse_race;
            record.negative_control_expects_reuse_race = Some(expects);
            if record.status != RunStatus::Skipped {
                record.negative_control_verdict =
                    Verdict::of_run(expects, record.status, record.races);
            }
        }
        self.progress.finished(
            self.report.runs.len() + 1,
            &format!(
                "{} {} mode {}{}",
                key.entry.valid.schedule.name,
                key.backend,
                key.mode.name(),
                key.conf_label()
            ),
            &record,
        );
        self.report.runs.push(record);
        if !outcome.series.per_rank.is_empty() {
            self.series.push(outcome.series);
        }
        if let Some(skip) = outcome.skip {
            self.skips.push((key.backend.to_owned(), skip));
        }
    }

    /// Rewrites the report after a run when due (after the first run, then at most every
    /// `REWRITE_EVERY`), so a run killed at a time limit keeps what had finished by the
    /// last rewrite, and thousands of short runs do not spend their time rewriting it.
    fn write_partial(&mut self) {
        if !self.rewrites.due(Instant::now()) {
            return;
        }
        let links = artifact_links(self.outputs.link_base(), self.files.clone());
        if let Err(e) =
            self.outputs
                .write_reports(&self.meta, &self.report, &self.series, &links, false)
        {
            eprintln!("memreuse-conformance: could not write the report: {e}");
        }
    }

    /// Prints the table, the totals, the verdicts and the required backends, writes the
    /// final report, and returns the exit status (0 all as expected, 1 otherwise).
    pub(super) fn finish(self) -> ExitCode {
        self.progress.finish();
        // Survives a closed stdout (`run ... | head`): see `Stdout`.
        // With the JSON report on standard output, the table goes to standard error.
        let mut out = if self.outputs.json_on_stdout() {
            Stdout::stderr()
        } else {
            Stdout::new()
        };
        out.text(&render_table(&self.report));
        print_totals(&mut out, &self.report, self.started.elapsed().as_secs_f64());
        print_verdicts(&mut out, &self.report);
        let required = check_required(&self.plan.required, &self.skips);
        for line in &required.counted {
            out.line(line);
        }
        for m in &required.missing {
            out.line(&format!("required backend {m}"));
        }
        let mut report = self.report;
        report.required_missing = required.missing;
        let judgement = judge(&report);
        let links = artifact_links(self.outputs.link_base(), self.files);
        if !self.options.quiet {
            for (flag, d) in [
                ("snapshots", &self.options.snapshot_dir),
                ("timelines", &self.options.trace_dir),
            ] {
                if let Some(d) = d {
                    out.line(&format!("{flag}: {}", d.display()));
                }
            }
        }
        if let Err(e) = self
            .outputs
            .write_reports(&self.meta, &report, &self.series, &links, true)
        {
            eprintln!("memreuse-conformance: could not write the report: {e}");
            out.line(&format!("FAIL: could not write the report: {e}"));
            return out.status(ExitCode::from(1));
        }
        if !self.options.quiet {
            out.line(&format!("report: {}", self.outputs.written().join(", ")));
        }
        // The last line is the verdict, the same one summary.md and report.html lead with.
        out.line(&judgement.to_string());
        out.status(ExitCode::from(judgement.outcome.exit_status()))
    }
}

/// Marks `record` as declared when it ran out of memory under settings its schedule
/// declares for that (`expect_out_of_memory`). A run that fits anyway is judged as usual:
/// the declaration says the schedule may not fit, not that it must fail.
fn declare_outcome(record: &mut RunRecord, key: RunKey<'_>) {
    let out_of_memory = record.status == RunStatus::Error
        && (record.ooms > 0
            || record
                .error
                .as_deref()
                .is_some_and(|e| e.contains("out of memory")));
    if !out_of_memory {
        return;
    }
    let default = memreuse_core::allocator::AllocatorConfig::default();
    let config = key.conf.as_ref().map_or(&default, |c| &c.config);
    if let Some(declared) = key
        .entry
        .valid
        .schedule
        .expect_out_of_memory
        .iter()
        .find(|d| d.applies_to(config))
    {
        record.declared_outcome = Some(DECLARED_OOM.to_owned());
        record.declared_because = Some(format!(
            "under `{}`: {}",
            declared.alloc_conf, declared.because
        ));
    }
}
