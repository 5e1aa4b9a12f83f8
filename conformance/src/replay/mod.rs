//! The replay engine: runs a validated schedule on a backend, one thread per rank, through
//! the real `ProcessGroup` and caching allocator in one reuse mode, and compares every
//! `check` bit for bit with the reference interpreter.

mod capture;
mod rank;
mod rank_outcome;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use memreuse_core::{BackendOptions, RaceKind, RaceReport, WorldOptions, find_world};

use crate::reference::Reference;
use crate::report::{MemorySeries, RaceCounts, RunRecord, RunStatus};
use crate::schedule::Schedule;
use crate::skip::SkipReason;

pub use capture::{
    Artifact, ArtifactLink, CAPTURE_TRACE_CAPACITY, RunArtifacts, artifact_stem, relative_href,
};
pub use rank_outcome::RankOutcome;

/// Which policy a run uses: a public mode or the negative control.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModeChoice {
    /// `MULTI_STREAM_MEMORY_REUSE` mode 0..3.
    Mode(memreuse_core::process_group::ReuseMode),
    /// No protection at all: the race detector must catch it.
    Unsafe,
}

impl ModeChoice {
    /// The four public modes, in order.
    pub fn public_modes() -> Vec<ModeChoice> {
        memreuse_core::process_group::ReuseMode::ALL
            .iter()
            .map(|&m| ModeChoice::Mode(m))
            .collect()
    }

    /// `"0"`..`"3"` or `"unsafe"`, as in reports.
    pub fn name(self) -> String {
        match self {
            ModeChoice::Mode(m) => m.as_number().to_string(),
            ModeChoice::Unsafe => "unsafe".to_owned(),
        }
    }

    /// Parses a `--mode` value (one mode; `all` is expanded by the command line).
    pub fn parse(text: &str) -> Option<ModeChoice> {
        match text {
            "unsafe" => Some(ModeChoice::Unsafe),
            other => memreuse_core::process_group::parse_reuse_mode(other)
                .ok()
                .filter(|_| other.trim() == other)
                .map(ModeChoice::Mode),
        }
    }
}

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Backend name.
    pub backend: String,
    /// Policy.
    pub mode: ModeChoice,
    /// Device capacity (overrides the schedule's `device_memory`).
    pub device_memory: Option<u64>,
    /// Seed for the mock's deterministic mode.
    pub seed: Option<u64>,
    /// Run the mock deterministically.
    pub deterministic: bool,
    /// How long a communication op waits for a missing peer.
    pub timeout: Duration,
    /// Write one memory snapshot (PyTorch viewer pickle) per rank here.
    pub snapshot_dir: Option<PathBuf>,
    /// Write one Chrome-trace timeline and one metrics exposition per rank here.
    pub trace_dir: Option<PathBuf>,
    /// Who checks races (`--race-check`).
    pub race_check: crate::race_check::RaceCheck,
    /// Where synchronous collectives run (`--sync-collectives`; the negative control
    /// always takes the communication stream).
    pub sync_collectives: memreuse_core::SyncCollectives,
    /// The allocator configuration (`--alloc-conf` / `MEMREUSE_ALLOC_CONF`); `None`: the
    /// default.
    pub alloc_conf: Option<crate::alloc_conf::AllocConf>,
}

impl ReplayOptions {
    /// Defaults for `backend` in `mode`.
    pub fn new(backend: &str, mode: ModeChoice) -> ReplayOptions {
        ReplayOptions {
            backend: backend.to_owned(),
            mode,
            device_memory: None,
            seed: None,
            deterministic: false,
            timeout: Duration::from_secs(60),
            snapshot_dir: None,
            trace_dir: None,
            race_check: crate::race_check::RaceCheck::Auto,
            sync_collectives: memreuse_core::SyncCollectives::default(),
            alloc_conf: None,
        }
    }
}

/// Stack of a rank thread: a rank runs its ops one at a time without recursion, and a
/// replay at world size 1024 runs 1024 of them (the default 2 MiB each reserved 2 GiB of
/// address space and aborted under `ulimit -v`).
pub const RANK_STACK_BYTES: usize = 512 << 10;

/// Default device capacity when neither the schedule nor the options give one (mock).
pub const DEFAULT_DEVICE_MEMORY: u64 = 1 << 30;

/// What a replay produced: the report record and the memory series for plots.
#[derive(Debug)]
pub struct ReplayOutcome {
    /// The run's record (report v1).
    pub record: RunRecord,
    /// Allocated/reserved after every op, per rank.
    pub series: MemorySeries,
    /// Every race report, in words.
    pub races: Vec<String>,
    /// Files written for `--snapshot-dir` / `--trace-dir`, by rank.
    pub artifacts: Vec<Artifact>,
    /// Files that could not be written.
    pub artifact_errors: Vec<String>,
    /// Why the run was skipped (the record's `skip_reason` is its text); `None` when it
    /// ran.
    pub skip: Option<SkipReason>,
}

