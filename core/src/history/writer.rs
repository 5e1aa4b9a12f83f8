//! Writes `memreuse.trace/1` (specified in `docs/trace-format.md`).

use std::io::{self, Write};

use super::TRACE_FORMAT;
use super::event::{AllocationHistory, HistoryEvent};

/// Writes the header and comments at creation, one line per event, and the `end` line at
/// [`TraceWriter::finish`] (a file without it reads back as possibly truncated).
///
/// It writes what it is given: build an [`AllocationHistory`] first when the events still
/// need checking.
pub struct TraceWriter<W: Write> {
    out: W,
    events: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header, then each comment as a `# ` line (a comment holding newlines
    /// becomes several lines).
    pub fn new(mut out: W, comments: &[String]) -> io::Result<Self> {
        writeln!(out, "{TRACE_FORMAT}")?;
        for comment in comments {
            for line in comment.lines() {
                writeln!(out, "# {line}")?;
            }
        }
        Ok(TraceWriter { out, events: 0 })
    }

    /// Writes one event line.
    pub fn write(&mut self, event: &HistoryEvent) -> io::Result<()> {
        let HistoryEvent {
            kind,
            id,
            size,
            stream,
            time_us,
        } = *event;
        let action = kind.as_str();
        match time_us {
            Some(t) => writeln!(self.out, "{action} {id} {size} {} {t}", stream.0)?,
            None => writeln!(self.out, "{action} {id} {size} {}", stream.0)?,
        }
        self.events += 1;
        Ok(())
    }

    /// Writes the `end` line, flushes and gives the output back.
    pub fn finish(mut self) -> io::Result<W> {
        writeln!(self.out, "end {}", self.events)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Writes a whole history, comments and `end` line included.
pub fn write_trace<W: Write>(out: W, history: &AllocationHistory) -> io::Result<W> {
    let mut writer = TraceWriter::new(out, history.comments())?;
    for event in history.events() {
        writer.write(event)?;
    }
    writer.finish()
}
