//! The terminal comparison table: one block per schedule, one row per (backend, mode).

use std::fmt::Write as _;

use super::human_bytes;
use super::json::{Report, RunRecord, RunStatus};
use super::verdict::{skip_note_number, skip_notes};

/// Renders the comparison table of a report as plain text. Skip reasons are long and
/// repeat on every run of a backend: each distinct one is printed once, after the table,
/// and rows refer to it by number.
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    let notes = skip_notes(report);
    let mut schedules: Vec<&str> = Vec::new();
    for r in &report.runs {
        if !schedules.contains(&r.schedule.as_str()) {
            schedules.push(&r.schedule);
        }
    }
    // A configuration column only when some run had one (`--alloc-conf`).
    let has_confs = report.runs.iter().any(|r| r.alloc_conf.is_some());
    let mut header = vec![
        "backend",
        "mode",
        "peak reserved",
        "peak allocated",
        "live peak",
        "reuse events",
        "record_stream",
        "wall ms",
        "status",
    ];
    if has_confs {
        header.insert(2, "config");
    }
    // A smallest-device column, before the status, only with `run --smallest-device`.
    let has_smallest = report
        .runs
        .iter()
        .any(|r| r.smallest_device_bytes.is_some());
    if has_smallest {
        header.insert(header.len() - 1, "smallest device");
    }
    // Every column but the last (the status) is padded.
    let padded = header.len() - 1;
    for name in schedules {
        let rows: Vec<Vec<String>> = report
            .runs
            .iter()
            .filter(|r| r.schedule == name)
            .map(|r| {
                let status = match r.status {
                    RunStatus::Skipped => {
                        format!("skipped [{}]", skip_note_number(&notes, r).unwrap_or(0))
                    }
                    RunStatus::Error if r.is_declared() => format!(
                        "out of memory as declared: {}",
                        r.declared_because.as_deref().unwrap_or("")
                    ),
                    RunStatus::Error => format!("error: {}", r.error.as_deref().unwrap_or("")),
                    RunStatus::Failed => {
                        let races = r.races.unwrap_or_default();
                        format!(
                            "FAILED (mismatches {}, reuse races {}, schedule races {}, leaked {})",
                            r.mismatches,
                            races.reuse,
                            races.schedule,
                            human_bytes(r.leaked_bytes)
                        )
                    }
                    RunStatus::Passed => "passed".to_owned(),
                };
                let mut row = vec![
                    r.backend.clone(),
                    r.mode.clone(),
                    human_bytes(r.peak_reserved_bytes),
                    human_bytes(r.peak_allocated_bytes),
                    human_bytes(r.live_peak_bytes),
                    r.reuse_events_created.to_string(),
                    r.record_stream_calls.to_string(),
                    format!("{:.1}", r.wall_ms),
                    status,
                ];
                if has_confs {
                    row.insert(
                        2,
                        r.alloc_conf.clone().unwrap_or_else(|| "default".to_owned()),
                    );
                }
                if has_smallest {
                    row.insert(row.len() - 1, smallest_device_cell(r));
                }
                row
            })
            .collect();
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row.iter()).take(padded) {
                *w = (*w).max(cell.len());
            }
        }
        let _ = writeln!(out, "{name}");
        let line = |cells: &[&str]| {
            let mut s = String::from(" ");
            for (i, c) in cells.iter().enumerate() {
                if i < padded {
                    let _ = write!(s, " {c:>w$} |", w = widths[i]);
                } else {
                    let _ = write!(s, " {c}");
                }
            }
            s
        };
        let _ = writeln!(out, "{}", line(&header));
        for row in &rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            let _ = writeln!(out, "{}", line(&cells));
        }
        out.push('\n');
    }
    smallest_device_notes(&mut out, report);
    if !notes.is_empty() {
        let _ = writeln!(out, "skipped because:");
        for (i, n) in notes.iter().enumerate() {
            let _ = writeln!(out, "  [{}] {}: {}", i + 1, n.backend, n.reason);
        }
        out.push('\n');
    }
    out
}

/// The smallest device a run fits on (`run --smallest-device`), or `not searched`.
fn smallest_device_cell(r: &RunRecord) -> String {
    match r.smallest_device_bytes {
        Some(Some(bytes)) => human_bytes(bytes),
        Some(None) => "not searched".to_owned(),
        None => String::new(),
    }
}