/// Replays `schedule` (already validated; `reference` is its reference result).
pub fn replay(
    schedule: &Schedule,
    reference: &Reference,
    options: &ReplayOptions,
) -> ReplayOutcome {
    let mode_name = options.mode.name();
    let iterations = u64::from(schedule.iterations);
    let conf_text = options.alloc_conf.as_ref().map(|c| c.text.clone());
    let mut series = MemorySeries {
        schedule: schedule.name.clone(),
        backend: options.backend.clone(),
        mode: mode_name.clone(),
        alloc_conf: conf_text.clone(),
        per_rank: Vec::new(),
    };
    let empty_record = || {
        let mut r = RunRecord::empty(
            &schedule.name,
            &options.backend,
            &mode_name,
            schedule.world_size,
            iterations,
        );
        r.alloc_conf.clone_from(&conf_text);
        r
    };
    let skipped = |reason: SkipReason| ReplayOutcome {
        record: RunRecord {
            status: RunStatus::Skipped,
            skip_reason: Some(reason.to_string()),
            ..empty_record()
        },
        series: series.clone(),
        races: Vec::new(),
        artifacts: Vec::new(),
        artifact_errors: Vec::new(),
        skip: Some(reason),
    };
    let registration = match crate::availability::registration(&options.backend) {
        Ok(r) => r,
        Err(missing) => return skipped(SkipReason::NotCompiled(missing)),
    };
    match (registration.device_count)() {
        Err(e) => {
            return skipped(SkipReason::Unavailable {
                reason: e.to_string(),
            });
        }
        Ok(n) if n < schedule.world_size => {
            return skipped(SkipReason::TooFewDevices {
                backend: options.backend.clone(),
                needs: schedule.world_size,
                has: n,
            });
        }
        Ok(_) => {}
    }
    let Some(world) = find_world(&options.backend) else {
        return skipped(SkipReason::NoMultiRankWorld {
            backend: options.backend.clone(),
        });
    };
    let world_options = WorldOptions {
        world_size: schedule.world_size,
        backend: BackendOptions {
            device: 0,
            memory_capacity: Some(
                options
                    .device_memory
                    .or(schedule.device_memory)
                    .unwrap_or(DEFAULT_DEVICE_MEMORY),
            ),
            deterministic_seed: options.deterministic.then(|| options.seed.unwrap_or(0)),
            disable_native_race_detection: options.race_check.disables_native(),
        },
        timeout: options.timeout,
    };
    let started = Instant::now();
    let endpoints = match (world.open_world)(&world_options) {
        Ok(e) => e,
        Err(memreuse_core::BackendError::Unavailable { reason, .. }) => {
            return skipped(SkipReason::Unavailable { reason });
        }
        Err(e) => {
            let mut record = empty_record();
            record.error = Some(format!("could not open the world: {e}"));
            return ReplayOutcome {
                record,
                series,
                races: Vec::new(),
                artifacts: Vec::new(),
                artifact_errors: Vec::new(),
                skip: None,
            };
        }
    };
    let (endpoints, armed) = match crate::race_check::prepare(
        endpoints,
        options.race_check,
        options.deterministic,
        options.device_memory,
        schedule.device_memory,
    ) {
        Ok(a) => a,
        Err(reason) => return skipped(reason),
    };
    let backends: Vec<_> = endpoints.iter().map(|e| e.backend.clone()).collect();
    // Every rank's allocator is opened before any rank starts, so a configuration the
    // backend cannot provide skips the run instead of leaving peers waiting for a rank
    // that never came up.
    let allocators = match crate::alloc_conf::open_allocators(
        &backends,
        options.alloc_conf.as_ref(),
        &capture::allocator_config(options),
    ) {
        Ok(a) => a,
        Err(crate::alloc_conf::OpenRefusal::Skip(reason)) => return skipped(reason),
        Err(crate::alloc_conf::OpenRefusal::Error(e)) => {
            let mut record = empty_record();
            record.error = Some(e);
            return ReplayOutcome {
                record,
                series,
                races: Vec::new(),
                artifacts: Vec::new(),
                artifact_errors: Vec::new(),
                skip: None,
            };
        }
    };
    let outcomes: Vec<RankOutcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = endpoints
            .into_iter()
            .zip(allocators)
            .map(|(endpoint, allocator)| {
                let rank = endpoint.rank;
                let expected = reference.checks.get(rank).cloned().unwrap_or_default();
                std::thread::Builder::new()
                    .name(format!("rank-{rank}"))
                    .stack_size(RANK_STACK_BYTES)
                    .spawn_scoped(scope, move || {
                        rank::run_rank(schedule, endpoint, &allocator, &expected, options)
                    })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| match h {
                Ok(handle) => handle.join().unwrap_or_else(|_| {
                    RankOutcome::failed(rank, "rank thread panicked".to_owned())
                }),
                Err(e) => {
                    RankOutcome::failed(rank, format!("could not spawn the rank thread: {e}"))
                }
            })
            .collect()
    });
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;

    let mut record = empty_record();
    record.wall_ms = wall_ms;
    record.live_peak_bytes = reference.live_peak_bytes;
    record.reference_digest = Some(reference.digest.clone());
    record.race_checker = Some(armed.checker.as_str().to_owned());
    record.ignored_options = armed.ignored;
    let mut all_races: Vec<RaceReport> = Vec::new();
    let mut has_detector = false;
    for b in &backends {
        if armed.checker != crate::race_check::Checker::None
            && let Some(r) = memreuse_core::Backend::race_reports(b)
        {
            has_detector = true;
            all_races.extend(r);
        }
    }
    if has_detector {
        record.races = Some(RaceCounts {
            reuse: all_races
                .iter()
                .filter(|r| r.kind == RaceKind::Reuse)
                .count() as u64,
            schedule: all_races
                .iter()
                .filter(|r| r.kind == RaceKind::Schedule)
                .count() as u64,
        });
    }
    let races: Vec<String> = all_races.iter().map(ToString::to_string).collect();
    record.race_examples = races.iter().take(5).cloned().collect();

    let mut errors = Vec::new();
    let mut checks: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut artifacts = Vec::new();
    let mut artifact_errors = Vec::new();
    for o in &outcomes {
        artifacts.extend(o.artifacts.iter().cloned());
        artifact_errors.extend(
            o.artifact_errors
                .iter()
                .map(|e| format!("rank {}: {e}", o.rank)),
        );
        record.mismatches += o.mismatches;
        record.leaked_bytes += o.leaked_bytes;
        record.peak_allocated_bytes = record.peak_allocated_bytes.max(o.peak_allocated_bytes);
        record.peak_reserved_bytes = record.peak_reserved_bytes.max(o.peak_reserved_bytes);
        record.reuse_events_created += o.reuse_events_created;
        record.record_stream_calls += o.record_stream_calls;
        record.erase_stream_calls += o.erase_stream_calls;
        record.shelf_stashes += o.shelf_stashes;
        record.shelf_unstashed_by_watchdog += o.shelf_unstashed_by_watchdog;
        record.alloc_retries += o.alloc_retries;
        record.ooms += o.ooms;
        *record.device_alloc_calls.get_or_insert(0) += o.device_alloc_calls;
        *record.device_free_calls.get_or_insert(0) += o.device_free_calls;
        if o.device_map_calls + o.device_unmap_calls > 0 {
            *record.device_map_calls.get_or_insert(0) += o.device_map_calls;
            *record.device_unmap_calls.get_or_insert(0) += o.device_unmap_calls;
        }
        if let Some(e) = &o.error {
            errors.push(format!("rank {}: {e}", o.rank));
        }
        checks.push(o.checks.clone());
        series.per_rank.push(o.series.clone());
    }
    record.step_ms_median = step_median(&outcomes);
    if errors.is_empty() {
        record.digest = Some(crate::reference::digest_bytes(
            checks.iter().flatten().map(Vec::as_slice),
        ));
    }
    // A file asked for and not written fails the run: the user would otherwise find a
    // stale or missing snapshot behind a "passed".
    errors.extend(
        artifact_errors
            .iter()
            .map(|e| format!("could not write an artifact: {e}")),
    );
    record.status = if !errors.is_empty() {
        // Show the root cause first: ranks that only timed out waiting for a failed peer
        // come after it, and so do ranks whose communicators a failed peer aborted.
        errors.sort_by_key(|e| e.contains("timed out") || e.contains("aborted"));
        record.error = Some(errors.join("; "));
        RunStatus::Error
    } else if record.mismatches > 0
        || record.leaked_bytes > 0
        || record.races.is_some_and(|r| r.reuse + r.schedule > 0)
    {
        RunStatus::Failed
    } else {
        RunStatus::Passed
    };
    ReplayOutcome {
        record,
        series,
        races,
        artifacts,
        artifact_errors,
        skip: None,
    }
}

/// Median over body iterations after the first of the slowest rank's iteration time.
fn step_median(outcomes: &[RankOutcome]) -> Option<f64> {
    let n = outcomes
        .iter()
        .map(|o| o.iteration_ms.len())
        .max()
        .unwrap_or(0);
    if n < 2 {
        return None;
    }
    let mut steps: Vec<f64> = (1..n)
        .map(|i| {
            outcomes
                .iter()
                .filter_map(|o| o.iteration_ms.get(i))
                .copied()
                .fold(0.0, f64::max)
        })
        .collect();
    steps.sort_by(f64::total_cmp);
    let mid = steps.len() / 2;
    Some(if steps.len() % 2 == 0 {
        f64::midpoint(steps[mid - 1], steps[mid])
    } else {
        steps[mid]
    })
}
