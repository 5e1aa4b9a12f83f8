//! `memreuse-conformance whatif FILE`: replays one allocation history under a list of
//! allocator settings and says, for each, the reserved peak, the fragmentation at the peak,
//! the device allocations and whether (and at which entry) it runs out of memory.
//!
//! Inputs ([`import::import_file`]): `memreuse.trace/1` (`docs/trace-format.md`), PyTorch's
//! snapshot pickle (`torch.cuda.memory._dump_snapshot`) and memreuse's own snapshots
//! (pickle or JSON), each optionally gzip-compressed. Output: a table, `--json PATH`
//! (`memreuse.whatif/1`, `docs/whatif-format.md`) and `--report DIR` (an HTML page with
//! the settings' reserved memory overlaid).

mod capacity_search;
mod doc;
mod error;
mod explain;
mod history;
mod html;
mod import;
mod json;
mod limits;
mod oom_reason;
mod output;
mod pickle;
mod pickle_input;
mod pickle_skip;
mod replay;
mod settings;
mod snapshot_import;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use memreuse_core::output::{OutputRules, write_output};

pub use capacity_search::{CAPACITY_STEP, smallest_fitting_capacity};
pub use error::ImportError;
pub use history::{Action, Entry, InitialBlock, ReplayHistory};
pub use import::{import_bytes, import_file, import_file_with, import_reader};
pub use limits::{ImportLimits, Limit};
pub use output::{Outcome, SettingOutcome, WHATIF_FORMAT, render_table, to_json};
pub use replay::{CHART_POINTS, PROGRESS_EVERY, ReplayFigures, replay};
pub use settings::{GC_SETTING, MAX_SPLIT_SWEEP_MB, Plan, default_settings, plan};

/// Histories with at least this many entries (over all settings) get a progress bar.
const PROGRESS_MIN_ENTRIES: u64 = 1_000_000;

