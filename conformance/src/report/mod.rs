//! Reports: the JSON report (`memreuse.report/1`, docs/report-format.md), the terminal
//! comparison table, the HTML page with SVG plots of memory over time, and the Markdown
//! summary.

mod charts;
mod compare;
mod html;
mod json;
mod meta;
mod summary;
mod table;
mod verdict;

pub use html::{MemorySeries, render_html};
pub use json::{DECLARED_OOM, REPORT_FORMAT, RaceCounts, Report, RunRecord, RunStatus, Verdict};
pub use meta::RunMeta;
pub use summary::{Tally, headline, render_markdown, tallies};
pub use table::render_table;
pub use verdict::{Judgement, Outcome, SkipNote, judge, skip_note_number, skip_notes};

/// Bytes in a human unit (binary prefixes), for tables and plots.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::human_bytes;

    #[test]
    fn human_bytes_uses_binary_prefixes() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(20 * 1024 * 1024), "20.0 MiB");
    }
}
