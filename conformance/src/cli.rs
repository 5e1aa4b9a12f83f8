//! The command line of `memreuse-conformance` (docs/report-format.md). `validate`, `generate` and
//! `list` are implemented here; `run` (also what no subcommand means) is in `runner`, which
//! takes the [`RunOptions`] this file builds from [`RunArgs`].

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::generate::{GenOptions, PRESETS, generate};
use crate::runner::RunOptions;
use crate::stdout::Stdout;
use crate::validate::{LoadError, load};

/// `memreuse-conformance`: replay collective schedules on every backend and reuse mode.
#[derive(Debug, Parser)]
#[command(
    name = "memreuse-conformance",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// The subcommand; none means `run`.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// `run`'s arguments when no subcommand is given.
    #[command(flatten)]
    pub run: RunArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run schedules on backends and modes (the default).
    Run(RunArgs),
    /// Validate schedule files (exit 0 when all are valid, 2 otherwise).
    Validate {
        /// Schedule files.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Write a generated schedule.
    Generate(GenerateArgs),
    /// List the generator presets, the built-in suites with their schedules, and the backends.
    List,
    /// Replay an allocation history under allocator settings: which one fits?
    Whatif(crate::whatif::WhatifArgs),
}

/// Arguments of `run` (docs/report-format.md).
#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// Backend: `mock`, `cuda`, `ascend`, ... or `all` (default: all available).
    #[arg(long = "backend", value_name = "NAME")]
    pub backends: Vec<String>,
    /// Reuse mode: 0, 1, 2, 3, unsafe or all (default and `all`: 0,1,2,3).
    #[arg(long = "mode", value_name = "M", value_parser = ["0", "1", "2", "3", "unsafe", "all"])]
    pub modes: Vec<String>,
    /// Schedule file to run (repeatable).
    #[arg(long = "schedule", value_name = "FILE")]
    pub schedules: Vec<PathBuf>,
    /// Built-in suite name.
    #[arg(long, value_name = "NAME")]
    pub suite: Option<String>,
    /// Seed of the mock's deterministic scheduler (with `--deterministic`; default 0):
    /// the same seed replays the same interleaving of ranks and streams.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Run the mock's ranks and streams one step at a time in a seeded order instead of on
    /// free-running threads, so a run (and a race it finds) repeats exactly. Backends that
    /// cannot honour it list it under `ignored_options` in the report.
    #[arg(long)]
    pub deterministic: bool,
    /// Capacity of each mock device (overrides the schedule's `device_memory`): bytes, or
    /// a number with KiB/MiB/GiB/TiB (`30MiB`; decimal KB/MB/GB are refused).
    #[arg(long, value_name = "SIZE", value_parser = crate::size::size_arg, allow_hyphen_values = true)]
    pub device_memory: Option<u64>,
    /// Write the JSON report to FILE (parent directories are created). Alone, it is the
    /// only report file written; add `--report DIR` for the HTML page too.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write `report.json`, `report.html` and `summary.md` (Markdown, for CI job summaries)
    /// into DIR. Default when neither this nor `--json` is given:
    /// `$CARGO_TARGET_DIR/conformance` if that is set, else `target/conformance`.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Write one memory snapshot per run here.
    #[arg(long, value_name = "DIR")]
    pub snapshot_dir: Option<PathBuf>,
    /// Write one Chrome-trace timeline per run here.
    #[arg(long, value_name = "DIR")]
    pub trace_dir: Option<PathBuf>,
    /// Print less.
    #[arg(long)]
    pub quiet: bool,
    /// Who checks races: `auto` (the backend's native detector where it has one, the
    /// race-checking adaptor elsewhere), `adaptor` (native detectors off, the adaptor
    /// alone), `off` (`races` null).
    #[arg(long, value_name = "HOW", default_value = "auto", value_parser = ["auto", "adaptor", "off"])]
    pub race_check: String,
    /// Where a synchronous collective (`async: false`) runs: `current-stream` (PyTorch
    /// 2.8+: on the caller's stream, no event, no record_stream, no stash) or `comm-stream`
    /// (PyTorch <= 2.7 and torch_npu: the communication-stream hop and each mode's
    /// lifetime rules). The negative control (`--mode unsafe`) always takes `comm-stream`.
    #[arg(long, value_name = "PATH", default_value = "current-stream")]
    pub sync_collectives: memreuse_core::SyncCollectives,
    /// Fail (exit 1) when this backend is unavailable or not compiled in, instead of
    /// skipping its runs (repeatable; implies `--backend NAME`). Runs skipped for too few
    /// devices are counted, not failed.
    #[arg(long = "require-backend", value_name = "NAME")]
    pub require_backends: Vec<String>,
    /// Allocator configuration, in `MEMREUSE_ALLOC_CONF` syntax (repeatable: each value is
    /// another set of runs; an empty value is the default configuration). When given,
    /// `MEMREUSE_ALLOC_CONF` is not read; otherwise the runner uses it.
    #[arg(long = "alloc-conf", value_name = "STRING")]
    pub alloc_confs: Vec<String>,
    /// For each run, search the smallest device capacity (2 MiB steps, by bisection of
    /// `--deterministic` probes below the run's own capacity) on which it passes with the
    /// reference digest, race-free and leak-free; probes are not listed, each run carries
    /// `smallest_device_bytes` (null where not searched: a failed or skipped run, a backend
    /// whose capacity cannot be set). With `--device-memory`, that is the run's capacity
    /// and the top of the search. Refused with `--mode unsafe`.
    #[arg(long)]
    pub smallest_device: bool,
}

