//! The JSON report, `memreuse.report/1`. Scripts read it: fields may only be added, as
//! optional ones.

use serde::{Deserialize, Serialize};

/// The `format` value of every report.
pub const REPORT_FORMAT: &str = "memreuse.report/1";

/// A whole report: one record per (schedule, backend, mode) run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`REPORT_FORMAT`].
    pub format: String,
    /// Version of the tool that wrote it.
    pub tool_version: String,
    /// The runs, in execution order.
    pub runs: Vec<RunRecord>,
    /// Why each `--require-backend` backend cannot count as tested (optional field added
    /// by memreuse; absent when every required backend ran): any entry makes the verdict
    /// FAIL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_missing: Vec<String>,
    /// The allocator settings the runs used and where they came from, as the pages'
    /// `allocator:` line (optional field added by memreuse), e.g.
    /// `expandable_segments:True from MEMREUSE_ALLOC_CONF`, per backend when they differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<String>,
}

impl Report {
    /// An empty report stamped with this crate's version.
    pub fn new() -> Report {
        Report {
            format: REPORT_FORMAT.to_owned(),
            tool_version: env!("CARGO_PKG_VERSION").to_owned(),
            runs: Vec::new(),
            required_missing: Vec::new(),
            allocator: None,
        }
    }

    /// True when every run passed or was skipped (the runner's exit status 0 before
    /// negative-control verdicts; see [`Report::all_as_expected`]).
    pub fn all_passed_or_skipped(&self) -> bool {
        self.runs
            .iter()
            .all(|r| matches!(r.status, RunStatus::Passed | RunStatus::Skipped))
    }

    /// The runner's exit rule: every run passed or was skipped, except that a
    /// negative-control run with a verdict counts by its verdict (it must match the
    /// schedule's declaration and must not have errored).
    pub fn all_as_expected(&self) -> bool {
        self.runs.iter().all(RunRecord::as_expected)
    }
}

impl Default for Report {
    fn default() -> Self {
        Report::new()
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Every check matched, no race, no leak.
    Passed,
    /// A mismatch, a race or a leak.
    Failed,
    /// The run could not complete (the message is in `error`).
    Error,
    /// Not run: backend unavailable or too few devices (the reason is in `skip_reason`).
    Skipped,
}

impl RunStatus {
    /// The lowercase name used in the JSON and the table.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Passed => "passed",
            RunStatus::Failed => "failed",
            RunStatus::Error => "error",
            RunStatus::Skipped => "skipped",
        }
    }
}

/// Races found by the backend's detector, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaceCounts {
    /// Two allocations sharing memory (an allocator or policy bug).
    pub reuse: u64,
    /// One allocation (a schedule bug).
    pub schedule: u64,
}

