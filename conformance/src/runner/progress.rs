//! How `run` shows progress: a bar on a terminal, one line per finished run when stderr is
//! piped (CI logs), nothing with `--quiet`.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report::RunRecord;

/// The progress display of one `run`.
pub(super) struct Progress {
    bar: ProgressBar,
    /// Piped (CI logs): one line per finished run instead of a bar nobody sees.
    lines: bool,
    total: u64,
}

impl Progress {
    /// A display for `total` runs: a bar when stderr is a terminal, lines when it is not,
    /// neither when `quiet`.
    pub(super) fn start(quiet: bool, total: u64) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = if quiet || !terminal {
            ProgressBar::hidden()
        } else {
            let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
            {
                b.set_style(style);
            }
            // Redraws on its own clock, so the elapsed time moves during one long run.
            b.enable_steady_tick(Duration::from_millis(250));
            b
        };
        Progress {
            bar,
            lines: !quiet && !terminal,
            total,
        }
    }

    /// Names the run that starts now (`label`: schedule, backend, mode, configuration).
    pub(super) fn running(&self, label: &str) {
        self.bar.set_message(label.to_owned());
    }

    /// The line of a finished run, the `number`th (from 1), when stderr is piped.
    pub(super) fn finished(&self, number: usize, label: &str, record: &RunRecord) {
        if self.lines {
            eprintln!(
                "[{number}/{}] {label}: {} ({:.1} ms)",
                self.total,
                record.status.as_str(),
                record.wall_ms
            );
        }
    }

    /// Moves the bar on by one run.
    pub(super) fn advance(&self) {
        self.bar.inc(1);
    }

    /// Clears the bar before the tables print.
    pub(super) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