impl From<RunArgs> for RunOptions {
    /// The runner's options are the flags as given; the runner resolves and checks them.
    fn from(args: RunArgs) -> Self {
        RunOptions {
            backends: args.backends,
            modes: args.modes,
            schedules: args.schedules,
            suite: args.suite,
            seed: args.seed,
            deterministic: args.deterministic,
            device_memory: args.device_memory,
            json: args.json,
            report: args.report,
            snapshot_dir: args.snapshot_dir,
            trace_dir: args.trace_dir,
            quiet: args.quiet,
            race_check: args.race_check,
            sync_collectives: args.sync_collectives,
            require_backends: args.require_backends,
            alloc_confs: args.alloc_confs,
            smallest_device: args.smallest_device,
        }
    }
}

/// Arguments of `generate`.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// Preset name (see `list`).
    pub preset: String,
    /// Layers (pp: micro-batches; ddp: buckets).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Elements of the basic tensor.
    #[arg(long)]
    pub elems: Option<u64>,
    /// Body iterations.
    #[arg(long)]
    pub iterations: Option<u32>,
    /// Number of ranks (default: the preset's).
    #[arg(long)]
    pub world_size: Option<usize>,
    /// Upload seed offset.
    #[arg(long)]
    pub seed: Option<u32>,
    /// The schedule's `device_memory`: bytes, or a number with KiB/MiB/GiB/TiB (`30MiB`;
    /// decimal KB/MB/GB are refused).
    #[arg(long, value_name = "SIZE", value_parser = crate::size::size_arg, allow_hyphen_values = true)]
    pub device_memory: Option<u64>,
    /// Element type of every tensor: f32 (default), f16, bf16, f64, i8, u8, i32, u32, i64,
    /// u64, f8e4m3, f8e5m2.
    #[arg(long, value_name = "TYPE", value_parser = dtype_arg)]
    pub dtype: Option<memreuse_core::DType>,
    /// The schedule's `name` (default: the preset's name).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Output file (parent directories are created).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
}

/// `--dtype`: a name of [`memreuse_core::DType::NAMES`]; the error lists them.
fn dtype_arg(s: &str) -> Result<memreuse_core::DType, String> {
    s.parse()
        .map_err(|e: memreuse_core::comm::UnknownName| e.to_string())
}

/// Exit status for a usage error or an invalid schedule.
const USAGE: u8 = 2;