/// One (schedule, backend, mode) run. Byte peaks are maxima over ranks; counters,
/// `mismatches` and `leaked_bytes` are sums over ranks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Schedule name.
    pub schedule: String,
    /// Backend name.
    pub backend: String,
    /// `"0"`..`"3"` or `"unsafe"`.
    pub mode: String,
    /// Ranks.
    pub world_size: usize,
    /// Body iterations.
    pub iterations: u64,
    /// Outcome.
    pub status: RunStatus,
    /// Why the run was skipped.
    pub skip_reason: Option<String>,
    /// Why the run could not complete.
    pub error: Option<String>,
    /// Checks whose contents differed from the reference.
    pub mismatches: u64,
    /// Races by kind; `null` on backends without a race detector.
    pub races: Option<RaceCounts>,
    /// Bytes still allocated after teardown and process-group shutdown.
    pub leaked_bytes: u64,
    /// The observed digest of every check (16 lowercase hex digits).
    pub digest: Option<String>,
    /// Peak allocated bytes (max over ranks).
    pub peak_allocated_bytes: u64,
    /// Peak reserved bytes (max over ranks).
    pub peak_reserved_bytes: u64,
    /// The schedule's own lower bound.
    pub live_peak_bytes: u64,
    /// Events the allocator recorded for pending frees.
    pub reuse_events_created: u64,
    /// `record_stream` calls (user and process group).
    pub record_stream_calls: u64,
    /// `erase_stream` calls.
    pub erase_stream_calls: u64,
    /// Tensors stashed on shelves.
    pub shelf_stashes: u64,
    /// Shelves handed over by the watchdog.
    pub shelf_unstashed_by_watchdog: u64,
    /// Allocation retries after freeing cache.
    pub alloc_retries: u64,
    /// Out-of-memory errors.
    pub ooms: u64,
    /// Wall time of the whole run.
    pub wall_ms: f64,
    /// Median wall time of the body iterations after the first; `null` with fewer than two.
    pub step_ms_median: Option<f64>,
    /// The reference digest computed from the schedule alone (optional field added by
    /// memreuse; equal to `digest` for a passing run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_digest: Option<String>,
    /// The first race reports, in words (optional field added by memreuse).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub race_examples: Vec<String>,
    /// Negative-control runs of a built-in suite: whether the suite declares that the race
    /// detector must find a reuse race here (optional field added by memreuse; CI checks
    /// `races.reuse > 0` exactly when it is true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub negative_control_expects_reuse_race: Option<bool>,
    /// Who judged races (optional field added by memreuse): `native` (the backend's own
    /// detector), `adaptor` (`memreuse_core::race::RaceChecker`) or `none`
    /// (`--race-check off`; `races` is then `null`). Absent on skipped runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub race_checker: Option<String>,
    /// Negative-control runs of a schedule that declares its expectation (optional field
    /// added by memreuse): `caught` (a reuse race expected and found), `missed` (expected,
    /// not found), `unexpected` (a race found where none is declared), `clean` (none
    /// declared, none found), `error` (the run could not complete, whatever it found).
    /// `caught` and `clean` match the declaration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub negative_control_verdict: Option<Verdict>,
    /// Command-line options the backend cannot honour and ignored for this run, by flag
    /// (`--deterministic`, `--device-memory`; optional field added by memreuse).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored_options: Vec<String>,
    /// The allocator configuration the run used, as given to `--alloc-conf` or in
    /// `MEMREUSE_ALLOC_CONF` (optional field added by memreuse; absent for the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_conf: Option<String>,
    /// Device allocation calls the allocators made, summed over ranks (optional field added
    /// by memreuse; absent on runs that did not start): what a configuration costs in
    /// device calls beside what it saves in reserved bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_alloc_calls: Option<u64>,
    /// Device free calls the allocators made, summed over ranks (optional field added by
    /// memreuse; absent on runs that did not start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_free_calls: Option<u64>,
    /// Page map and unmap calls of expandable segments, summed over ranks (optional field
    /// added by memreuse; absent when no page was mapped, e.g. without
    /// `expandable_segments:True`): mapping is not free on real devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_map_calls: Option<u64>,
    /// Page unmap calls of expandable segments, summed over ranks (see `device_map_calls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_unmap_calls: Option<u64>,
    /// `out_of_memory` when the run ran out of memory under settings its schedule declares
    /// (`expect_out_of_memory`, docs/schedule-format.md; optional field added by memreuse):
    /// the run's `status` stays `error` and its `error` the allocator's message, but it is
    /// as expected and counts as declared in the verdict, the table and the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_outcome: Option<String>,
    /// The schedule's reason for the declared outcome (optional field added by memreuse;
    /// present with `declared_outcome`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_because: Option<String>,
    /// With `run --smallest-device` (optional field added by memreuse; absent without it):
    /// the smallest device capacity, in 2 MiB steps, on which this run passes with the
    /// reference digest, race-free and leak-free (2 MiB less fails); `null` where it was
    /// not searched (`smallest_device_note` says why).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub smallest_device_bytes: Option<Option<u64>>,
    /// With `run --smallest-device`: how the capacity was found, or why it was not searched
    /// (optional field added by memreuse).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smallest_device_note: Option<String>,
}

/// Reads a field that is present (a value or `null`) as `Some`; an absent one takes the
/// `default` (`None`), so `null` and absence stay apart.
#[expect(
    clippy::option_option,
    reason = "absent (no --smallest-device), null (not searched) and a number are three answers"
)]
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

/// The `declared_outcome` of a run that ran out of memory as its schedule declares.
pub const DECLARED_OOM: &str = "out_of_memory";

/// The runner's judgement of one negative-control run against its schedule's declaration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// A reuse race was declared and found.
    Caught,
    /// A reuse race was declared and not found.
    Missed,
    /// A race was found where none is declared.
    Unexpected,
    /// None declared, none found.
    Clean,
    /// The run could not complete (its `status` is `error`), so whatever it found before
    /// stopping says nothing about the declaration: never a match.
    Error,
}