/// After the blocks: how each smallest device was found, or why it was not searched.
fn smallest_device_notes(out: &mut String, report: &Report) {
    let noted: Vec<&RunRecord> = report
        .runs
        .iter()
        .filter(|r| r.smallest_device_note.is_some())
        .collect();
    if noted.is_empty() {
        return;
    }
    let _ = writeln!(out, "smallest device:");
    for r in noted {
        let conf = r
            .alloc_conf
            .as_ref()
            .map_or_else(String::new, |c| format!(" conf `{c}`"));
        let _ = writeln!(
            out,
            "  {} {} mode {}{conf}: {}",
            r.schedule,
            r.backend,
            r.mode,
            r.smallest_device_note.as_deref().unwrap_or("")
        );
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::json::{RaceCounts, RunRecord};

    #[test]
    fn one_block_per_schedule_with_status_reasons() {
        let mut report = Report::new();
        let mut a = RunRecord::empty("ddp", "mock", "2", 2, 3);
        a.status = RunStatus::Passed;
        a.peak_reserved_bytes = 2 << 20;
        let mut b = RunRecord::empty("ddp", "mock", "unsafe", 2, 3);
        b.status = RunStatus::Failed;
        b.races = Some(RaceCounts {
            reuse: 3,
            schedule: 0,
        });
        report.runs.push(a);
        report.runs.push(b);
        for mode in ["0", "1"] {
            report.runs.push(RunRecord::skipped(
                "tp",
                "cuda",
                mode,
                2,
                1,
                "no libcuda".into(),
            ));
        }
        let t = render_table(&report);
        assert_eq!(t.matches("skipped [1]").count(), 2, "{t}");
        assert_eq!(t.matches("no libcuda").count(), 1, "each reason once: {t}");
        assert!(t.starts_with("ddp\n"), "{t}");
        assert!(t.contains("2.0 MiB"));
        assert!(t.contains("reuse races 3"));
        assert!(t.contains("\ntp\n"));
        assert!(
            t.contains("skipped because:\n  [1] cuda: no libcuda\n"),
            "{t}"
        );
        assert!(
            !t.contains("config"),
            "no column without configurations: {t}"
        );
    }

    #[test]
    fn a_config_column_appears_when_a_run_had_one() {
        let mut report = Report::new();
        for conf in [None, Some("max_split_size_mb:20")] {
            let mut r = RunRecord::empty("ddp", "mock", "0", 1, 1);
            r.status = RunStatus::Passed;
            r.alloc_conf = conf.map(str::to_owned);
            report.runs.push(r);
        }
        let t = render_table(&report);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[1].contains("| mode |") && lines[1].contains("config |"),
            "{t}"
        );
        assert!(
            lines[2].contains("default |") && lines[2].ends_with(" passed"),
            "{t}"
        );
        assert!(lines[3].contains("max_split_size_mb:20 |"), "{t}");
    }

    #[test]
    fn a_smallest_device_column_and_notes_appear_with_the_flag() {
        let mut report = Report::new();
        for (mode, bytes) in [("0", Some(104 << 20)), ("1", None)] {
            let mut r = RunRecord::empty("fsdp", "mock", mode, 2, 1);
            r.status = RunStatus::Passed;
            r.smallest_device_bytes = Some(bytes);
            r.smallest_device_note = Some(format!("note {mode}"));
            report.runs.push(r);
        }
        let t = render_table(&report);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].ends_with("| smallest device | status"), "{t}");
        assert!(
            lines[2].contains("104.0 MiB |") && lines[2].ends_with(" passed"),
            "{t}"
        );
        assert!(lines[3].contains("not searched |"), "{t}");
        assert!(
            t.contains(
                "smallest device:\n  fsdp mock mode 0: note 0\n  fsdp mock mode 1: note 1\n"
            ),
            "{t}"
        );
        report
            .runs
            .iter_mut()
            .for_each(|r| r.smallest_device_bytes = None);
        report
            .runs
            .iter_mut()
            .for_each(|r| r.smallest_device_note = None);
        assert!(
            !render_table(&report).contains("smallest"),
            "nothing without the flag"
        );
    }
}
