//! The HTML report: the verdict, the run's metadata and a table of contents at the top;
//! then per schedule (each an anchor) the comparison table, one SVG plot overlaying the
//! reserved bytes of every (backend, mode) run, and a plot per run of reserved and
//! allocated bytes over the schedule's ops (charts in `charts`). All plots of a schedule
//! share one y-scale; runs whose memory never changes get a line of text instead of a
//! flat chart. Runs of a schedule that differ only in allocator configuration also get a
//! side-by-side block (`compare`).

use std::fmt::Write as _;

use super::charts::{is_flat, plot, plot_reserved_by_run, to_mib};
use super::compare::{conf_label, config_block};
use super::human_bytes;
use super::json::Report;
use super::meta::RunMeta;
use super::summary::{has_declared, negative_control, tallies};
use super::verdict::{Outcome, judge, skip_note_number, skip_notes};
use crate::replay::RunArtifacts;

pub use super::charts::MemorySeries;

/// An HTML id for a schedule name: letters, digits and `-`, prefixed `s-`.
fn anchor(name: &str) -> String {
    let slug: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("s-{slug}")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The links of one run: `snapshot: r0 r1 · timeline: r0 · metrics: r0`.
fn artifact_cell(files: Option<&RunArtifacts>) -> String {
    let Some(files) = files else {
        return String::new();
    };
    let mut cell = String::new();
    for kind in ["snapshot", "timeline", "metrics"] {
        let links: Vec<String> = files
            .links
            .iter()
            .filter(|l| l.kind == kind)
            .map(|l| format!("<a href=\"{}\">r{}</a>", escape(&l.href), l.rank))
            .collect();
        if !links.is_empty() {
            if !cell.is_empty() {
                cell.push_str(" &middot; ");
            }
            let _ = write!(cell, "{kind}: {}", links.join(" "));
        }
    }
    cell
}

/// The verdict block: headline, counts per (backend, mode), negative-control tally.
fn verdict_block(out: &mut String, report: &Report) {
    let judgement = judge(report);
    let class = match judgement.outcome {
        Outcome::Pass => "passed",
        Outcome::Fail => "failed",
        Outcome::NothingRan => "skipped",
    };
    let _ = writeln!(
        out,
        "<p class=\"verdict {class}\">{}</p>",
        escape(&judgement.to_string())
    );
    let declared = has_declared(report);
    let has_confs = report.runs.iter().any(|r| r.alloc_conf.is_some());
    out.push_str("<table><tr><th>backend</th><th>mode</th>");
    if has_confs {
        out.push_str("<th>configuration</th>");
    }
    out.push_str("<th>passed</th>");
    if declared {
        out.push_str("<th>declared</th>");
    }
    out.push_str("<th>failed</th><th>error</th><th>skipped</th></tr>\n");
    for t in tallies(report) {
        let conf = if has_confs {
            format!(
                "<td class=l><code>{}</code></td>",
                escape(conf_label(t.alloc_conf.as_deref()))
            )
        } else {
            String::new()
        };
        let declared_cell = if declared {
            format!("<td class=passed>{}</td>", t.declared)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "<tr><td class=l>{}</td><td>{}</td>{conf}<td class=passed>{}</td>{declared_cell}<td class=failed>{}</td><td class=error>{}</td><td class=skipped>{}</td></tr>",
            escape(&t.backend),
            escape(&t.mode),
            t.passed,
            t.failed,
            t.error,
            t.skipped
        );
    }
    out.push_str("</table>\n");
    let notes = skip_notes(report);
    if !notes.is_empty() {
        out.push_str(
            "<p>Skipped, each reason once (rows refer to it by number):</p>\n<ol class=skips>\n",
        );
        for (i, n) in notes.iter().enumerate() {
            let _ = writeln!(
                out,
                "<li id=\"skip-{}\"><code>{}</code> ({} runs): {}</li>",
                i + 1,
                escape(&n.backend),
                n.runs,
                escape(&n.reason)
            );
        }
        out.push_str("</ol>\n");
    }
    let (matching, judged) = negative_control(report);
    if judged > 0 {
        let _ = writeln!(
            out,
            "<p>Negative control (<code>--mode unsafe</code>): {matching} of {judged} verdicts match the schedules' declarations.</p>"
        );
    }
}

/// Renders the whole report as one self-contained HTML page; `artifacts` are the files of
/// `--snapshot-dir` / `--trace-dir`, linked from each run's row; `meta` says how the run
/// was started.
pub fn render_html(
    report: &Report,
    series: &[MemorySeries],
    artifacts: &[RunArtifacts],
    meta: &RunMeta,
) -> String {
    let mut out = String::new();
    out.push_str("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>memreuse conformance report</title>\n");
    out.push_str("<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin-bottom:1em;font-size:13px}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right;vertical-align:top}td{white-space:nowrap}td.l{text-align:left}td.why{white-space:normal;overflow-wrap:anywhere;min-width:8em;max-width:28em;text-align:left}th{font-size:12px}.passed{color:#080}.failed,.error{color:#b00}.skipped{color:#888}.verdict{font-size:1.4em;font-weight:bold}.plots{display:flex;flex-wrap:wrap;gap:8px}dl.meta{display:grid;grid-template-columns:max-content auto;gap:2px 12px}dl.meta dd{margin:0;font-family:monospace;overflow-wrap:anywhere}nav li{margin:2px 0}</style>\n");
    out.push_str("</head><body>\n<h1>memreuse conformance report</h1>\n");
    verdict_block(&mut out, report);
    out.push_str("<dl class=meta>");
    for (label, value) in meta.fields() {
        let _ = write!(out, "<dt>{label}</dt><dd>{}</dd>", escape(value));
    }
    let _ = writeln!(
        out,
        "<dt>tool</dt><dd>{} {}</dd></dl>",
        escape(&report.format),
        escape(&report.tool_version)
    );
    let has_files = !artifacts.is_empty();
    let notes = skip_notes(report);
    let has_confs = report.runs.iter().any(|r| r.alloc_conf.is_some());
    if has_files {
        out.push_str("<p>Files per run and rank: <b>snapshot</b> opens in PyTorch's memory viewer (<code>python -m torch.cuda._memory_viz trace_plot FILE -o out.html</code>, or drop it on pytorch.org/memory_viz), <b>timeline</b> in ui.perfetto.dev or chrome://tracing, <b>metrics</b> is the Prometheus exposition after the last op.</p>\n");
    }
    let mut schedules: Vec<&str> = Vec::new();
    for r in &report.runs {
        if !schedules.contains(&r.schedule.as_str()) {
            schedules.push(&r.schedule);
        }
    }
    out.push_str("<nav><h2>Schedules</h2><ul>\n");
    for name in &schedules {
        let runs = report.runs.iter().filter(|r| r.schedule == *name);
        let bad = runs.clone().filter(|r| !r.as_expected()).count();
        let mut counts: Vec<String> = Vec::new();
        for status in ["passed", "failed", "error", "skipped"] {
            let n = runs.clone().filter(|r| r.status.as_str() == status).count();
            if n > 0 {
                counts.push(format!("<span class={status}>{n} {status}</span>"));
            }
        }
        let state = if bad == 0 {
            counts.join(", ")
        } else {
            format!(
                "<b class=failed>{bad} not as expected</b>: {}",
                counts.join(", ")
            )
        };
        let _ = writeln!(
            out,
            "<li><a href=\"#{}\">{}</a> &mdash; {state}</li>",
            anchor(name),
            escape(name)
        );
    }
    out.push_str("</ul></nav>\n");
    for name in schedules {
        let _ = writeln!(
            out,
            "<h2 id=\"{}\">{} <a href=\"#{}\">#</a></h2>",
            anchor(name),
            escape(name),
            anchor(name)
        );
        out.push_str("<table><tr><th>backend</th><th>mode</th>");
        if has_confs {
            out.push_str("<th>configuration</th>");
        }
        out.push_str("<th>peak reserved</th><th>peak allocated</th><th>live peak</th><th>reuse events</th><th>record_stream</th><th>erase_stream</th><th>shelf stashes</th><th>races (reuse/schedule)</th><th>digest</th><th>wall ms</th><th>status</th>");
        out.push_str(if has_files {
            "<th>files</th></tr>\n"
        } else {
            "</tr>\n"
        });
        for r in report.runs.iter().filter(|r| r.schedule == name) {
            let races = r.races.map_or_else(
                || "n/a".to_owned(),
                |c| format!("{}/{}", c.reuse, c.schedule),
            );
            // A skip reason is long and the same on every run of a backend: the row links
            // to its one copy in the verdict block.
            let detail = match skip_note_number(&notes, r) {
                Some(n) => format!("<a href=\"#skip-{n}\">skip reason {n}</a>"),
                None if r.is_declared() => format!(
                    "out of memory as declared: {} ({})",
                    escape(r.declared_because.as_deref().unwrap_or("")),
                    escape(r.error.as_deref().unwrap_or(""))
                ),
                None => escape(r.error.as_deref().unwrap_or("")),
            };
            let _ = writeln!(
                out,
                "<tr><td class=l>{}</td><td>{}</td>{}<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=l><code>{}</code></td><td>{:.1}</td><td class=\"why {}\">{} {}</td>{}</tr>",
                escape(&r.backend),
                escape(&r.mode),
                if has_confs {
                    format!(
                        "<td class=l><code>{}</code></td>",
                        escape(conf_label(r.alloc_conf.as_deref()))
                    )
                } else {
                    String::new()
                },
                human_bytes(r.peak_reserved_bytes),
                human_bytes(r.peak_allocated_bytes),
                human_bytes(r.live_peak_bytes),
                r.reuse_events_created,
                r.record_stream_calls,
                r.erase_stream_calls,
                r.shelf_stashes,
                races,
                escape(r.digest.as_deref().unwrap_or("-")),
                r.wall_ms,
                r.status.as_str(),
                r.status.as_str(),
                detail,
                if has_files {
                    let files = artifacts.iter().find(|a| {
                        a.schedule == r.schedule
                            && a.backend == r.backend
                            && a.mode == r.mode
                            && a.alloc_conf == r.alloc_conf
                    });
                    format!("<td class=l>{}</td>", artifact_cell(files))
                } else {
                    String::new()
                },
            );
        }
        out.push_str("</table>\n");
        out.push_str(&smallest_device_table(name, report));
        let runs: Vec<&MemorySeries> = series.iter().filter(|s| s.schedule == name).collect();
        // One y-scale for every chart of the schedule, so modes compare by eye.
        let max_y = runs
            .iter()
            .flat_map(|s| s.per_rank.iter().flatten())
            .map(|&(a, r)| to_mib(a.max(r)))
            .fold(to_mib(1), f64::max);
        out.push_str(&config_block(name, report, series, max_y, escape));
        out.push_str("<div class=plots>\n");
        let (flat, moving): (Vec<&MemorySeries>, Vec<&MemorySeries>) =
            runs.iter().partition(|s| is_flat(&s.max_over_ranks()));
        if moving.is_empty() {
            // Every line of the overlay would be flat too.
        } else if let Some(svg) = plot_reserved_by_run(name, &runs, max_y) {
            out.push_str("<div>");
            out.push_str(&svg);
            out.push_str("</div>\n");
        }
        for s in moving {
            match plot(s, max_y) {
                Some(svg) => {
                    out.push_str("<div>");
                    out.push_str(&svg);
                    out.push_str("</div>\n");
                }
                None => {
                    let _ = writeln!(out, "<p>No memory series for {}.</p>", escape(&s.label()));
                }
            }
        }
        out.push_str("</div>\n");
        if !flat.is_empty() {
            let names: Vec<String> = flat
                .iter()
                .map(|s| {
                    let points = s.max_over_ranks();
                    let r = points.first().map_or(0, |p| p.1);
                    let a = points.iter().map(|p| p.0).max().unwrap_or(0);
                    format!(
                        "{} ({} reserved, peak {} allocated)",
                        escape(&s.label()),
                        human_bytes(r),
                        human_bytes(a)
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "<p>Reserved memory flat throughout, not charted: {}.</p>",
                names.join("; ")
            );
        }
    }
    out.push_str("</body></html>\n");
    out
}

/// With `run --smallest-device`: per run of schedule `name`, the smallest device it passes
/// on and how it was found (or why not); empty without the flag.
fn smallest_device_table(name: &str, report: &Report) -> String {
    let runs: Vec<_> = report
        .runs
        .iter()
        .filter(|r| r.schedule == name && r.smallest_device_bytes.is_some())
        .collect();
    if runs.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<table><tr><th>backend</th><th>mode</th><th>configuration</th><th>smallest device</th><th>live peak</th><th>how found</th></tr>\n",
    );
    for r in runs {
        let _ = writeln!(
            out,
            "<tr><td class=l>{}</td><td>{}</td><td class=l><code>{}</code></td><td>{}</td><td>{}</td><td class=l>{}</td></tr>",
            escape(&r.backend),
            escape(&r.mode),
            escape(conf_label(r.alloc_conf.as_deref())),
            r.smallest_device_bytes
                .flatten()
                .map_or_else(|| "not searched".to_owned(), human_bytes),
            human_bytes(r.live_peak_bytes),
            escape(r.smallest_device_note.as_deref().unwrap_or(""))
        );
    }
    out.push_str("</table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::json::{RunRecord, RunStatus};

    #[test]
    fn page_embeds_one_svg_per_series_and_escapes_names() {
        let mut report = Report::new();
        let mut r = RunRecord::empty("a<b", "mock", "2", 1, 1);
        r.status = RunStatus::Passed;
        report.runs.push(r);
        let series = MemorySeries {
            schedule: "a<b".into(),
            backend: "mock".into(),
            mode: "2".into(),
            alloc_conf: None,
            per_rank: vec![vec![(0, 0), (1 << 20, 2 << 20), (0, 2 << 20)]],
        };
        let page = render_html(&report, &[series], &[], &RunMeta::default());
        assert!(page.contains("<h2 id=\"s-a-b\">a&lt;b <a href=\"#s-a-b\">#</a></h2>"));
        assert!(
            page.contains("<a href=\"#s-a-b\">a&lt;b</a>"),
            "table of contents"
        );
        assert_eq!(page.matches("<svg").count(), 1, "one plot");
        assert!(page.contains("reserved") && page.contains("allocated"));
    }

    #[test]
    fn several_runs_of_a_schedule_also_get_one_overlay_of_reserved() {
        let mut report = Report::new();
        let mut series = Vec::new();
        for mode in ["0", "1", "2", "3"] {
            report.runs.push(RunRecord::empty("s", "mock", mode, 1, 1));
            series.push(MemorySeries {
                schedule: "s".into(),
                backend: "mock".into(),
                mode: mode.into(),
                alloc_conf: None,
                per_rank: vec![vec![(0, 2 << 20), (1 << 20, 4 << 20)]],
            });
        }
        let page = render_html(&report, &series, &[], &RunMeta::default());
        assert_eq!(page.matches("<svg").count(), 5, "one overlay + one per run");
        assert!(page.contains("s: reserved, every run"));
        for mode in ["0", "1", "2", "3"] {
            assert!(
                page.contains(&format!("mock mode {mode}")),
                "legend names mode {mode}"
            );
        }
    }

    #[test]
    fn rows_link_the_files_of_their_run() {
        use crate::replay::{ArtifactLink, RunArtifacts};
        let mut report = Report::new();
        report.runs.push(RunRecord::empty("s", "mock", "0", 2, 1));
        report.runs.push(RunRecord::empty("s", "mock", "1", 2, 1));
        let files = RunArtifacts {
            schedule: "s".into(),
            backend: "mock".into(),
            mode: "0".into(),
            alloc_conf: None,
            links: vec![
                ArtifactLink {
                    kind: "snapshot",
                    rank: 1,
                    href: "../snap/s__mock__mode-0__rank1.pickle".into(),
                },
                ArtifactLink {
                    kind: "timeline",
                    rank: 0,
                    href: "t&x.json".into(),
                },
            ],
        };
        let page = render_html(&report, &[], &[files], &RunMeta::default());
        assert!(page.contains("<th>files</th>"));
        assert!(page.contains(
            "snapshot: <a href=\"../snap/s__mock__mode-0__rank1.pickle\">r1</a> &middot; timeline: <a href=\"t&amp;x.json\">r0</a>"
        ));
        assert_eq!(
            page.matches("<td class=l></td></tr>").count(),
            1,
            "mode 1 has none"
        );
    }

    #[test]
    fn flat_runs_are_named_not_charted() {
        let mut report = Report::new();
        let mut series = Vec::new();
        for (mode, moving) in [("0", true), ("2", false)] {
            report.runs.push(RunRecord::empty("s", "mock", mode, 1, 1));
            series.push(MemorySeries {
                schedule: "s".into(),
                backend: "mock".into(),
                mode: mode.into(),
                alloc_conf: None,
                per_rank: vec![if moving {
                    vec![(0, 2 << 20), (1 << 20, 4 << 20)]
                } else {
                    vec![(0, 2 << 20), (0, 2 << 20)]
                }],
            });
        }
        let page = render_html(&report, &series, &[], &RunMeta::default());
        assert_eq!(page.matches("<svg").count(), 2, "overlay + the moving run");
        assert!(page.contains(
            "Reserved memory flat throughout, not charted: mock mode 2 (2.0 MiB reserved, peak 0 B allocated)."
        ));
        assert!(
            page.contains("<td class=\"why skipped\">")
                || page.contains("<td class=\"why error\">")
        );
    }

    #[test]
    fn a_smallest_device_table_appears_with_the_flag_only() {
        let mut report = Report::new();
        report.runs.push(RunRecord::empty("s", "mock", "0", 1, 1));
        let page = render_html(&report, &[], &[], &RunMeta::default());
        assert!(
            !page.contains("smallest device"),
            "nothing without the flag"
        );
        report.runs[0].smallest_device_bytes = Some(Some(104 << 20));
        report.runs[0].smallest_device_note = Some("fits at 104.0 MiB, fails at <102>".into());
        let page = render_html(&report, &[], &[], &RunMeta::default());
        assert!(page.contains("<th>smallest device</th>"), "{page}");
        assert!(page.contains("<td>104.0 MiB</td>"), "{page}");
        assert!(page.contains("fails at &lt;102&gt;"), "escaped: {page}");
    }
}
