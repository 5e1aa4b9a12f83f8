//! Standard output for the command line's reports and tables, written so that a reader
//! going away (`validate ... | head -1`) ends the command normally instead of panicking.

use std::io::Write;
use std::process::ExitCode;

/// Standard output that survives its reader going away: `println!` panics on a broken
/// pipe (exit 101); this stops writing instead, and the command ends normally with its own
/// status.
pub(crate) struct Stdout {
    failed: Option<std::io::Error>,
    /// Writes go to standard error instead (standard output carries a report file).
    to_stderr: bool,
}

impl Stdout {
    /// Standard output, nothing written yet.
    pub(crate) fn new() -> Self {
        Self {
            failed: None,
            to_stderr: false,
        }
    }

    /// Standard error, for a command whose standard output carries a file (`run --json -`),
    /// with the same behaviour on a reader going away.
    pub(crate) fn stderr() -> Self {
        Self {
            failed: None,
            to_stderr: true,
        }
    }

    /// Writes one line; after a failed write, nothing more is written.
    pub(crate) fn line(&mut self, text: &str) {
        self.text(&format!("{text}\n"));
    }

    /// Writes `text` as it is; after a failed write, nothing more is written.
    pub(crate) fn text(&mut self, text: &str) {
        if self.failed.is_none() {
            let written = if self.to_stderr {
                let mut lock = std::io::stderr().lock();
                lock.write_all(text.as_bytes()).and_then(|()| lock.flush())
            } else {
                let mut lock = std::io::stdout().lock();
                lock.write_all(text.as_bytes()).and_then(|()| lock.flush())
            };
            if let Err(e) = written {
                self.failed = Some(e);
            }
        }
    }

    /// `status`, or exit 1 when stdout failed other than by its reader closing it.
    pub(crate) fn status(self, status: ExitCode) -> ExitCode {
        match self.failed {
            Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                eprintln!("memreuse-conformance: cannot write to standard output: {e}");
                ExitCode::FAILURE
            }
            _ => status,
        }
    }
}