/// Parses `args` (program name first) and runs the command; returns the exit status.
pub fn main_with(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if let Err(e) = crate::plugins::register(&args) {
        eprintln!("error: {e}");
        return ExitCode::from(USAGE);
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors.
            let code = if e.use_stderr() { USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        None => crate::runner::run(&cli.run.into()),
        Some(Command::Run(args)) => crate::runner::run(&args.into()),
        Some(Command::Validate { files }) => validate_files(&files),
        Some(Command::Generate(args)) => generate_file(&args),
        Some(Command::Whatif(args)) => crate::whatif::run(&args),
        Some(Command::List) => {
            let mut lines = vec!["presets:".to_owned()];
            for p in PRESETS {
                let tag = if p.adversarial { " (adversarial)" } else { "" };
                lines.push(format!("  {:<18} {}{tag}", p.name, p.description));
            }
            lines.push("suites (--suite NAME):".to_owned());
            for (name, description) in crate::suite::SUITES {
                lines.push(format!("  {name:<18} {description}"));
                match crate::suite::suite(name) {
                    Ok(entries) => {
                        // Computed from the schedules the suite runs, so the sizes can
                        // never go stale.
                        let runs = entries.len() * crate::replay::ModeChoice::public_modes().len();
                        lines.push(format!(
                            "  {:<18} {} schedules, {runs} runs per backend in modes 0-3:",
                            "",
                            entries.len()
                        ));
                        for e in &entries {
                            lines.push(format!(
                                "  {:<18}   {}",
                                "",
                                schedule_line(&e.valid.schedule)
                            ));
                        }
                    }
                    Err(e) => lines.push(format!("  {:<18} cannot be built: {e}", "")),
                }
            }
            lines.push("backends:".to_owned());
            lines.extend(backend_lines().into_iter().map(|l| format!("  {l}")));
            let mut out = Stdout::new();
            for line in lines {
                out.line(&line);
            }
            out.status(ExitCode::SUCCESS)
        }
    }
}

/// One schedule of a suite as `list` prints it: its shape and sizes, read from the schedule
/// itself (`moe-mixed-rfc: 16 ranks, 200 iterations, 1234 ops per iteration, tensors up to
/// 64.0 KiB`).
fn schedule_line(s: &crate::schedule::Schedule) -> String {
    use std::fmt::Write as _;
    let largest = [&s.setup, &s.body, &s.teardown]
        .into_iter()
        .flatten()
        .filter_map(|op| match op.kind {
            crate::schedule::OpKind::Alloc { elems, .. } => Some(elems * 4),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut line = format!(
        "{}: {} ranks, {} iterations of {} ops, tensors up to {}",
        s.name,
        s.world_size,
        s.iterations,
        s.body.len(),
        crate::report::human_bytes(largest)
    );
    if let Some(device) = s.device_memory {
        let _ = write!(line, ", device {}", crate::report::human_bytes(device));
    }
    for d in &s.expect_out_of_memory {
        let _ = write!(line, ", out of memory declared under `{}`", d.alloc_conf);
    }
    line
}

fn validate_files(files: &[PathBuf]) -> ExitCode {
    let mut all_valid = true;
    let mut out = Stdout::new();
    for file in files {
        match load(file) {
            Ok(v) => out.line(&format!(
                "{}: valid (digest {}, live_peak_bytes {})",
                file.display(),
                v.reference.digest,
                v.reference.live_peak_bytes
            )),
            Err(LoadError::Parse(e)) => {
                all_valid = false;
                out.line(&e.to_string());
            }
            Err(LoadError::Invalid(errors)) => {
                all_valid = false;
                for e in errors {
                    out.line(&e.to_string());
                }
            }
        }
    }
    out.status(if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(USAGE)
    })
}

fn generate_file(args: &GenerateArgs) -> ExitCode {
    let d = GenOptions::default();
    let opts = GenOptions {
        layers: args.layers.unwrap_or(d.layers),
        elems: args.elems.unwrap_or(d.elems),
        iterations: args.iterations.unwrap_or(d.iterations),
        world_size: args.world_size,
        seed: args.seed.unwrap_or(d.seed),
        device_memory: args.device_memory,
        dtype: args.dtype,
    };
    let schedule = match generate(&args.preset, &opts) {
        Ok(mut s) => {
            if let Some(name) = &args.name {
                if name.trim().is_empty() {
                    eprintln!("generate: --name must not be empty");
                    return ExitCode::from(USAGE);
                }
                s.name.clone_from(name);
            }
            s
        }
        Err(e) => {
            eprintln!("generate: {e}");
            return ExitCode::from(USAGE);
        }
    };
    if let Some(parent) = args.output.parent().filter(|p| !p.as_os_str().is_empty())
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        eprintln!("generate: cannot create {}: {e}", parent.display());
        return ExitCode::FAILURE;
    }
    // Core's one output writer: `-o /dev/stdout` works, a symbolic link is refused.
    let text = schedule.to_json_string() + "\n";
    match memreuse_core::output::write_file(&args.output, text.as_bytes()) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("generate: cannot write {}: {e}", args.output.display());
            ExitCode::FAILURE
        }
    }
}

/// One line per known or linked backend: available (with its device count), unavailable
/// (with the reason the backend gives), or not compiled into this build (with the feature).
pub fn backend_lines() -> Vec<String> {
    let mut names: Vec<&str> = memreuse::KNOWN_BACKENDS.iter().map(|(n, _)| *n).collect();
    for r in memreuse::registered_backends() {
        if !names.contains(&r.name) {
            names.push(r.name);
        }
    }
    names
        .into_iter()
        .map(|name| match crate::availability::registration(name) {
            Ok(r) => match (r.device_count)() {
                Ok(n) => format!("{name:<8} available, {n} device(s): {}", r.summary),
                Err(e) => format!("{name:<8} unavailable: {e}"),
            },
            Err(not_compiled) => format!("{name:<8} {not_compiled}"),
        })
        .collect()
}
