//! The HTML report: the comparison table and, per schedule, one SVG plot overlaying the
//! reserved bytes of every (backend, mode) run, then a plot per run of reserved and
//! allocated bytes over the schedule's ops.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::human_bytes;
use super::json::Report;
use crate::replay::RunArtifacts;

/// Memory over one run: for each rank, `(allocated, reserved)` bytes after every op the
/// rank executed, in its program order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemorySeries {
    /// Schedule name.
    pub schedule: String,
    /// Backend name.
    pub backend: String,
    /// Mode name.
    pub mode: String,
    /// Per rank, per op: (allocated bytes, reserved bytes).
    pub per_rank: Vec<Vec<(u64, u64)>>,
}

impl MemorySeries {
    /// At each op index, the maximum over ranks (ranks run different numbers of ops; a
    /// rank that finished keeps its last value).
    pub fn max_over_ranks(&self) -> Vec<(u64, u64)> {
        let len = self.per_rank.iter().map(Vec::len).max().unwrap_or(0);
        (0..len)
            .map(|i| {
                self.per_rank.iter().fold((0, 0), |(a, r), rank| {
                    let (ra, rr) = rank.get(i).or(rank.last()).copied().unwrap_or((0, 0));
                    (a.max(ra), r.max(rr))
                })
            })
            .collect()
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One line of a chart: legend label, colour, and `y` in MiB at each op index.
struct Line {
    label: String,
    color: RGBAColor,
    mib: Vec<f64>,
}

fn to_mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Draws one 640x260 SVG chart of `lines` over the op index; `None` when there is nothing
/// to draw or plotting failed (the page then says so instead of failing the whole report).
fn plot_lines(
    caption: &str,
    y_desc: &str,
    lines: &[Line],
    legend: SeriesLabelPosition,
) -> Option<String> {
    let max_x = lines.iter().map(|l| l.mib.len()).max().filter(|&n| n > 0)?;
    let max_y = lines
        .iter()
        .flat_map(|l| l.mib.iter().copied())
        .fold(to_mib(1), f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (640, 260)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0usize..max_x, 0f64..max_y * 1.05)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc("op (program order, max over ranks)")
            .y_desc(y_desc)
            .draw()
            .ok()?;
        for line in lines {
            let color = line.color;
            chart
                .draw_series(LineSeries::new(
                    line.mib.iter().copied().enumerate(),
                    color.stroke_width(if lines.len() > 2 { 2 } else { 1 }),
                ))
                .ok()?
                .label(line.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        chart
            .configure_series_labels()
            .position(legend)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

/// One run's chart: reserved and allocated bytes.
fn plot(series: &MemorySeries) -> Option<String> {
    let points = series.max_over_ranks();
    let line = |label: &str, color: RGBColor, pick: fn(&(u64, u64)) -> u64| Line {
        label: label.to_owned(),
        color: color.to_rgba(),
        mib: points.iter().map(|p| to_mib(pick(p))).collect(),
    };
    plot_lines(
        &format!(
            "{} / {} / mode {}",
            series.schedule, series.backend, series.mode
        ),
        "MiB",
        &[
            line("reserved", BLUE, |p| p.1),
            line("allocated", RED, |p| p.0),
        ],
        SeriesLabelPosition::MiddleRight,
    )
}

/// The reserved bytes of every run of one schedule (one line per backend and mode) in one
/// chart, so the modes compare at a glance; `None` with fewer than two non-empty series.
fn plot_reserved_by_run(schedule: &str, series: &[&MemorySeries]) -> Option<String> {
    let lines: Vec<Line> = series
        .iter()
        .map(|s| (format!("{} mode {}", s.backend, s.mode), s.max_over_ranks()))
        .filter(|(_, p)| !p.is_empty())
        .enumerate()
        .map(|(i, (label, points))| Line {
            label,
            color: Palette99::pick(i).to_rgba(),
            mib: points.iter().map(|&(_, r)| to_mib(r)).collect(),
        })
        .collect();
    if lines.len() < 2 {
        return None;
    }
    plot_lines(
        &format!("{schedule}: reserved, every run"),
        "MiB reserved",
        &lines,
        SeriesLabelPosition::LowerRight,
    )
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

/// Renders the whole report as one self-contained HTML page; `artifacts` are the files of
/// `--snapshot-dir` / `--trace-dir`, linked from each run's row.
pub fn render_html(report: &Report, series: &[MemorySeries], artifacts: &[RunArtifacts]) -> String {
    let mut out = String::new();
    out.push_str("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>memreuse conformance report</title>\n");
    out.push_str("<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td{white-space:nowrap}td.l{text-align:left}.passed{color:#080}.failed,.error{color:#b00}.skipped{color:#888}.plots{display:flex;flex-wrap:wrap;gap:8px}</style>\n");
    out.push_str("</head><body>\n<h1>memreuse conformance report</h1>\n");
    let _ = writeln!(
        out,
        "<p>{} runs, tool version {}.</p>",
        report.runs.len(),
        escape(&report.tool_version)
    );
    let has_files = !artifacts.is_empty();
    if has_files {
        out.push_str("<p>Files per run and rank: <b>snapshot</b> opens in PyTorch's memory viewer (<code>python -m torch.cuda._memory_viz trace_plot FILE -o out.html</code>, or drop it on pytorch.org/memory_viz), <b>timeline</b> in ui.perfetto.dev or chrome://tracing, <b>metrics</b> is the Prometheus exposition after the last op.</p>\n");
    }
    let mut schedules: Vec<&str> = Vec::new();
    for r in &report.runs {
        if !schedules.contains(&r.schedule.as_str()) {
            schedules.push(&r.schedule);
        }
    }
    for name in schedules {
        let _ = writeln!(out, "<h2>{}</h2>", escape(name));
        out.push_str("<table><tr><th>backend</th><th>mode</th><th>peak reserved</th><th>peak allocated</th><th>live peak</th><th>reuse events</th><th>record_stream</th><th>erase_stream</th><th>shelf stashes</th><th>races (reuse/schedule)</th><th>digest</th><th>wall ms</th><th>status</th>");
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
            let detail = r
                .skip_reason
                .as_deref()
                .or(r.error.as_deref())
                .unwrap_or("");
            let _ = writeln!(
                out,
                "<tr><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=l><code>{}</code></td><td>{:.1}</td><td class=\"l {}\">{} {}</td>{}</tr>",
                escape(&r.backend),
                escape(&r.mode),
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
                escape(detail),
                if has_files {
                    let files = artifacts.iter().find(|a| {
                        a.schedule == r.schedule && a.backend == r.backend && a.mode == r.mode
                    });
                    format!("<td class=l>{}</td>", artifact_cell(files))
                } else {
                    String::new()
                },
            );
        }
        out.push_str("</table>\n<div class=plots>\n");
        let runs: Vec<&MemorySeries> = series.iter().filter(|s| s.schedule == name).collect();
        if let Some(svg) = plot_reserved_by_run(name, &runs) {
            out.push_str("<div>");
            out.push_str(&svg);
            out.push_str("</div>\n");
        }
        for s in runs {
            match plot(s) {
                Some(svg) => {
                    out.push_str("<div>");
                    out.push_str(&svg);
                    out.push_str("</div>\n");
                }
                None => {
                    let _ = writeln!(
                        out,
                        "<p>No memory series for {} mode {}.</p>",
                        escape(&s.backend),
                        escape(&s.mode)
                    );
                }
            }
        }
        out.push_str("</div>\n");
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::json::{RunRecord, RunStatus};

    #[test]
    fn max_over_ranks_pads_finished_ranks_with_their_last_value() {
        let s = MemorySeries {
            per_rank: vec![vec![(1, 10), (5, 10)], vec![(2, 20), (3, 20), (4, 30)]],
            ..MemorySeries::default()
        };
        assert_eq!(s.max_over_ranks(), vec![(2, 20), (5, 20), (5, 30)]);
    }

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
            per_rank: vec![vec![(0, 0), (1 << 20, 2 << 20), (0, 2 << 20)]],
        };
        let page = render_html(&report, &[series], &[]);
        assert!(page.contains("<h2>a&lt;b</h2>"));
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
                per_rank: vec![vec![(0, 2 << 20), (1 << 20, 4 << 20)]],
            });
        }
        let page = render_html(&report, &series, &[]);
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
        let page = render_html(&report, &[], &[files]);
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
}
