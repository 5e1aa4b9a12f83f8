//! What `run` is asked to do, as the runner takes it. The command line builds it from its
//! flags (`cli::RunArgs`); the runner never sees the parser, so any front end (a test, a
//! script) can drive it.

use std::path::PathBuf;

/// The inputs of one `run`, before [`plan`](super::plan) resolves them (docs/report-format.md,
/// docs/conformance-cli.md): names and values as given, checked by the runner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Backend names, or `all` (empty: every backend linked in).
    pub backends: Vec<String>,
    /// Modes: `0`..`3`, `unsafe` or `all` (empty: 0-3).
    pub modes: Vec<String>,
    /// Schedule files to run (empty: a built-in suite).
    pub schedules: Vec<PathBuf>,
    /// The built-in suite (with no schedule file; `None`: `builtin`).
    pub suite: Option<String>,
    /// Seed of the mock's deterministic scheduler (`None`: 0).
    pub seed: Option<u64>,
    /// Step ranks and streams one at a time in a seeded order where the backend can.
    pub deterministic: bool,
    /// Capacity of each device, overriding the schedule's `device_memory`.
    pub device_memory: Option<u64>,
    /// The JSON report's file.
    pub json: Option<PathBuf>,
    /// The report directory (`report.json`, `report.html`, `summary.md`).
    pub report: Option<PathBuf>,
    /// One memory snapshot per run here.
    pub snapshot_dir: Option<PathBuf>,
    /// One Chrome-trace timeline per run here.
    pub trace_dir: Option<PathBuf>,
    /// No bar, no progress lines, no file list.
    pub quiet: bool,
    /// Who checks races: `auto`, `adaptor` or `off` (empty: `auto`).
    pub race_check: String,
    /// Where synchronous collectives run (`--sync-collectives`).
    pub sync_collectives: memreuse_core::SyncCollectives,
    /// Backends that must run (each is also run as if named by `backends`).
    pub require_backends: Vec<String>,
    /// Allocator configurations, one set of runs each (empty: `MEMREUSE_ALLOC_CONF`).
    pub alloc_confs: Vec<String>,
    /// Search each run's smallest device capacity (`--smallest-device`).
    pub smallest_device: bool,
}
