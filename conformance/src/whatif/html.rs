//! The `--report DIR` page: the what-if table and one SVG chart with every replayed
//! setting's reserved bytes over the history, overlaid.

use std::fmt::Write as _;

use plotters::prelude::*;

use crate::report::human_bytes;

use super::output::{Outcome, SettingOutcome, display_conf};

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The overlay chart; `None` when no setting was replayed or plotting failed.
fn overlay(outcomes: &[SettingOutcome], live_peak: u64) -> Option<String> {
    let series: Vec<(&str, &[(u64, u64)])> = outcomes
        .iter()
        .filter_map(|o| match &o.outcome {
            Outcome::Replayed(f, _) if !f.reserved_series.is_empty() => {
                Some((display_conf(&o.alloc_conf), f.reserved_series.as_slice()))
            }
            _ => None,
        })
        .collect();
    let max_x = series
        .iter()
        .filter_map(|(_, s)| s.last().map(|p| p.0 + 1))
        .max()?;
    let max_y = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| mib(p.1)))
        .fold(mib(live_peak).max(1.0), f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 420)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .caption("reserved memory per setting", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(70)
            .build_cartesian_2d(0u64..max_x, 0f64..max_y * 1.05)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc("history entry")
            .y_desc("MiB reserved")
            .draw()
            .ok()?;
        for (i, (label, points)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    points.iter().map(|&(x, y)| (x, mib(y))),
                    color.stroke_width(2),
                ))
                .ok()?
                .label(*label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        let live = mib(live_peak);
        chart
            .draw_series(LineSeries::new(
                [(0, live), (max_x, live)],
                BLACK.mix(0.5).stroke_width(1),
            ))
            .ok()?
            .label("live peak (lower bound)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.mix(0.5)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.85))
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

/// The whole page (self-contained: the SVG is inline).
/// `summary` are the lines the terminal prints around the table (history and device, live
/// peak, whether anything can fit, the recommendation); the table carries each setting's
/// out-of-memory reason.
pub fn render_page(
    file: &str,
    summary: &[String],
    table: &str,
    outcomes: &[SettingOutcome],
    live_peak: u64,
) -> String {
    let mut page = String::new();
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>memreuse what-if: {f}</title>\
         <style>body{{font-family:sans-serif;margin:2em}}pre{{background:#f6f6f6;padding:1em}}</style>\
         </head><body>\n<h1>What-if: {f}</h1>\n<p>Live peak (what the program held at once, \
         the lower bound for any allocator): {live}.</p>\n<pre>{t}</pre>\n",
        f = escape(file),
        live = human_bytes(live_peak),
        t = escape(table),
    );
    page.push_str("<ul class=\"summary\">\n");
    for line in summary {
        let _ = writeln!(page, "<li>{}</li>", escape(line));
    }
    page.push_str("</ul>\n");
    match overlay(outcomes, live_peak) {
        Some(svg) => page.push_str(&svg),
        None => page.push_str("<p>(no setting was replayed: nothing to plot)</p>"),
    }
    page.push_str("\n</body></html>\n");
    page
}