impl Verdict {
    /// Judges a run that declares `expects_reuse_race` and found `races` (`None`: no
    /// checker ran, so nothing can be judged).
    pub fn judge(expects_reuse_race: bool, races: Option<RaceCounts>) -> Option<Verdict> {
        let r = races?;
        Some(match (expects_reuse_race, r.reuse > 0, r.schedule > 0) {
            (_, _, true) | (false, true, _) => Verdict::Unexpected,
            (true, true, false) => Verdict::Caught,
            (true, false, false) => Verdict::Missed,
            (false, false, false) => Verdict::Clean,
        })
    }

    /// Judges a negative-control run that ended with `status`: [`Verdict::Error`] for a
    /// run that errored (its partial race counts are not a verdict), else
    /// [`Verdict::judge`].
    pub fn of_run(
        expects_reuse_race: bool,
        status: RunStatus,
        races: Option<RaceCounts>,
    ) -> Option<Verdict> {
        if status == RunStatus::Error {
            return Some(Verdict::Error);
        }
        Verdict::judge(expects_reuse_race, races)
    }

    /// True when the run is what the schedule declares.
    pub fn matches(self) -> bool {
        matches!(self, Verdict::Caught | Verdict::Clean)
    }

    /// The lowercase name used in the JSON and the summary.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Caught => "caught",
            Verdict::Missed => "missed",
            Verdict::Unexpected => "unexpected",
            Verdict::Clean => "clean",
            Verdict::Error => "error",
        }
    }
}

impl RunRecord {
    /// Whether this run is what it should be (see [`Report::all_as_expected`]).
    pub fn as_expected(&self) -> bool {
        if self.is_declared() {
            return true;
        }
        match self.status {
            RunStatus::Error => return false,
            RunStatus::Skipped => return true,
            RunStatus::Passed | RunStatus::Failed => {}
        }
        if self.negative_control_expects_reuse_race.is_some() {
            return self.negative_control_verdict.is_some_and(Verdict::matches);
        }
        matches!(self.status, RunStatus::Passed | RunStatus::Skipped)
    }

    /// Whether the run ended as its schedule declares (an out-of-memory error under the
    /// declared settings): as expected, whatever else is judged.
    pub fn is_declared(&self) -> bool {
        self.status == RunStatus::Error && self.declared_outcome.is_some()
    }

    /// A record with every figure zero, for `schedule` on `backend` in `mode`.
    pub fn empty(
        schedule: &str,
        backend: &str,
        mode: &str,
        world_size: usize,
        iterations: u64,
    ) -> RunRecord {
        RunRecord {
            schedule: schedule.to_owned(),
            backend: backend.to_owned(),
            mode: mode.to_owned(),
            world_size,
            iterations,
            status: RunStatus::Error,
            skip_reason: None,
            error: None,
            mismatches: 0,
            races: None,
            leaked_bytes: 0,
            digest: None,
            peak_allocated_bytes: 0,
            peak_reserved_bytes: 0,
            live_peak_bytes: 0,
            reuse_events_created: 0,
            record_stream_calls: 0,
            erase_stream_calls: 0,
            shelf_stashes: 0,
            shelf_unstashed_by_watchdog: 0,
            alloc_retries: 0,
            ooms: 0,
            wall_ms: 0.0,
            step_ms_median: None,
            reference_digest: None,
            race_examples: Vec::new(),
            negative_control_expects_reuse_race: None,
            race_checker: None,
            negative_control_verdict: None,
            ignored_options: Vec::new(),
            alloc_conf: None,
            device_alloc_calls: None,
            device_free_calls: None,
            device_map_calls: None,
            device_unmap_calls: None,
            declared_outcome: None,
            declared_because: None,
            smallest_device_bytes: None,
            smallest_device_note: None,
        }
    }