/// Arguments of `whatif`.
#[derive(Debug, Clone, Args)]
pub struct WhatifArgs {
    /// The history: memreuse.trace/1, a PyTorch snapshot pickle or a memreuse snapshot
    /// (pickle or JSON), optionally gzip-compressed.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// A setting to replay, as a MEMREUSE_ALLOC_CONF string (repeatable; "" is PyTorch's
    /// defaults). Default: "", expandable_segments:True, max_split_size_mb:64/128/256/512,
    /// roundup_power2_divisions:4 and a garbage_collection_threshold setting.
    #[arg(long = "alloc-conf", value_name = "CONF")]
    pub alloc_conf: Vec<String>,
    /// Device capacity: bytes, or a number with KiB/MiB/GiB/TiB (case-insensitive; decimal
    /// KB/MB/GB/TB are refused). Default: the device total the history records, else
    /// unlimited.
    #[arg(long, value_name = "SIZE", value_parser = crate::size::size_arg, allow_hyphen_values = true)]
    pub device_memory: Option<u64>,
    /// A snapshot's device to replay (default: the first with trace entries).
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,
    /// Write the memreuse.whatif/1 JSON here (`-`: to standard output; the table then goes
    /// to standard error).
    #[arg(long, value_name = "PATH", allow_hyphen_values = true)]
    pub json: Option<PathBuf>,
    /// Write an HTML page (index.html) with the reserved-memory overlay into this directory.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Also search, per setting, the smallest device it fits on: every capacity on the
    /// 2 MiB grid from the live peak up, one replay each, until one fits.
    #[arg(long)]
    pub smallest_device: bool,
    /// No table and no progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Exit status of a usage error or an unreadable history.
const USAGE: u8 = 2;

/// CPU seconds this thread has used (the replay runs on the calling thread).
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID exists on every
    // Linux and macOS libc, and the call only writes `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Replays `history` under every setting of `confs`; `capacity` `None` means unlimited;
/// `search` also finds each setting's smallest fitting device. A malformed setting string
/// is an error before anything is replayed.
pub fn evaluate(
    history: &ReplayHistory,
    confs: &[String],
    capacity: Option<u64>,
    search: bool,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<SettingOutcome>, memreuse_core::ConfigError> {
    let plans = confs
        .iter()
        .map(|c| plan(c, capacity.is_some()).map(|p| (c.clone(), p)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut outcomes = Vec::with_capacity(plans.len());
    let mut done = 0;
    for (alloc_conf, plan) in plans {
        let mut smallest_device = None;
        let outcome = match plan {
            Plan::NotAvailable(why) => Outcome::NotAvailable(why),
            Plan::NotApplicable(why) => Outcome::NotApplicable(why),
            Plan::Replay(config) => {
                let start = thread_cpu_seconds();
                let mut report = |n| progress(done + n);
                let result = replay(
                    history,
                    config.clone(),
                    capacity.unwrap_or(u64::MAX),
                    &mut report,
                );
                let cpu = thread_cpu_seconds() - start;
                match result {
                    Ok(figures) => {
                        if search {
                            match search_smallest(history, &config, &figures, capacity) {
                                Ok(bytes) => smallest_device = bytes,
                                Err(e) => {
                                    outcomes.push(SettingOutcome {
                                        alloc_conf,
                                        outcome: Outcome::Failed(e.to_string()),
                                        smallest_device: None,
                                    });
                                    continue;
                                }
                            }
                        }
                        Outcome::Replayed(Box::new(figures), cpu)
                    }
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            }
        };
        done += history.entries.len() as u64;
        outcomes.push(SettingOutcome {
            alloc_conf,
            outcome,
            smallest_device,
        });
    }
    Ok(outcomes)
}

/// The smallest fitting device for one setting, from its replay's figures (a replay on
/// an unlimited device first, when the figures came from a limited one).
fn search_smallest(
    history: &ReplayHistory,
    config: &memreuse_core::AllocatorConfig,
    figures: &ReplayFigures,
    capacity: Option<u64>,
) -> Result<Option<u64>, memreuse_core::AllocError> {
    let unlimited_peak = if capacity.is_none() {
        figures.reserved_peak_bytes
    } else {
        replay(history, config.clone(), u64::MAX, &mut |_| {})?.reserved_peak_bytes
    };
    smallest_fitting_capacity(history, config, unlimited_peak)
}

/// The `--alloc-conf` error for the first setting that does not parse, naming the flag and
/// the string given (the parser's messages name `MEMREUSE_ALLOC_CONF`, which whatif does
/// not read).
fn alloc_conf_error(confs: &[String]) -> Option<String> {
    confs.iter().find_map(|c| {
        memreuse_core::AllocatorConfig::parse(c).err().map(|e| {
            let text = e.to_string();
            let prefix = format!("{}: ", memreuse_core::allocator::ALLOC_CONF_ENV);
            let text = text.strip_prefix(&prefix).unwrap_or(&text).to_owned();
            format!("--alloc-conf {c:?}: {text}")
        })
    })
}

/// Runs `whatif`; returns the exit status (0, or 2 for a usage error or unreadable file).
pub fn run(args: &WhatifArgs) -> ExitCode {
    let file = args.file.display().to_string();
    let history = match import_file(&args.file, args.device) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("whatif: {e}");
            return ExitCode::from(USAGE);
        }
    };
    let confs = if args.alloc_conf.is_empty() {
        default_settings()
    } else {
        args.alloc_conf.clone()
    };
    if let Some(e) = alloc_conf_error(&confs) {
        eprintln!("whatif: {e}");
        return ExitCode::from(USAGE);
    }
    let capacity = args.device_memory.or(history.device_total);
    let total = history.entries.len() as u64 * confs.len() as u64;
    let bar = if args.quiet || total < PROGRESS_MIN_ENTRIES {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template(
            "whatif {bar:40} {pos}/{len} entries ({per_sec}, eta {eta})",
        ) {
            bar.set_style(style);
        }
        bar
    };
    let outcomes = match evaluate(&history, &confs, capacity, args.smallest_device, &mut |n| {
        bar.set_position(n);
    }) {
        Ok(o) => o,
        Err(e) => {
            bar.finish_and_clear();
            eprintln!("whatif: --alloc-conf: {e}");
            return ExitCode::from(USAGE);
        }
    };
    bar.finish_and_clear();
    let table = render_table(&outcomes, history.lower_bound);
    let summary = summary_lines(&file, &history, capacity, &outcomes);
    let json_to_stdout = args.json.as_deref() == Some(std::path::Path::new("-"));
    // With the JSON on standard output, everything for the reader goes to standard error.
    let say = |line: &str| {
        if json_to_stdout {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    if !args.quiet {
        for line in &summary[..summary.len() - 1] {
            say(line);
        }
        say(table.trim_end_matches('\n'));
        say(&summary[summary.len() - 1]);
    }
    let mut status = ExitCode::SUCCESS;
    // Every output goes through the one writer: never over the history itself, never
    // through a symbolic link, the page never outside --report.
    let rules = OutputRules::new().input(&args.file);
    if let Some(path) = &args.json {
        let doc = to_json(&file, &history, capacity, &outcomes);
        if json_to_stdout {
            print!("{doc}");
        } else if let Err(e) = write_output(path, doc.as_bytes(), &rules) {
            eprintln!("whatif: --json: {e}");
            status = ExitCode::FAILURE;
        } else if !args.quiet {
            say(&format!("wrote the JSON to {}", path.display()));
        }
    }
    if let Some(dir) = &args.report {
        let page = html::render_page(
            &file,
            &summary,
            &table,
            &outcomes,
            history.live_peak_bytes(),
        );
        let index = dir.join("index.html");
        let written = std::fs::create_dir_all(dir)
            .map_err(|source| memreuse_core::output::OutputError::Io {
                path: dir.display().to_string(),
                source,
            })
            .and_then(|()| write_output(&index, page.as_bytes(), &rules.clone().within(dir)));
        match written {
            Err(e) => {
                eprintln!("whatif: --report: {e}");
                status = ExitCode::FAILURE;
            }
            Ok(_) if !args.quiet => say(&format!("wrote the page to {}", index.display())),
            Ok(_) => {}
        }
    }
    status
}

/// The lines around the table, in order: the history and device, the live peak, "no setting
/// can fit" when the device is smaller than it, the incomplete-ring and recorded-OOM notes;
/// the last is the recommendation (printed after the table).
fn summary_lines(
    file: &str,
    history: &ReplayHistory,
    capacity: Option<u64>,
    outcomes: &[SettingOutcome],
) -> Vec<String> {
    let mut lines = vec![format!(
        "{file}: {} ({} entries, {} allocations, {} streams), device memory {}",
        history.format,
        history.entries.len(),
        history.ids,
        history.streams.len(),
        capacity.map_or("unlimited".to_owned(), |c| format!(
            "{c} bytes ({})",
            output::mib(c)
        )),
    )];
    lines.push(explain::live_peak_line(history));
    lines.extend(explain::cannot_fit_line(history, capacity));
    if history.skipped_unknown_frees > 0 || !history.initial.is_empty() {
        lines.push(format!(
            "trace ring incomplete: {} frees of unknown blocks skipped, {} blocks live at the start rebuilt from segments",
            history.skipped_unknown_frees,
            history.initial.len()
        ));
    }
    if let Some(&first) = history.recorded_ooms.first() {
        lines.push(format!(
            "the recorded run itself ran out of memory before entry {}",
            history.position_of_source(first)
        ));
    }
    lines.push(
        explain::recommendation(outcomes, capacity)
            .unwrap_or_else(|| "recommendation: none (no setting was replayed)".to_owned()),
    );
    lines
}
