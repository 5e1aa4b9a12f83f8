//! Reads `memreuse.trace/1` (specified in `docs/trace-format.md`), one line at a time,
//! validating as it goes, so a bad line is reported with its number and nothing after it
//! is read.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use flate2::read::MultiGzDecoder;

use crate::ids::StreamId;

use super::TRACE_FORMAT;
use super::error::HistoryError;
use super::event::{AllocationHistory, EventKind, HistoryEvent};
use super::validate::Validator;

const ALLOC_SYNTAX: &str = "alloc ID SIZE STREAM [TIME_US]";
const FREE_SYNTAX: &str = "free ID SIZE STREAM [TIME_US]";
const END_SYNTAX: &str = "end EVENTS";

/// The first bytes of every gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Cuts what an error quotes from the file, so a binary or huge line stays readable.
fn quote(text: &str) -> String {
    text.chars().take(80).collect()
}

/// A streaming reader: yields each event once its line is read and checked.
///
/// After the first error it yields nothing more. Comments seen so far are in
/// [`TraceReader::comments`]; [`TraceReader::is_complete`] says whether the `end` line was
/// read.
pub struct TraceReader<R> {
    input: R,
    line: Vec<u8>,
    line_no: u64,
    events: u64,
    comments: Vec<String>,
    validator: Validator,
    ended: bool,
    failed: bool,
}

impl<R: BufRead> TraceReader<R> {
    /// Reads and checks the header line.
    pub fn new(input: R) -> Result<Self, HistoryError> {
        let mut reader = TraceReader {
            input,
            line: Vec::new(),
            line_no: 0,
            events: 0,
            comments: Vec::new(),
            validator: Validator::new("line"),
            ended: false,
            failed: false,
        };
        let Some(header) = reader.next_line()? else {
            return Err(HistoryError::Empty);
        };
        let header = header.trim();
        if header != TRACE_FORMAT {
            return Err(if header.starts_with("memreuse.trace/") {
                HistoryError::UnsupportedVersion {
                    found: quote(header),
                }
            } else {
                HistoryError::MissingHeader {
                    found: quote(header),
                }
            });
        }
        Ok(reader)
    }

    /// Comment lines read so far, without their `#` and one following space.
    pub fn comments(&self) -> &[String] {
        &self.comments
    }

    /// The line number of the last line read (after an event: that event's line).
    pub fn line_number(&self) -> u64 {
        self.line_no
    }

    /// True once the `end` line was read and its count matched.
    pub fn is_complete(&self) -> bool {
        self.ended
    }

    /// Reads a whole line into `self.line`; `None` at the end of the input.
    fn next_line(&mut self) -> Result<Option<&str>, HistoryError> {
        self.line.clear();
        if self.input.read_until(b'\n', &mut self.line)? == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        if self.line.pop() != Some(b'\n') {
            return Err(HistoryError::Truncated {
                entry: self.line_no,
            });
        }
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        match std::str::from_utf8(&self.line) {
            Ok(text) => Ok(Some(text)),
            Err(_) => Err(HistoryError::UnknownAction {
                entry: self.line_no,
                found: quote(&String::from_utf8_lossy(&self.line)),
            }),
        }
    }

    /// The next event, skipping blank and comment lines and handling `end`.
    fn read_event(&mut self) -> Result<Option<HistoryEvent>, HistoryError> {
        loop {
            let entry = self.line_no + 1;
            let ended = self.ended;
            let Some(text) = self.next_line()? else {
                return Ok(None);
            };
            let trimmed = text.trim();
            if trimmed.is_empty() {
                continue;
            }
            if ended {
                return Err(HistoryError::AfterEnd {
                    entry,
                    found: quote(trimmed),
                });
            }
            if let Some(comment) = trimmed.strip_prefix('#') {
                let comment = comment.strip_prefix(' ').unwrap_or(comment).to_owned();
                self.comments.push(comment);
                continue;
            }
            let mut fields = trimmed.split_ascii_whitespace();
            let action = fields.next().unwrap_or_default();
            let (kind, syntax) = match action {
                "alloc" => (EventKind::Alloc, ALLOC_SYNTAX),
                "free" => (EventKind::Free, FREE_SYNTAX),
                "end" => {
                    let declared = number(fields.next(), "EVENTS", END_SYNTAX, entry)?;
                    no_more(fields.next(), END_SYNTAX, entry)?;
                    if declared != self.events {
                        return Err(HistoryError::EndCountMismatch {
                            entry,
                            declared,
                            read: self.events,
                        });
                    }
                    self.ended = true;
                    continue;
                }
                other => {
                    return Err(HistoryError::UnknownAction {
                        entry,
                        found: quote(other),
                    });
                }
            };
            let id = number(fields.next(), "ID", syntax, entry)?;
            let size = number(fields.next(), "SIZE", syntax, entry)?;
            let stream = StreamId(number(fields.next(), "STREAM", syntax, entry)?);
            let time_us = match fields.next() {
                None => None,
                Some(field) => Some(number(Some(field), "TIME_US", syntax, entry)?),
            };
            no_more(fields.next(), syntax, entry)?;
            let event = HistoryEvent {
                kind,
                id,
                size,
                stream,
                time_us,
            };
            self.validator.check(&event, entry)?;
            self.events += 1;
            return Ok(Some(event));
        }
    }
}

/// Parses one numeric field.
fn number(
    field: Option<&str>,
    name: &'static str,
    expected: &'static str,
    entry: u64,
) -> Result<u64, HistoryError> {
    let Some(text) = field else {
        return Err(HistoryError::MissingField {
            entry,
            field: name,
            expected,
        });
    };
    // `u64::from_str` accepts a leading `+`; the format does not.
    if text.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(value) = text.parse() {
            return Ok(value);
        }
    }
    Err(HistoryError::BadNumber {
        entry,
        field: name,
        found: quote(text),
    })
}

/// Fails on a field past the line's last.
fn no_more(field: Option<&str>, expected: &'static str, entry: u64) -> Result<(), HistoryError> {
    match field {
        None => Ok(()),
        Some(found) => Err(HistoryError::ExtraField {
            entry,
            found: quote(found),
            expected,
        }),
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<HistoryEvent, HistoryError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.read_event() {
            Ok(event) => event.map(Ok),
            Err(error) => {
                self.failed = true;
                Some(Err(error))
            }
        }
    }
}

/// Reads a whole history from text.
pub fn read_trace<R: BufRead>(input: R) -> Result<AllocationHistory, HistoryError> {
    let mut reader = TraceReader::new(input)?;
    let mut events = Vec::new();
    for event in &mut reader {
        events.push(event?);
    }
    let complete = reader.is_complete();
    Ok(AllocationHistory::from_validated(
        reader.comments,
        events,
        complete,
    ))
}

/// Reads a history from a file, plain text or gzip-compressed (recognised by its first two
/// bytes, whatever the file is named).
pub fn read_trace_file(path: &Path) -> Result<AllocationHistory, HistoryError> {
    let mut file = BufReader::with_capacity(1 << 16, File::open(path)?);
    let gzip = file.fill_buf()?.starts_with(&GZIP_MAGIC);
    if gzip {
        let decoder = MultiGzDecoder::new(file);
        read_trace(BufReader::with_capacity(1 << 16, decoder))
    } else {
        read_trace(file)
    }
}
