//! What `whatif` reports: one [`SettingOutcome`] per setting, as a terminal table and as
//! `memreuse.whatif/1` JSON (documented in `docs/whatif-format.md`).

use std::fmt::Write as _;

use serde::Serialize;

use super::history::ReplayHistory;
use super::replay::ReplayFigures;

/// The JSON format name and version.
pub const WHATIF_FORMAT: &str = "memreuse.whatif/1";

/// How a setting fared.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Replayed: its figures and the CPU seconds the replay took.
    Replayed(Box<ReplayFigures>, f64),
    /// The allocator cannot do it yet.
    NotAvailable(String),
    /// It has no meaning for this replay.
    NotApplicable(String),
    /// The replay failed on a device error other than out-of-memory.
    Failed(String),
}

/// One setting and its outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct SettingOutcome {
    /// The `MEMREUSE_ALLOC_CONF` string ("" is PyTorch's defaults).
    pub alloc_conf: String,
    /// What happened.
    pub outcome: Outcome,
    /// The smallest device found to fit (`--smallest-device`), a multiple of 2 MiB.
    pub smallest_device: Option<u64>,
}

/// The `history` object of the JSON.
#[derive(Serialize)]
struct HistoryJson<'a> {
    file: &'a str,
    format: &'a str,
    entries: usize,
    allocations: usize,
    streams: usize,
    live_peak_bytes: u64,
    lower_bound: bool,
    initial_blocks: usize,
    skipped_unknown_frees: u64,
    ignored_entries: u64,
    recorded_oom_entries: &'a [u64],
}

/// One element of `settings`.
#[derive(Serialize)]
struct SettingJson<'a> {
    alloc_conf: &'a str,
    status: &'static str,
    reason: Option<&'a str>,
    reserved_peak_bytes: Option<u64>,
    live_peak_bytes: Option<u64>,
    allocated_peak_bytes: Option<u64>,
    reserved_to_live_ratio: Option<f64>,
    fragmentation_at_peak: Option<f64>,
    device_allocations: Option<u64>,
    first_oom_entry: Option<u64>,
    first_oom_position: Option<u64>,
    oom_reason: Option<&'a str>,
    oom_message: Option<&'a str>,
    entries_replayed: Option<u64>,
    cpu_seconds: Option<f64>,
    entries_per_cpu_second: Option<f64>,
    smallest_fitting_device_bytes: Option<u64>,
}

#[derive(Serialize)]
struct WhatifJson<'a> {
    format: &'static str,
    history: HistoryJson<'a>,
    device_memory_bytes: Option<u64>,
    settings: Vec<SettingJson<'a>>,
}

fn ratio(figures: &ReplayFigures) -> Option<f64> {
    (figures.live_peak_bytes > 0)
        .then(|| figures.reserved_peak_bytes as f64 / figures.live_peak_bytes as f64)
}

fn rate(figures: &ReplayFigures, cpu_seconds: f64) -> Option<f64> {
    (cpu_seconds > 0.0).then(|| figures.entries_replayed as f64 / cpu_seconds)
}

