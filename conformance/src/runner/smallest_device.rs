//! `run --smallest-device`: the smallest device capacity one (schedule, backend, mode,
//! allocator setting) passes on, found by bisection over full replays.
//!
//! Reserved memory is made of segments whose sizes are multiples of 2 MiB, so capacities
//! are searched in 2 MiB steps between the live peak (no allocator fits below it) and the
//! run's own capacity rounded up to a step (the listed run passed there). Every probe runs
//! `--deterministic` (with the run's seed) so its peaks do not vary between probes. A probe
//! fits when it passes with the reference digest, no race and no leak. Fitting is not
//! strictly monotonic in the capacity (on a smaller device the out-of-memory retry frees
//! cached blocks and the layout changes), so the answer is a capacity that fits while the
//! one 2 MiB below it does not (that one is always probed): the smallest such capacity the
//! bisection meets, not necessarily the smallest of all. Each probe is a whole replay of
//! every rank, so the search bisects rather than walking every step up from the live peak.
//! `whatif --smallest-device` answers the same question for a recorded history; its search
//! replays a history, not a schedule, so it is not shared.

use crate::replay::{DEFAULT_DEVICE_MEMORY, ReplayOptions, replay};
use crate::report::{RunRecord, RunStatus, human_bytes};
use crate::suite::SuiteEntry;

/// The granularity of the search: segment sizes are multiples of it.
pub(super) const STEP: u64 = 2 << 20;

/// What the search found for one run: the capacity (`None`: not searched) and, in words,
/// how it was found or why it was not searched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Found {
    /// The smallest capacity found, a multiple of [`STEP`]; `None` when not searched.
    pub(super) bytes: Option<u64>,
    /// How it was found, or why the run was not searched.
    pub(super) note: String,
}

impl Found {
    fn not_searched(why: impl Into<String>) -> Found {
        Found {
            bytes: None,
            note: format!("not searched: {}", why.into()),
        }
    }
}

/// How often the search goes on below a capacity whose probes disagreed before it stops.
const MAX_DISAGREEMENTS: usize = 3;

/// One probe's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probe {
    Fits,
    Fails,
    /// The backend cannot run at a chosen capacity (the reason, in words).
    Fixed(String),
}

/// Whether `record` is a pass the search accepts: passed, with the reference digest, no
/// leak and no race (race-freedom is unchecked only under `--race-check off`).
fn passes(record: &RunRecord) -> bool {
    record.status == RunStatus::Passed
        && record.digest.is_some()
        && record.digest == record.reference_digest
        && record.leaked_bytes == 0
        && record.races.is_none_or(|r| r.reuse + r.schedule == 0)
}

/// The probe's answer from its record: a backend that ignored the capacity (a real device)
/// or skipped the run for it cannot be searched.
fn judge_probe(record: &RunRecord) -> Probe {
    if record
        .ignored_options
        .iter()
        .any(|o| o == "--device-memory")
    {
        return Probe::Fixed(format!(
            "backend {} cannot set its device capacity (it ignores --device-memory: its \
             devices have the memory they have)",
            record.backend
        ));
    }
    if record.status == RunStatus::Skipped {
        return Probe::Fixed(format!(
            "the probe was skipped: {}",
            record.skip_reason.as_deref().unwrap_or("no reason given")
        ));
    }
    if passes(record) {
        Probe::Fits
    } else {
        Probe::Fails
    }
}

/// Why `listed` (the run at the schedule's own capacity) cannot be searched, if it cannot.
fn refusal(listed: &RunRecord) -> Option<String> {
    match listed.status {
        RunStatus::Skipped => Some("the run was skipped".to_owned()),
        _ if passes(listed) => None,
        RunStatus::Error => Some(format!(
            "the run does not pass at its own capacity ({})",
            listed.error.as_deref().unwrap_or("error")
        )),
        _ => Some("the run does not pass at its own capacity (mismatch, race or leak)".to_owned()),
    }
}

