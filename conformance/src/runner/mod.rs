//! `memreuse-conformance run`: every selected schedule on every selected backend, mode and
//! allocator configuration, a progress bar, the comparison table, and the report files.

mod outputs;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::alloc_conf::{AllocConf, is_unsupported_config};
use crate::cli::RunArgs;
use crate::race_check::RaceCheck;
use crate::replay::{ModeChoice, ReplayOptions, replay};
use crate::report::{MemorySeries, Report, RunMeta, RunRecord, RunStatus, Verdict, render_table};
use crate::suite::{SuiteEntry, suite};
use crate::validate::load;
use outputs::{Outputs, RunFiles, artifact_links, write_reports};

/// Where the report goes when neither `--report` nor `--json` is given, relative to the
/// target directory: `$CARGO_TARGET_DIR/conformance` when that variable is set, else
/// `target/conformance` under the current directory (see [`default_report_dir`]).
pub const DEFAULT_REPORT_DIR: &str = "target/conformance";

/// The default report directory: `$CARGO_TARGET_DIR/conformance` when the variable is set
/// and not empty, else [`DEFAULT_REPORT_DIR`] (docs/report-format.md).
pub fn default_report_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        Some(target) => PathBuf::from(target).join("conformance"),
        None => PathBuf::from(DEFAULT_REPORT_DIR),
    }
}

/// A usage error: printed, exit status 2, nothing ran.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// What to run, resolved from the command line.
pub struct Plan {
    /// Schedules with their negative-control expectation (`None` for files).
    pub entries: Vec<SuiteEntry>,
    /// Whether the entries come from a built-in suite (expectations are meaningful).
    pub builtin: bool,
    /// Backend names (may include ones that are not compiled in: they are skipped).
    pub backends: Vec<String>,
    /// Modes.
    pub modes: Vec<ModeChoice>,
    /// `--race-check`.
    pub race_check: RaceCheck,
    /// `--require-backend` names (each also in `backends`).
    pub required: Vec<String>,
    /// Allocator configurations, one set of runs each (`--alloc-conf`, else
    /// `MEMREUSE_ALLOC_CONF`; `None`: the default configuration).
    pub alloc_confs: Vec<Option<AllocConf>>,
}