    /// A skipped run.
    pub fn skipped(
        schedule: &str,
        backend: &str,
        mode: &str,
        world_size: usize,
        iterations: u64,
        reason: String,
    ) -> RunRecord {
        RunRecord {
            status: RunStatus::Skipped,
            skip_reason: Some(reason),
            ..RunRecord::empty(schedule, backend, mode, world_size, iterations)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_every_field_of_the_v1_example_with_lowercase_status() {
        let mut r = RunRecord::empty("fsdp-tiny", "mock", "2", 4, 3);
        r.status = RunStatus::Passed;
        r.races = Some(RaceCounts::default());
        r.digest = Some("9f2c5e01a4b7d3c8".into());
        let v = serde_json::to_value(&r).unwrap();
        for key in [
            "schedule",
            "backend",
            "mode",
            "world_size",
            "iterations",
            "status",
            "skip_reason",
            "error",
            "mismatches",
            "races",
            "leaked_bytes",
            "digest",
            "peak_allocated_bytes",
            "peak_reserved_bytes",
            "live_peak_bytes",
            "reuse_events_created",
            "record_stream_calls",
            "erase_stream_calls",
            "shelf_stashes",
            "shelf_unstashed_by_watchdog",
            "alloc_retries",
            "ooms",
            "wall_ms",
            "step_ms_median",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["status"], "passed");
        assert_eq!(v["races"]["reuse"], 0);
        assert!(v["step_ms_median"].is_null());
        assert!(
            v.get("race_examples").is_none(),
            "empty optional extras are omitted"
        );
    }

    #[test]
    fn verdicts_judge_the_declaration_and_decide_the_exit_rule() {
        let counts = |reuse, schedule| Some(RaceCounts { reuse, schedule });
        assert_eq!(Verdict::judge(true, counts(3, 0)), Some(Verdict::Caught));
        assert_eq!(Verdict::judge(true, counts(0, 0)), Some(Verdict::Missed));
        assert_eq!(
            Verdict::judge(false, counts(1, 0)),
            Some(Verdict::Unexpected)
        );
        assert_eq!(
            Verdict::judge(true, counts(1, 1)),
            Some(Verdict::Unexpected)
        );
        assert_eq!(Verdict::judge(false, counts(0, 0)), Some(Verdict::Clean));
        assert_eq!(Verdict::judge(true, None), None);
        let mut r = RunRecord::empty("a", "mock", "unsafe", 2, 1);
        r.status = RunStatus::Failed;
        r.negative_control_expects_reuse_race = Some(true);
        r.negative_control_verdict = Some(Verdict::Caught);
        assert!(
            r.as_expected(),
            "a caught negative control is what CI wants"
        );
        r.negative_control_verdict = Some(Verdict::Missed);
        assert!(!r.as_expected());
        r.negative_control_verdict = None;
        assert!(!r.as_expected(), "an unjudged declaration is not a pass");
        r.status = RunStatus::Error;
        r.negative_control_verdict = Some(Verdict::Caught);
        assert!(!r.as_expected(), "an errored run never matches");
        let v = serde_json::to_value(Verdict::Unexpected).unwrap();
        assert_eq!(v, "unexpected");
    }

    #[test]
    fn exit_status_rule_counts_failed_and_error_runs() {
        let mut report = Report::new();
        report.runs.push(RunRecord::skipped(
            "a",
            "cuda",
            "0",
            2,
            1,
            "no driver".into(),
        ));
        assert!(report.all_passed_or_skipped());
        report.runs.push(RunRecord::empty("a", "mock", "0", 2, 1));
        assert!(!report.all_passed_or_skipped());
    }

    #[test]
    fn smallest_device_is_absent_without_the_flag_and_null_where_not_searched() {
        let mut r = RunRecord::empty("a", "mock", "0", 2, 1);
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("smallest_device_bytes").is_none(), "{v}");
        for (bytes, json) in [
            (None, serde_json::Value::Null),
            (Some(4 << 20), (4 << 20).into()),
        ] {
            r.smallest_device_bytes = Some(bytes);
            let v = serde_json::to_value(&r).unwrap();
            assert_eq!(v["smallest_device_bytes"], json);
            let back: RunRecord = serde_json::from_value(v).unwrap();
            assert_eq!(
                back.smallest_device_bytes,
                Some(bytes),
                "null stays apart from absent"
            );
        }
        let absent: RunRecord = serde_json::from_value(
            serde_json::to_value(RunRecord::empty("a", "mock", "0", 2, 1)).unwrap(),
        )
        .unwrap();
        assert_eq!(absent.smallest_device_bytes, None);
    }
}
