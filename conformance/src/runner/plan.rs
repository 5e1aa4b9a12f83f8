//! `run`'s first step: the options resolved into what to run (schedules, backends, modes,
//! the race checker, allocator configurations), or a usage error before anything runs.

use std::collections::HashMap;
use std::path::Path;

use super::confs::{ConfSet, allocator_line, conf_sets};
use super::options::RunOptions;
use crate::race_check::RaceCheck;
use crate::replay::ModeChoice;
use crate::suite::{SuiteEntry, suite};
use crate::validate::load;

/// A usage error: printed, exit status 2, nothing ran.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// What to run, resolved from the options.
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
    /// Allocator configurations, one set of runs each (`--alloc-conf`, else per backend
    /// the first set variable of its precedence: `MEMREUSE_ALLOC_CONF`, `PYTORCH_ALLOC_CONF`,
    /// then `PYTORCH_CUDA_ALLOC_CONF` / `PYTORCH_NPU_ALLOC_CONF`).
    pub alloc_confs: Vec<ConfSet>,
    /// The report's `allocator:` line: the settings the runs use and where they came from.
    pub allocator: String,
    /// Warnings to print before running: a configuration variable that overrides another
    /// set to a different value.
    pub warnings: Vec<String>,
}

impl Plan {
    /// How many runs the plan makes: configurations x schedules x backends x modes.
    pub fn total_runs(&self) -> u64 {
        (self.alloc_confs.len() * self.entries.len() * self.backends.len() * self.modes.len())
            as u64
    }
}

/// Resolves `--backend`, `--mode`, `--schedule`, `--suite` and `--alloc-conf` (or each
/// backend's configuration variables when no `--alloc-conf` is given).
pub fn plan(options: &RunOptions) -> Result<Plan, UsageError> {
    let backends = backends(options)?;
    let race_check = match options.race_check.as_str() {
        "" => RaceCheck::Auto,
        other => RaceCheck::parse(other).ok_or_else(|| {
            UsageError(format!(
                "invalid --race-check `{other}`; valid: auto, adaptor, off"
            ))
        })?,
    };
    let modes = modes(&options.modes)?;
    if options.smallest_device && modes.contains(&ModeChoice::Unsafe) {
        return Err(UsageError(
            "--smallest-device cannot search --mode unsafe: the negative control is meant to \
             race, so no capacity passes it race-free; valid with it: --mode 0, 1, 2, 3 or all"
                .to_owned(),
        ));
    }
    let (entries, builtin) = entries(options)?;
    for (flag, dir) in [
        ("--snapshot-dir", &options.snapshot_dir),
        ("--trace-dir", &options.trace_dir),
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
    let (alloc_confs, warnings) = conf_sets(&options.alloc_confs, &backends, |name| {
        std::env::var_os(name)
    })
    .map_err(|e| UsageError(e.to_string()))?;
    Ok(Plan {
        entries,
        builtin,
        backends,
        modes,
        race_check,
        required: options.require_backends.clone(),
        allocator: allocator_line(&alloc_confs),
        alloc_confs,
        warnings,
    })
}

/// `--backend` and `--require-backend` names, `all` expanded, in order, each once; every
/// linked backend when none is named. A name memreuse does not know is a usage error.
fn backends(options: &RunOptions) -> Result<Vec<String>, UsageError> {
    let known: Vec<String> = memreuse::KNOWN_BACKENDS
        .iter()
        .map(|(n, _)| (*n).to_owned())
        .collect();
    let linked: Vec<String> = memreuse::registered_backends()
        .iter()
        .map(|r| r.name.to_owned())
        .collect();
    let mut backends = Vec::new();
    for b in options.backends.iter().chain(&options.require_backends) {
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
    Ok(unique)
}

/// `--mode` values, `all` expanded, in order, each once; the four public modes when none
/// is given.
fn modes(given: &[String]) -> Result<Vec<ModeChoice>, UsageError> {
    let mut modes = Vec::new();
    for m in given {
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
    Ok(modes)
}

/// The schedules: the files given (loaded and validated, names distinct), else the
/// built-in suite; and whether they are built in.
fn entries(options: &RunOptions) -> Result<(Vec<SuiteEntry>, bool), UsageError> {
    if options.schedules.is_empty() {
        let name = options.suite.as_deref().unwrap_or("builtin");
        return Ok((suite(name).map_err(|e| UsageError(e.to_string()))?, true));
    }
    if options.suite.is_some() {
        return Err(UsageError(
            "--suite and --schedule exclude each other".to_owned(),
        ));
    }
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    // Report blocks and artifact files are keyed by the schedule's name: two files with
    // one name would merge and overwrite each other.
    let mut sources: HashMap<String, &Path> = HashMap::new();
    for path in &options.schedules {
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
    Ok((entries, false))
}