/// The `memreuse.whatif/1` document.
pub fn to_json(
    file: &str,
    history: &ReplayHistory,
    device_memory: Option<u64>,
    outcomes: &[SettingOutcome],
) -> String {
    let settings = outcomes
        .iter()
        .map(|o| {
            let mut s = SettingJson {
                alloc_conf: &o.alloc_conf,
                status: "replayed",
                reason: None,
                reserved_peak_bytes: None,
                live_peak_bytes: None,
                allocated_peak_bytes: None,
                reserved_to_live_ratio: None,
                fragmentation_at_peak: None,
                device_allocations: None,
                first_oom_entry: None,
                first_oom_position: None,
                oom_reason: None,
                oom_message: None,
                entries_replayed: None,
                cpu_seconds: None,
                entries_per_cpu_second: None,
                smallest_fitting_device_bytes: o.smallest_device,
            };
            match &o.outcome {
                Outcome::Replayed(f, cpu) => {
                    s.reserved_peak_bytes = Some(f.reserved_peak_bytes);
                    s.live_peak_bytes = Some(f.live_peak_bytes);
                    s.allocated_peak_bytes = Some(f.allocated_peak_bytes);
                    s.reserved_to_live_ratio = ratio(f);
                    s.fragmentation_at_peak = Some(f.fragmentation_at_peak);
                    s.device_allocations = Some(f.device_allocations);
                    s.first_oom_entry = f.first_oom_entry;
                    s.first_oom_position = f.first_oom_position;
                    s.oom_reason = f.oom_reason.as_deref();
                    s.oom_message = f.oom_message.as_deref();
                    s.entries_replayed = Some(f.entries_replayed);
                    s.cpu_seconds = Some(*cpu);
                    s.entries_per_cpu_second = rate(f, *cpu);
                }
                Outcome::NotAvailable(why) => {
                    s.status = "not_available";
                    s.reason = Some(why);
                }
                Outcome::NotApplicable(why) => {
                    s.status = "not_applicable";
                    s.reason = Some(why);
                }
                Outcome::Failed(why) => {
                    s.status = "failed";
                    s.reason = Some(why);
                }
            }
            s
        })
        .collect();
    let doc = WhatifJson {
        format: WHATIF_FORMAT,
        history: HistoryJson {
            file,
            format: &history.format,
            entries: history.entries.len(),
            allocations: history.ids,
            streams: history.streams.len(),
            live_peak_bytes: history.live_peak_bytes(),
            lower_bound: history.lower_bound,
            initial_blocks: history.initial.len(),
            skipped_unknown_frees: history.skipped_unknown_frees,
            ignored_entries: history.ignored_entries,
            recorded_oom_entries: &history.recorded_ooms,
        },
        device_memory_bytes: device_memory,
        settings,
    };
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// The terminal table, one row per setting.
pub fn render_table(outcomes: &[SettingOutcome], lower_bound: bool) -> String {
    let mut out = String::new();
    let conf_width = outcomes
        .iter()
        .map(|o| display_conf(&o.alloc_conf).len())
        .max()
        .unwrap_or(0)
        .max(12);
    let searched = outcomes.iter().any(|o| o.smallest_device.is_some());
    let _ = write!(
        out,
        "{:<conf_width$}  {:>13}  {:>13}  {:>6}  {:>9}  {:>9}  {:>10}  {:>13}",
        "setting",
        "reserved pk",
        "live pk",
        "ratio",
        "frag@pk",
        "dev alloc",
        "first OOM",
        "entries/cpu-s"
    );
    out.push_str(if searched {
        "  smallest device\n"
    } else {
        "\n"
    });
    for o in outcomes {
        let conf = display_conf(&o.alloc_conf);
        match &o.outcome {
            Outcome::Replayed(f, cpu) => {
                let _ = write!(
                    out,
                    "{conf:<conf_width$}  {:>13}  {:>13}  {:>6}  {:>8.1}%  {:>9}  {:>10}  {:>13}",
                    mib(f.reserved_peak_bytes),
                    mib(f.live_peak_bytes),
                    ratio(f).map_or("-".to_owned(), |r| format!("{r:.3}")),
                    f.fragmentation_at_peak * 100.0,
                    f.device_allocations,
                    f.first_oom_position
                        .map_or("fits".to_owned(), |e| format!("entry {e}")),
                    rate(f, *cpu).map_or("-".to_owned(), |r| format!("{:.2} M", r / 1e6)),
                );
                match o.smallest_device {
                    Some(bytes) => {
                        let _ = writeln!(out, "  {:>15}", mib(bytes));
                    }
                    None => out.push('\n'),
                }
            }
            Outcome::NotAvailable(why) => {
                let _ = writeln!(out, "{conf:<conf_width$}  not available: {why}");
            }
            Outcome::NotApplicable(why) => {
                let _ = writeln!(out, "{conf:<conf_width$}  not applicable: {why}");
            }
            Outcome::Failed(why) => {
                let _ = writeln!(out, "{conf:<conf_width$}  failed: {why}");
            }
        }
    }
    for o in outcomes {
        if let Outcome::Replayed(f, _) = &o.outcome
            && let (Some(at), Some(reason)) = (f.first_oom_position, &f.oom_reason)
        {
            let _ = writeln!(
                out,
                "why {}: out of memory at entry {at}: {reason}",
                display_conf(&o.alloc_conf)
            );
        }
    }
    if lower_bound {
        out.push_str(
            "note: the history misses part of the recording (trace ring wrapped, or no `end` \
             line): every figure is a lower bound\n",
        );
    }
    out
}

/// Bytes as MiB with one decimal: settings differ by a few segments, which GiB would hide.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// `""` shown as words.
pub fn display_conf(conf: &str) -> &str {
    if conf.is_empty() {
        "\"\" (PyTorch defaults)"
    } else {
        conf
    }
}