/// Searches the smallest device `entry` passes on with `listed_options` (the listed run's
/// options; `listed` is its record). `probe` replays at a capacity; [`search`] passes the
/// real replay, tests a fake.
fn search_with(listed: &RunRecord, capacity: u64, mut probe: impl FnMut(u64) -> Probe) -> Found {
    if let Some(why) = refusal(listed) {
        return Found::not_searched(why);
    }
    if listed
        .ignored_options
        .iter()
        .any(|o| o == "--device-memory")
    {
        return Found::not_searched(format!(
            "backend {} cannot set its device capacity (it ignores --device-memory)",
            listed.backend
        ));
    }
    let mut probes = 0_u32;
    let mut run = |steps: u64| {
        probes += 1;
        probe(steps * STEP)
    };
    // In steps: `hi` fits; `lo` does not (probed, or below the live peak).
    let top = capacity.div_ceil(STEP);
    let mut lo = listed.live_peak_bytes.div_ceil(STEP).saturating_sub(1);
    let mut lo_probed = false;
    // The listed run never reserved more than its peak, so it most likely fits there too:
    // probing that first saves the probes between it and a large device.
    let peak = listed.peak_reserved_bytes.div_ceil(STEP);
    let mut hi = top;
    let first = if lo < peak && peak < top {
        format!("its reserved peak {}", human_bytes(peak * STEP))
    } else {
        human_bytes(top * STEP)
    };
    if lo < peak && peak < top {
        match run(peak) {
            Probe::Fits => hi = peak,
            Probe::Fails => {
                lo = peak;
                lo_probed = true;
            }
            Probe::Fixed(why) => return Found::not_searched(why),
        }
    }
    if hi == top {
        match run(top) {
            Probe::Fits => {}
            Probe::Fixed(why) => return Found::not_searched(why),
            Probe::Fails => {
                return Found::not_searched(format!(
                    "the run passed at {} but not at {} under --deterministic",
                    human_bytes(capacity),
                    human_bytes(top * STEP)
                ));
            }
        }
    }
    let floor = lo;
    // Capacities where a failed probe passed when probed again: a run there is not
    // reproducible even under --deterministic (the watchdog's timing), so the search goes on
    // below it, a bounded number of times.
    let mut disagreed: Vec<u64> = Vec::new();
    let mut verified = true;
    loop {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match run(mid) {
                Probe::Fits => hi = mid,
                Probe::Fails => {
                    lo = mid;
                    lo_probed = true;
                }
                Probe::Fixed(why) => return Found::not_searched(why),
            }
        }
        // The step below the answer is probed (again, when the bisection already failed
        // there), so "2 MiB less fails" is a fact, not an assumption about the live peak or
        // one probe's luck.
        if hi == 0 {
            break;
        }
        if disagreed.len() >= MAX_DISAGREEMENTS {
            verified = false;
            break;
        }
        match run(hi - 1) {
            Probe::Fails => break,
            Probe::Fits => {
                if lo_probed && lo == hi - 1 {
                    disagreed.push(hi - 1);
                }
                hi -= 1;
                if hi == 0 {
                    break;
                }
                lo = floor.min(hi - 1);
                lo_probed = false;
            }
            Probe::Fixed(why) => return Found::not_searched(why),
        }
    }
    let below = match (hi, verified) {
        (0, _) => "fits on an empty device".to_owned(),
        (_, true) => format!("fails at {}", human_bytes((hi - 1) * STEP)),
        (_, false) => format!("{} not confirmed", human_bytes((hi - 1) * STEP)),
    };
    let below = if disagreed.is_empty() {
        below
    } else {
        format!(
            "{below}; not reproducible at {} (a probe failed, the next one there fitted)",
            disagreed
                .iter()
                .map(|s| human_bytes(s * STEP))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Found {
        bytes: Some(hi * STEP),
        note: format!(
            "fits at {}, {below} ({probes} --deterministic probes in 2 MiB steps below {}, the \
             run's capacity, the first at {first}; fitting is not monotonic: a smaller \
             capacity may fit below a failing one)",
            human_bytes(hi * STEP),
            human_bytes(capacity),
        ),
    }
}

/// Searches the smallest device for the run `listed` of `entry` made with `options`.
/// Probes are not listed: only the answer goes into `listed`'s record.
pub(super) fn search(entry: &SuiteEntry, listed: &RunRecord, options: &ReplayOptions) -> Found {
    let schedule = &entry.valid.schedule;
    let capacity = options
        .device_memory
        .or(schedule.device_memory)
        .unwrap_or(DEFAULT_DEVICE_MEMORY);
    let mut probe_options = options.clone();
    probe_options.deterministic = true;
    probe_options.snapshot_dir = None;
    probe_options.trace_dir = None;
    search_with(listed, capacity, |bytes| {
        probe_options.device_memory = Some(bytes);
        judge_probe(&replay(schedule, &entry.valid.reference, &probe_options).record)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::RaceCounts;

    const MIB: u64 = 1 << 20;

    fn passed(backend: &str, live: u64) -> RunRecord {
        passed_with_peak(backend, live, 0)
    }

    fn passed_with_peak(backend: &str, live: u64, peak: u64) -> RunRecord {
        let mut r = RunRecord::empty("s", backend, "2", 2, 1);
        r.status = RunStatus::Passed;
        r.digest = Some("d".into());
        r.reference_digest = Some("d".into());
        r.races = Some(RaceCounts::default());
        r.live_peak_bytes = live;
        r.peak_reserved_bytes = peak;
        r
    }

    /// A device that fits from `need` bytes up, and the capacities probed.
    fn threshold(need: u64, probed: &mut Vec<u64>) -> impl FnMut(u64) -> Probe + '_ {
        move |bytes| {
            probed.push(bytes);
            if bytes >= need {
                Probe::Fits
            } else {
                Probe::Fails
            }
        }
    }

    #[test]
    fn a_monotonic_device_gives_its_threshold_and_the_step_below_is_probed() {
        let mut probed = Vec::new();
        let found = search_with(
            &passed("mock", 91 * MIB),
            1 << 30,
            threshold(103 * MIB, &mut probed),
        );
        assert_eq!(found.bytes, Some(104 * MIB), "{found:?}");
        assert!(probed.contains(&(102 * MIB)), "{probed:?}");
        assert!(found.note.contains("fails at 102.0 MiB"), "{}", found.note);
    }

    #[test]
    fn the_reserved_peak_is_probed_first_and_the_capacity_only_when_it_fails() {
        for (need, capacity_probed) in [(103 * MIB, false), (190 * MIB, true)] {
            let mut probed = Vec::new();
            let found = search_with(
                &passed_with_peak("mock", 91 * MIB, 183 * MIB),
                1 << 30,
                threshold(need, &mut probed),
            );
            assert_eq!(probed[0], 184 * MIB, "{probed:?}");
            assert_eq!(probed.contains(&(1 << 30)), capacity_probed, "{probed:?}");
            assert_eq!(
                found.bytes,
                Some(need.div_ceil(2 * MIB) * 2 * MIB),
                "{found:?}"
            );
            assert!(
                probed.contains(&(found.bytes.unwrap() - 2 * MIB)),
                "{probed:?}"
            );
        }
    }

    #[test]
    fn a_failure_that_does_not_repeat_sends_the_search_on_below_it() {
        // Fits from 100 MiB up, but the first probe at 116 MiB fails (not reproducible).
        let mut probed = Vec::new();
        let found = search_with(
            &passed_with_peak("mock", 92 * MIB, 200 * MIB),
            1 << 30,
            |b| {
                probed.push(b);
                let first_at_116 =
                    b == 116 * MIB && probed.iter().filter(|&&p| p == b).count() == 1;
                if b >= 100 * MIB && !first_at_116 {
                    Probe::Fits
                } else {
                    Probe::Fails
                }
            },
        );
        assert_eq!(found.bytes, Some(100 * MIB), "{found:?} {probed:?}");
        assert!(found.note.contains("fails at 98.0 MiB"), "{}", found.note);
        assert!(
            found.note.contains("not reproducible at 116.0 MiB"),
            "{}",
            found.note
        );
    }

    #[test]
    fn an_answer_at_the_live_peak_still_probes_two_mib_below() {
        let mut probed = Vec::new();
        let found = search_with(
            &passed("mock", 8 * MIB),
            64 * MIB,
            threshold(8 * MIB, &mut probed),
        );
        assert_eq!(found.bytes, Some(8 * MIB));
        assert!(probed.contains(&(6 * MIB)), "{probed:?}");
    }

    #[test]
    fn a_backend_that_ignores_the_capacity_is_reported_not_searched() {
        let mut fixed = passed("cuda", MIB);
        fixed.ignored_options = vec!["--device-memory".into()];
        assert_eq!(judge_probe(&fixed), Probe::Fixed(judge_probe_text("cuda")));
        let found = search_with(&passed("cuda", MIB), 64 * MIB, |_| {
            Probe::Fixed(judge_probe_text("cuda"))
        });
        assert_eq!(found.bytes, None);
        assert!(
            found.note.contains("cannot set its device capacity"),
            "{}",
            found.note
        );
    }

    fn judge_probe_text(backend: &str) -> String {
        format!(
            "backend {backend} cannot set its device capacity (it ignores --device-memory: its \
             devices have the memory they have)"
        )
    }

    #[test]
    fn failed_skipped_and_leaking_runs_are_not_searched() {
        let mut failed = passed("mock", MIB);
        failed.status = RunStatus::Error;
        failed.error = Some("out of memory".into());
        let mut leaking = passed("mock", MIB);
        leaking.leaked_bytes = 4;
        let skipped = RunRecord::skipped("s", "cuda", "0", 2, 1, "no libcuda".into());
        for (r, why) in [
            (failed, "out of memory"),
            (leaking, "does not pass"),
            (skipped, "skipped"),
        ] {
            let found = search_with(&r, 64 * MIB, |_| panic!("no probe for {why}"));
            assert_eq!(found.bytes, None);
            assert!(found.note.contains(why), "{}", found.note);
        }
    }
}
