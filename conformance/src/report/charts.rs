//! The SVG charts of the HTML report: memory over one run's ops, and overlays of the
//! reserved bytes of several runs of one schedule (every backend and mode, or every
//! allocator configuration of one backend and mode). Series are decimated to what a
//! 640-pixel chart can show (the maximum of each bucket, so peaks stay).

use plotters::prelude::*;

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
    /// `backend mode M`, and the configuration when the run had one: a legend label.
    pub fn label(&self) -> String {
        match &self.alloc_conf {
            None => format!("{} mode {}", self.backend, self.mode),
            Some(c) => format!("{} mode {} {c}", self.backend, self.mode),
        }
    }

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
pub(super) fn decimate(points: &[(u64, u64)]) -> (Vec<(u64, u64)>, usize) {
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
pub(super) fn is_flat(points: &[(u64, u64)]) -> bool {
    points.windows(2).all(|w| w[0].1 == w[1].1)
}

/// One line of a chart: legend label, colour, and `y` in MiB at each op index.
struct Line {
    label: String,
    color: RGBAColor,
    mib: Vec<f64>,
}

pub(super) fn to_mib(bytes: u64) -> f64 {
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
pub(super) fn plot(series: &MemorySeries, max_y: f64) -> Option<String> {
    let (points, stride) = decimate(&series.max_over_ranks());
    let line = |label: &str, color: RGBColor, pick: fn(&(u64, u64)) -> u64| Line {
        label: label.to_owned(),
        color: color.to_rgba(),
        mib: points.iter().map(|p| to_mib(pick(p))).collect(),
    };
    plot_lines(
        &match &series.alloc_conf {
            None => format!(
                "{} / {} / mode {}",
                series.schedule, series.backend, series.mode
            ),
            Some(c) => format!(
                "{} / {} / mode {} / {c}",
                series.schedule, series.backend, series.mode
            ),
        },
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
pub(super) fn plot_reserved_by_run(
    schedule: &str,
    series: &[&MemorySeries],
    max_y: f64,
) -> Option<String> {
    let labelled: Vec<(String, &MemorySeries)> = series.iter().map(|s| (s.label(), *s)).collect();
    plot_reserved_overlay(
        &format!("{schedule}: reserved, every run"),
        &labelled,
        max_y,
    )
}

/// The reserved bytes of several labelled runs in one chart; `None` with fewer than two
/// non-empty series.
pub(super) fn plot_reserved_overlay(
    caption: &str,
    series: &[(String, &MemorySeries)],
    max_y: f64,
) -> Option<String> {
    let mut stride = 1;
    let lines: Vec<Line> = series
        .iter()
        .map(|(label, s)| {
            let (points, st) = decimate(&s.max_over_ranks());
            stride = stride.max(st);
            (label.clone(), points)
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
        caption,
        "MiB reserved",
        &lines,
        SeriesLabelPosition::LowerRight,
        (max_y, stride),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_over_ranks_pads_finished_ranks_with_their_last_value() {
        let s = MemorySeries {
            per_rank: vec![vec![(1, 10), (5, 10)], vec![(2, 20), (3, 20), (4, 30)]],
            ..MemorySeries::default()
        };
        assert_eq!(s.max_over_ranks(), vec![(2, 20), (5, 20), (5, 30)]);
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
}