/// Resolves `--backend`, `--mode`, `--schedule`, `--suite` and `--alloc-conf` (or
/// `MEMREUSE_ALLOC_CONF` when no `--alloc-conf` is given).
pub fn plan(args: &RunArgs) -> Result<Plan, UsageError> {
    let known: Vec<String> = memreuse::KNOWN_BACKENDS
        .iter()
        .map(|(n, _)| (*n).to_owned())
        .collect();
    let linked: Vec<String> = memreuse::registered_backends()
        .iter()
        .map(|r| r.name.to_owned())
        .collect();
    let mut backends = Vec::new();
    for b in args.backends.iter().chain(&args.require_backends) {
        if b == "all" {
            backends.extend(linked.iter().cloned());
        } else if known.contains(b) || linked.contains(b) {
            backends.push(b.clone());
        } else {
            return Err(UsageError(format!(
                "unknown backend `{b}`; valid: all, {}",
                known
                    .iter()
                    .chain(linked.iter().filter(|l| !known.contains(l)))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    if backends.is_empty() {
        backends = linked;
    }
    let mut unique = Vec::new();
    for b in backends {
        if !unique.contains(&b) {
            unique.push(b);
        }
    }
    let backends = unique;
    let race_check = match args.race_check.as_str() {
        "" => RaceCheck::Auto,
        other => RaceCheck::parse(other).ok_or_else(|| {
            UsageError(format!(
                "invalid --race-check `{other}`; valid: auto, adaptor, off"
            ))
        })?,
    };
    let mut modes = Vec::new();
    for m in &args.modes {
        if m == "all" {
            modes.extend(ModeChoice::public_modes());
        } else {
            modes.push(ModeChoice::parse(m).ok_or_else(|| {
                UsageError(format!(
                    "invalid mode `{m}`; valid: 0, 1, 2, 3, unsafe, all"
                ))
            })?);
        }
    }
    if modes.is_empty() {
        modes = ModeChoice::public_modes();
    }
    let mut seen = Vec::new();
    modes.retain(|m| {
        if seen.contains(m) {
            false
        } else {
            seen.push(*m);
            true
        }
    });
    let (entries, builtin) = if args.schedules.is_empty() {
        let name = args.suite.as_deref().unwrap_or("builtin");
        (suite(name).map_err(|e| UsageError(e.to_string()))?, true)
    } else {
        if args.suite.is_some() {
            return Err(UsageError(
                "--suite and --schedule exclude each other".to_owned(),
            ));
        }
        let mut entries = Vec::new();
        let mut errors = Vec::new();
        // Report blocks and artifact files are keyed by the schedule's name: two files
        // with one name would merge and overwrite each other.
        let mut sources: std::collections::HashMap<String, &Path> =
            std::collections::HashMap::new();
        for path in &args.schedules {
            match load(path) {
                Ok(valid) => {
                    if let Some(first) = sources.insert(valid.schedule.name.clone(), path) {
                        errors.push(format!(
                            "schedule name `{}` is used by both {} and {}; names must differ within a run",
                            valid.schedule.name,
                            first.display(),
                            path.display()
                        ));
                    }
                    entries.push(SuiteEntry {
                        valid,
                        negative_control_finds_reuse_race: false,
                    });
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        if !errors.is_empty() {
            return Err(UsageError(errors.join("\n")));
        }
        (entries, false)
    };
    for (flag, dir) in [
        ("--snapshot-dir", &args.snapshot_dir),
        ("--trace-dir", &args.trace_dir),
    ] {
        if let Some(dir) = dir
            && dir.exists()
            && !dir.is_dir()
        {
            return Err(UsageError(format!(
                "{flag} {} is not a directory",
                dir.display()
            )));
        }
    }
    let alloc_confs = crate::alloc_conf::resolve_from_env(&args.alloc_confs)
        .map_err(|e| UsageError(e.to_string()))?;
    Ok(Plan {
        entries,
        builtin,
        backends,
        modes,
        race_check,
        required: args.require_backends.clone(),
        alloc_confs,
    })
}

/// Runs the `run` subcommand; returns the exit status (0 all passed or skipped, 1 a run
/// failed or errored, 2 usage error / invalid schedule).
pub fn run(args: &RunArgs) -> ExitCode {
    let plan = match plan(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("memreuse-conformance: {e}");
            return ExitCode::from(2);
        }
    };
    let total =
        (plan.alloc_confs.len() * plan.entries.len() * plan.backends.len() * plan.modes.len())
            as u64;
    let terminal = std::io::stderr().is_terminal();
    let bar = if args.quiet || !terminal {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}") {
            b.set_style(style);
        }
        // Redraws on its own clock, so the elapsed time moves during one long run.
        b.enable_steady_tick(Duration::from_millis(250));
        b
    };
    // Piped (CI logs): one line per finished run instead of a bar nobody sees.
    let progress_lines = !args.quiet && !terminal;
    let outputs = Outputs::of(args);
    let meta = RunMeta::capture(if args.deterministic {
        format!("deterministic, seed {}", args.seed.unwrap_or(0))
    } else {
        "free-running threads (no --deterministic)".to_owned()
    });
    let mut last_html: Option<Instant> = None;
    let started = Instant::now();
    let mut report = Report::new();
    let mut series: Vec<MemorySeries> = Vec::new();
    let mut files: Vec<RunFiles> = Vec::new();
    // Each configuration is a whole set of runs, so a run stopped at a time limit has
    // complete sets for the configurations it finished.
    for (conf, entry) in plan
        .alloc_confs
        .iter()
        .flat_map(|c| plan.entries.iter().map(move |e| (c, e)))
    {
        let conf_label = conf
            .as_ref()
            .map_or_else(String::new, |c| format!(" conf `{}`", c.text));
        let schedule = &entry.valid.schedule;
        for backend in &plan.backends {
            for &mode in &plan.modes {
                bar.set_message(format!(
                    "{} on {backend} mode {}{conf_label}",
                    schedule.name,
                    mode.name()
                ));
                let mut options = ReplayOptions::new(backend, mode);
                options.device_memory = args.device_memory;
                options.seed = args.seed;
                options.deterministic = args.deterministic;
                options.timeout = Duration::from_secs(60);
                options.snapshot_dir.clone_from(&args.snapshot_dir);
                options.trace_dir.clone_from(&args.trace_dir);
                options.race_check = plan.race_check;
                options.alloc_conf.clone_from(conf);
                let outcome = if memreuse::find_backend(backend).is_none() {
                    let feature = memreuse::KNOWN_BACKENDS
                        .iter()
                        .find(|(n, _)| n == backend)
                        .map_or(backend.as_str(), |(_, f)| f);
                    let mut record = RunRecord::skipped(
                        &schedule.name,
                        backend,
                        &mode.name(),
                        schedule.world_size,
                        u64::from(schedule.iterations),
                        format!(
                            "backend `{backend}` is not compiled into this build (cargo feature `{feature}`)"
                        ),
                    );
                    record.alloc_conf = conf.as_ref().map(|c| c.text.clone());
                    crate::replay::ReplayOutcome {
                        record,
                        series: MemorySeries::default(),
                        races: Vec::new(),
                        artifacts: Vec::new(),
                        artifact_errors: Vec::new(),
                    }
                } else {
                    replay(schedule, &entry.valid.reference, &options)
                };
                for e in &outcome.artifact_errors {
                    eprintln!(
                        "memreuse-conformance: {} on {backend} mode {}{conf_label}: could not write {e}",
                        schedule.name,
                        mode.name()
                    );
                }
                if !outcome.artifacts.is_empty() {
                    files.push((
                        schedule.name.clone(),
                        backend.clone(),
                        mode.name(),
                        conf.as_ref().map(|c| c.text.clone()),
                        outcome.artifacts,
                    ));
                }
                let mut record = outcome.record;
                if plan.builtin && mode == ModeChoice::Unsafe {
                    let expects = entry.negative_control_finds_reuse_race;
                    record.negative_control_expects_reuse_race = Some(expects);
                    if record.status != RunStatus::Skipped {
                        record.negative_control_verdict = Verdict::judge(expects, record.races);
                    }
                }
                if progress_lines {
                    eprintln!(
                        "[{}/{total}] {} {backend} mode {}{conf_label}: {} ({:.1} ms)",
                        report.runs.len() + 1,
                        schedule.name,
                        mode.name(),
                        record.status.as_str(),
                        record.wall_ms
                    );
                }
                report.runs.push(record);
                if !outcome.series.per_rank.is_empty() {
                    series.push(outcome.series);
                }
                bar.inc(1);
                // Rewritten after every run so a run killed at a time limit keeps what
                // finished. The page (charts) at most every 2 s; always at the end.
                let html_due = last_html.is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
                let links = artifact_links(outputs.link_base(), files.clone());
                if let Err(e) = write_reports(&outputs, &meta, &report, &series, &links, html_due) {
                    eprintln!("memreuse-conformance: could not write the report: {e}");
                } else if html_due {
                    last_html = Some(Instant::now());
                }
            }
        }
    }
    bar.finish_and_clear();
    // Survives a closed stdout (`run ... | head`): see `cli::Stdout`.
    let mut out = crate::cli::Stdout::new();
    out.text(&render_table(&report));
    let wall = started.elapsed().as_secs_f64();
    let counts = |s: &str| {
        report
            .runs
            .iter()
            .filter(|r| r.status.as_str() == s)
            .count()
    };
    out.line(&format!(
        "{} runs in {wall:.1} s: {} passed, {} failed, {} errors, {} skipped",
        report.runs.len(),
        counts("passed"),
        counts("failed"),
        counts("error"),
        counts("skipped")
    ));
    print_verdicts(&mut out, &report);
    let missing = missing_required(&mut out, &plan.required, &report);
    for m in &missing {
        out.line(&format!("required backend {m}"));
    }
    let links = artifact_links(outputs.link_base(), files);
    if !args.quiet {
        for (flag, d) in [
            ("snapshots", &args.snapshot_dir),
            ("timelines", &args.trace_dir),
        ] {
            if let Some(d) = d {
                out.line(&format!("{flag}: {}", d.display()));
            }
        }
    }
    if let Err(e) = write_reports(&outputs, &meta, &report, &series, &links, true) {
        eprintln!("memreuse-conformance: could not write the report: {e}");
        return ExitCode::from(1);
    }
    if !args.quiet {
        let mut written = Vec::new();
        if let Some(json) = &outputs.json {
            written.push(json.display().to_string());
        }
        if let Some(dir) = &outputs.dir {
            for f in ["report.json", "report.html", "summary.md"] {
                written.push(dir.join(f).display().to_string());
            }
        }
        out.line(&format!("report: {}", written.join(", ")));
    }
    out.status(if report.all_as_expected() && missing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Prints expected vs found for every judged negative-control run, and a tally.
fn print_verdicts(out: &mut crate::cli::Stdout, report: &Report) {
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

/// For each `--require-backend` name, why it cannot count as tested: not compiled in,
/// unavailable, or every run of it skipped for a reason other than too few devices or an
/// unsupported allocator configuration.
fn missing_required(
    stdout: &mut crate::cli::Stdout,
    required: &[String],
    report: &Report,
) -> Vec<String> {
    let mut out = Vec::new();
    for name in required {
        let Some(reg) = memreuse::find_backend(name) else {
            let feature = memreuse::KNOWN_BACKENDS
                .iter()
                .find(|(n, _)| n == name)
                .map_or(name.as_str(), |(_, f)| f);
            out.push(format!(
                "`{name}` is not compiled into this build (cargo feature `{feature}`)"
            ));
            continue;
        };
        match (reg.device_count)() {
            Err(e) => out.push(format!("`{name}` is unavailable: {e}")),
            Ok(0) => out.push(format!("`{name}` is unavailable: no device")),
            Ok(_) => {
                let runs: Vec<&RunRecord> =
                    report.runs.iter().filter(|r| &r.backend == name).collect();
                let unavailable: Vec<&RunRecord> = runs
                    .iter()
                    .copied()
                    .filter(|r| {
                        r.status == RunStatus::Skipped
                            && !r.skip_reason.as_deref().is_some_and(is_counted_skip)
                    })
                    .collect();
                let count = |pick: fn(&str) -> bool| {
                    runs.iter()
                        .filter(|r| r.skip_reason.as_deref().is_some_and(pick))
                        .count()
                };
                let too_few = count(is_too_few_devices);
                if too_few > 0 {
                    stdout.line(&format!(
                        "required backend `{name}`: {too_few} runs skipped for too few devices"
                    ));
                }
                let unsupported = count(is_unsupported_config);
                if unsupported > 0 {
                    stdout.line(&format!(
                        "required backend `{name}`: {unsupported} runs skipped for an allocator configuration it does not support"
                    ));
                }
                if let Some(r) = unavailable.iter().find(|r| {
                    r.skip_reason
                        .as_deref()
                        .is_some_and(|s| s.contains("unavailable"))
                }) {
                    out.push(format!(
                        "`{name}` is unavailable: {}",
                        r.skip_reason.as_deref().unwrap_or_default()
                    ));
                }
            }
        }
    }
    out
}

/// Skips that are counted, not failed, for a required backend: too few devices, or an
/// allocator configuration the backend cannot provide.
fn is_counted_skip(reason: &str) -> bool {
    is_too_few_devices(reason) || is_unsupported_config(reason)
}

/// The replay's skip reason for a world larger than the machine.
fn is_too_few_devices(reason: &str) -> bool {
    reason.contains("needs ") && reason.contains(" devices")
}
