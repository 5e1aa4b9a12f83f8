//! The HTML report: the verdict, the run's metadata and a table of contents at the top;
//! then per schedule (each an anchor) the comparison table, one SVG plot overlaying the
//! reserved bytes of every (backend, mode) run, and a plot per run of reserved and
//! allocated bytes over the schedule's ops. All plots of a schedule share one y-scale;
//! runs whose memory never changes get a line of text instead of a flat chart; series are
//! decimated to what a 640-pixel chart can show (the maximum of each bucket, so peaks stay).

use std::fmt::Write as _;

use plotters::prelude::*;

use super::human_bytes;
use super::json::Report;
use super::meta::RunMeta;
use super::summary::{headline, negative_control, tallies};
use crate::replay::RunArtifacts;

/// Points per chart line at most: about one per horizontal pixel of the plot area.
const MAX_POINTS: usize = 560;

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
    /// The run's allocator configuration (`None`: the default).
    pub alloc_conf: Option<String>,
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

/// `points` cut to at most [`MAX_POINTS`] buckets, each the maximum of its points (a peak
/// is never lost); `stride` is how many ops one output point covers.
fn decimate(points: &[(u64, u64)]) -> (Vec<(u64, u64)>, usize) {
    let stride = points.len().div_ceil(MAX_POINTS).max(1);
    let out = points
        .chunks(stride)
        .map(|c| {
            c.iter()
                .fold((0, 0), |(a, r), &(ca, cr)| (a.max(ca), r.max(cr)))
        })
        .collect();
    (out, stride)
}

/// True when reserved bytes never change: the chart would be one flat line with the
/// allocated bytes below it, which a sentence says as well.
fn is_flat(points: &[(u64, u64)]) -> bool {
    points.windows(2).all(|w| w[0].1 == w[1].1)
}

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
    scale: (f64, usize),
) -> Option<String> {
    // plotters can panic on odd ranges (an overflow in its tick computation): a chart
    // that cannot be drawn must not end the run and lose its report.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        draw_lines(caption, y_desc, lines, legend, scale)
    }))
    .ok()
    .flatten()
}

fn draw_lines(
    caption: &str,
    y_desc: &str,
    lines: &[Line],
    legend: SeriesLabelPosition,
    (max_y, stride): (f64, usize),
) -> Option<String> {
    let max_x = lines.iter().map(|l| l.mib.len()).max().filter(|&n| n > 0)?;
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
        let x_desc = if stride > 1 {
            format!("op / {stride} (program order, max over ranks and ops)")
        } else {
            "op (program order, max over ranks)".to_owned()
        };
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            // No light grid: it was most of each SVG's bytes and says nothing.
            .disable_x_mesh()
            .disable_y_mesh()
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

/// One run's chart: reserved and allocated bytes, on the schedule's y-scale `max_y` (MiB).
fn plot(series: &MemorySeries, max_y: f64) -> Option<String> {
    let (points, stride) = decimate(&series.max_over_ranks());
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
        (max_y, stride),
    )
}

/// The reserved bytes of every run of one schedule (one line per backend and mode) in one
/// chart, so the modes compare at a glance; `None` with fewer than two non-empty series.
fn plot_reserved_by_run(schedule: &str, series: &[&MemorySeries], max_y: f64) -> Option<String> {
    let mut stride = 1;
    let lines: Vec<Line> = series
        .iter()
        .map(|s| {
            let (points, st) = decimate(&s.max_over_ranks());
            stride = stride.max(st);
            (format!("{} mode {}", s.backend, s.mode), points)
        })
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
        (max_y, stride),
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

/// The verdict block: headline, counts per (backend, mode), negative-control tally.
fn verdict_block(out: &mut String, report: &Report) {
    let head = headline(report);
    let class = if head.starts_with("PASS") {
        "passed"
    } else {
        "failed"
    };
    let _ = writeln!(out, "<p class=\"verdict {class}\">{}</p>", escape(&head));
    out.push_str("<table><tr><th>backend</th><th>mode</th><th>passed</th><th>failed</th><th>error</th><th>skipped</th></tr>\n");
    for t in tallies(report) {
        let _ = writeln!(
            out,
            "<tr><td class=l>{}</td><td>{}</td><td class=passed>{}</td><td class=failed>{}</td><td class=error>{}</td><td class=skipped>{}</td></tr>",
            escape(&t.backend),
            escape(&t.mode),
            t.passed,
            t.failed,
            t.error,
            t.skipped
        );
    }
    out.push_str("</table>\n");
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
                "<tr><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=l><code>{}</code></td><td>{:.1}</td><td class=\"why {}\">{} {}</td>{}</tr>",
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
        out.push_str("</table>\n<div class=plots>\n");
        let runs: Vec<&MemorySeries> = series.iter().filter(|s| s.schedule == name).collect();
        // One y-scale for every chart of the schedule, so modes compare by eye.
        let max_y = runs
            .iter()
            .flat_map(|s| s.per_rank.iter().flatten())
            .map(|&(a, r)| to_mib(a.max(r)))
            .fold(to_mib(1), f64::max);
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
        if !flat.is_empty() {
            let names: Vec<String> = flat
                .iter()
                .map(|s| {
                    let points = s.max_over_ranks();
                    let r = points.first().map_or(0, |p| p.1);
                    let a = points.iter().map(|p| p.0).max().unwrap_or(0);
                    format!(
                        "{} mode {} ({} reserved, peak {} allocated)",
                        escape(&s.backend),
                        escape(&s.mode),
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
    fn decimation_keeps_peaks_and_fits_the_chart() {
        let points: Vec<(u64, u64)> = (0..14_000u64).map(|i| (i % 7, 10)).collect();
        let mut with_peak = points.clone();
        with_peak[9_001] = (99, 500);
        let (out, stride) = decimate(&with_peak);
        assert!(out.len() <= MAX_POINTS, "{}", out.len());
        assert_eq!(stride, 14_000usize.div_ceil(MAX_POINTS));
        assert_eq!(
            out.iter().map(|p| p.1).max(),
            Some(500),
            "the peak survives"
        );
        assert_eq!(
            decimate(&points[..10]).0,
            points[..10].to_vec(),
            "short series unchanged"
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
}
