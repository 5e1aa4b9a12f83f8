//! The HTML report's comparison of allocator configurations: runs of one schedule on one
//! backend and mode that differ only in `--alloc-conf`, side by side (peak reserved, peak
//! allocated, their ratio, reserved over the schedule's live peak, reserved against the
//! first configuration), and one chart per (backend, mode) with one line of reserved bytes
//! per configuration.

use std::fmt::Write as _;

use super::charts::{MemorySeries, plot_reserved_overlay};
use super::human_bytes;
use super::json::{Report, RunRecord, RunStatus};

/// What the page calls the default configuration (a run without `alloc_conf`).
pub(super) const DEFAULT_CONF_LABEL: &str = "default";

/// A run's configuration as the page shows it.
pub(super) fn conf_label(conf: Option<&str>) -> &str {
    conf.unwrap_or(DEFAULT_CONF_LABEL)
}

/// `a / b` to two decimals, or `-` when `b` is zero (a skipped or failed run).
fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".to_owned()
    } else {
        format!("{:.2}", a as f64 / b as f64)
    }
}

/// The runs of `schedule`, grouped by (backend, mode) in order of first appearance, keeping
/// only groups with at least two configurations.
fn groups<'r>(report: &'r Report, schedule: &str) -> Vec<Vec<&'r RunRecord>> {
    let mut out: Vec<Vec<&RunRecord>> = Vec::new();
    for r in report.runs.iter().filter(|r| r.schedule == schedule) {
        match out
            .iter_mut()
            .find(|g| g[0].backend == r.backend && g[0].mode == r.mode)
        {
            Some(g) => g.push(r),
            None => out.push(vec![r]),
        }
    }
    out.retain(|g| g.iter().any(|r| r.alloc_conf != g[0].alloc_conf));
    out
}

