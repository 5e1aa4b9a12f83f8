//! The lines `whatif` prints around its table so that it says why, not only which: the
//! job's live peak, whether the device is smaller than what the program itself holds (then
//! no setting can fit), and a recommendation.

use std::fmt::Write as _;

use super::history::ReplayHistory;
use super::output::{Outcome, SettingOutcome, display_conf, mib};

/// `live peak 4160.2 MiB at entry 5484 of 14506`.
pub fn live_peak_line(history: &ReplayHistory) -> String {
    let (bytes, at) = history.live_peak_at();
    let at = if at == 0 {
        "before the first entry".to_owned()
    } else {
        format!("at entry {at} of {}", history.entries.len())
    };
    format!("live peak {} {at}", mib(bytes))
}

/// `no setting can fit: ...` when the device is smaller than the live peak.
pub fn cannot_fit_line(history: &ReplayHistory, capacity: Option<u64>) -> Option<String> {
    let capacity = capacity?;
    let (bytes, at) = history.live_peak_at();
    (bytes > capacity).then(|| {
        format!(
            "no setting can fit: the program holds {} at entry {at}, more than the {} device",
            mib(bytes),
            mib(capacity)
        )
    })
}

/// Pieces of a setting string: how far it is from the defaults.
fn pieces(conf: &str) -> usize {
    conf.split(',').filter(|p| !p.trim().is_empty()).count()
}

/// `recommendation: ...`: the setting that fits with the most room (the lowest reserved
/// peak; with a device size, the most bytes to spare), and the cheapest change from the
/// defaults that fits (fewest `key:value` pieces, then the order given). `None` when no
/// setting was replayed.
pub fn recommendation(outcomes: &[SettingOutcome], capacity: Option<u64>) -> Option<String> {
    let fitting: Vec<(&SettingOutcome, u64)> = outcomes
        .iter()
        .filter_map(|o| match &o.outcome {
            Outcome::Replayed(f, _) if f.first_oom_entry.is_none() => {
                Some((o, f.reserved_peak_bytes))
            }
            _ => None,
        })
        .collect();
    if !outcomes
        .iter()
        .any(|o| matches!(o.outcome, Outcome::Replayed(..)))
    {
        return None;
    }
    let Some(&(best, peak)) = fitting
        .iter()
        .min_by_key(|(o, peak)| (*peak, pieces(&o.alloc_conf)))
    else {
        return Some(
            "recommendation: none of these settings fits this device: give a larger \
             --device-memory, or see each setting's reason above"
                .to_owned(),
        );
    };
    let room = capacity.map_or_else(
        || format!("reserved peak {}", mib(peak)),
        |c| format!("{} to spare", mib(c.saturating_sub(peak))),
    );
    let mut line = format!(
        "recommendation: {} fits with the most room ({room})",
        display_conf(&best.alloc_conf)
    );
    let defaults_fit = fitting.iter().any(|(o, _)| o.alloc_conf.is_empty());
    if defaults_fit {
        line.push_str("; PyTorch's defaults fit already: no change needed");
    } else if let Some((cheapest, _)) = fitting.iter().min_by_key(|(o, _)| pieces(&o.alloc_conf)) {
        let _ = write!(
            line,
            "; the cheapest change from the defaults that fits: {}",
            display_conf(&cheapest.alloc_conf)
        );
    }
    Some(line)
}