/// The comparison block of one schedule, or an empty string when no (backend, mode) of it
/// ran under two configurations. `escape` is the page's HTML escaping; `max_y` the
/// schedule's y-scale (MiB).
pub(super) fn config_block(
    schedule: &str,
    report: &Report,
    series: &[MemorySeries],
    max_y: f64,
    escape: fn(&str) -> String,
) -> String {
    let groups = groups(report, schedule);
    if groups.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h3>Allocator configurations</h3>\n<table class=confcmp><tr><th>backend</th><th>mode</th><th>configuration</th><th>peak reserved</th><th>peak allocated</th><th>reserved / allocated</th><th>reserved / live peak</th><th>reserved vs first</th><th>status</th></tr>\n",
    );
    for g in &groups {
        let first = g[0].peak_reserved_bytes;
        for r in g {
            let passed = r.status == RunStatus::Passed;
            let _ = writeln!(
                out,
                "<tr><td class=l>{}</td><td>{}</td><td class=l><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class={}>{}</td></tr>",
                escape(&r.backend),
                escape(&r.mode),
                escape(conf_label(r.alloc_conf.as_deref())),
                human_bytes(r.peak_reserved_bytes),
                human_bytes(r.peak_allocated_bytes),
                ratio(r.peak_reserved_bytes, r.peak_allocated_bytes),
                ratio(r.peak_reserved_bytes, r.live_peak_bytes),
                if passed {
                    ratio(r.peak_reserved_bytes, first)
                } else {
                    "-".to_owned()
                },
                r.status.as_str(),
                r.status.as_str()
            );
        }
    }
    out.push_str("</table>\n<div class=plots>\n");
    for g in &groups {
        let lines: Vec<(String, &MemorySeries)> = g
            .iter()
            .filter_map(|r| {
                series
                    .iter()
                    .find(|s| {
                        s.schedule == r.schedule
                            && s.backend == r.backend
                            && s.mode == r.mode
                            && s.alloc_conf == r.alloc_conf
                    })
                    .map(|s| (conf_label(s.alloc_conf.as_deref()).to_owned(), s))
            })
            .collect();
        let caption = format!(
            "{schedule} / {} / mode {}: reserved by configuration",
            g[0].backend, g[0].mode
        );
        if let Some(svg) = plot_reserved_overlay(&caption, &lines, max_y) {
            out.push_str("<div class=confplot>");
            out.push_str(&svg);
            out.push_str("</div>\n");
        }
    }
    out.push_str("</div>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::RunMeta;
    use crate::report::render_html;

    fn run(mode: &str, conf: Option<&str>, reserved: u64) -> (RunRecord, MemorySeries) {
        let mut r = RunRecord::empty("s", "mock", mode, 1, 1);
        r.status = RunStatus::Passed;
        r.alloc_conf = conf.map(str::to_owned);
        r.peak_reserved_bytes = reserved;
        r.peak_allocated_bytes = 4 << 20;
        r.live_peak_bytes = 4 << 20;
        let s = MemorySeries {
            schedule: "s".into(),
            backend: "mock".into(),
            mode: mode.into(),
            alloc_conf: r.alloc_conf.clone(),
            per_rank: vec![vec![(0, 2 << 20), (4 << 20, reserved)]],
        };
        (r, s)
    }

    fn page(runs: Vec<(RunRecord, MemorySeries)>) -> String {
        let mut report = Report::new();
        let mut series = Vec::new();
        for (r, s) in runs {
            report.runs.push(r);
            series.push(s);
        }
        render_html(&report, &series, &[], &RunMeta::default())
    }

    #[test]
    fn runs_that_differ_only_in_configuration_are_compared_side_by_side() {
        let exp = Some("expandable_segments:True");
        let page = page(vec![
            run("0", None, 8 << 20),
            run("1", None, 8 << 20),
            run("0", exp, 5 << 20),
            run("1", exp, 6 << 20),
        ]);
        assert_eq!(page.matches("<table class=confcmp>").count(), 1);
        let block = &page[page.find("<table class=confcmp>").unwrap()..];
        let block = &block[..block.find("</table>").unwrap()];
        // Two rows per (backend, mode), default first, in the order the runs came.
        assert_eq!(block.matches("<tr><td class=l>mock</td>").count(), 4);
        let default_0 = block
            .find("<td>0</td><td class=l><code>default</code>")
            .unwrap();
        let exp_0 = block
            .find("<td>0</td><td class=l><code>expandable_segments:True</code>")
            .unwrap();
        assert!(default_0 < exp_0);
        // 8 MiB reserved for 4 MiB allocated and live: 2.00 and 2.00; 5 MiB: 1.25, and
        // 0.62 of the first configuration's 8 MiB.
        assert!(
            block.contains(
                "<td>8.0 MiB</td><td>4.0 MiB</td><td>2.00</td><td>2.00</td><td>1.00</td>"
            ),
            "{block}"
        );
        assert!(
            block.contains(
                "<td>5.0 MiB</td><td>4.0 MiB</td><td>1.25</td><td>1.25</td><td>0.62</td>"
            ),
            "{block}"
        );
        // One overlay per (backend, mode), one legend line per configuration.
        assert_eq!(page.matches("<div class=confplot>").count(), 2);
        assert!(page.contains("s / mock / mode 0: reserved by configuration"));
        assert!(page.contains("s / mock / mode 1: reserved by configuration"));
        let plots = &page[page.find("<div class=confplot>").unwrap()..];
        let first_plot = &plots[..plots.find("</div>").unwrap()];
        assert!(
            first_plot.contains(">\ndefault\n</text>")
                && first_plot.contains(">\nexpandable_segments:True\n</text>"),
            "one legend entry per configuration"
        );
        // The per-schedule table names the configuration of every run.
        assert!(page.contains("<th>configuration</th>"));
    }

    #[test]
    fn one_configuration_gets_no_comparison_block() {
        let page = page(vec![run("0", None, 8 << 20), run("1", None, 6 << 20)]);
        assert!(!page.contains("confcmp") && !page.contains("confplot"));
        assert!(
            !page.contains("<th>configuration</th>"),
            "no column without configurations"
        );
        let page = super::tests::page(vec![
            run("0", Some("max_split_size_mb:20"), 8 << 20),
            run("1", Some("max_split_size_mb:20"), 6 << 20),
        ]);
        assert!(
            !page.contains("confcmp"),
            "one configuration, even a named one"
        );
    }

    #[test]
    fn ratios_of_an_empty_run_are_dashes() {
        assert_eq!(ratio(5, 0), "-");
        assert_eq!(ratio(3, 2), "1.50");
    }
}
