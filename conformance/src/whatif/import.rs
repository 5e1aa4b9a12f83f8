//! Opens a history file, whatever its format: `memreuse.trace/1`, a PyTorch snapshot
//! pickle, or a memreuse snapshot (pickle or JSON), each optionally gzip-compressed
//! (recognised by content, not by name). The file is streamed through the decoders, never
//! read whole, and every [`ImportLimits`] bound holds (`docs/whatif-format.md`, Limits).

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::rc::Rc;

use flate2::bufread::MultiGzDecoder;
use memreuse_core::history::TraceReader;

use super::error::ImportError;
use super::history::ReplayHistory;
use super::limits::{Hit, ImportLimits, Limit};
use super::snapshot_import::import_snapshot;

/// Reads `path` and builds its history within the default [`ImportLimits`]; `device` picks
/// a snapshot's device (`None`: the first with trace entries; ignored for traces, which
/// hold one device).
pub fn import_file(path: &Path, device: Option<usize>) -> Result<ReplayHistory, ImportError> {
    import_file_with(path, device, &ImportLimits::default())
}

/// [`import_file`] within `limits`.
pub fn import_file_with(
    path: &Path,
    device: Option<usize>,
    limits: &ImportLimits,
) -> Result<ReplayHistory, ImportError> {
    let name = path.display().to_string();
    let io = |source| ImportError::Io {
        path: name.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // A regular file's size is known before anything is read; a device or FIFO
    // (`/dev/zero`) is bounded while it is read.
    if let Ok(meta) = file.metadata() {
        if meta.is_file() && meta.len() > limits.file_bytes {
            return Err(exceeded(&name, Hit::new(Limit::FileBytes, limits)));
        }
    }
    import_reader(&name, file, device, limits)
}

/// Builds the history of `bytes` (a file's content, optionally gzip-compressed) within the
/// default [`ImportLimits`].
pub fn import_bytes(
    name: &str,
    bytes: &[u8],
    device: Option<usize>,
) -> Result<ReplayHistory, ImportError> {
    import_reader(name, bytes, device, &ImportLimits::default())
}

/// Builds the history of what `input` yields (optionally gzip-compressed) within `limits`.
pub fn import_reader(
    name: &str,
    input: impl Read,
    device: Option<usize>,
    limits: &ImportLimits,
) -> Result<ReplayHistory, ImportError> {
    let hit = Rc::new(Cell::new(None));
    let stored = Bounded::new(input, Hit::new(Limit::FileBytes, limits), &hit);
    let mut stored = BufReader::with_capacity(1 << 16, stored);
    let gzip = peek(&mut stored)
        .map_err(|e| io_or_limit(name, e, &hit))?
        .starts_with(&[0x1f, 0x8b]);
    let result = if gzip {
        let plain = Bounded::new(
            MultiGzDecoder::new(stored),
            Hit::new(Limit::DecompressedBytes, limits),
            &hit,
        );
        dispatch(
            name,
            &mut BufReader::with_capacity(1 << 16, plain),
            device,
            limits,
        )
    } else {
        dispatch(name, &mut stored, device, limits)
    };
    // A bound hit while reading surfaces inside the decoders as a read error: name it.
    match (result, hit.get()) {
        (Err(_), Some(h)) => Err(exceeded(name, h)),
        (result, _) => result,
    }
}

fn exceeded(name: &str, hit: Hit) -> ImportError {
    ImportError::LimitExceeded {
        path: name.to_owned(),
        limit: hit.limit,
        max: hit.max,
    }
}

fn io_or_limit(name: &str, source: std::io::Error, hit: &Cell<Option<Hit>>) -> ImportError {
    match hit.get() {
        Some(h) => exceeded(name, h),
        None => ImportError::Io {
            path: name.to_owned(),
            source,
        },
    }
}

/// The first bytes `input` holds (at least 16 unless it is shorter), not consumed.
fn peek(input: &mut dyn BufRead) -> std::io::Result<&[u8]> {
    input.fill_buf()
}

fn dispatch(
    name: &str,
    input: &mut dyn BufRead,
    device: Option<usize>,
    limits: &ImportLimits,
) -> Result<ReplayHistory, ImportError> {
    let io = |source| ImportError::Io {
        path: name.to_owned(),
        source,
    };
    let start = input.fill_buf().map_err(io)?;
    if start.starts_with(b"memreuse.trace/") {
        return import_trace(name, input, limits);
    }
    // Pickle protocol 2 and later start with PROTO (0x80).
    if start.first() == Some(&0x80) {
        return import_snapshot(name, input, false, device, limits);
    }
    if start.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        return import_snapshot(name, input, true, device, limits);
    }
    let start: String = start
        .iter()
        .take(16)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    Err(ImportError::UnknownFormat {
        path: name.to_owned(),
        start,
    })
}

fn import_trace(
    name: &str,
    input: &mut dyn BufRead,
    limits: &ImportLimits,
) -> Result<ReplayHistory, ImportError> {
    let err = |source| ImportError::Trace {
        path: name.to_owned(),
        source,
    };
    let mut reader = TraceReader::new(input).map_err(err)?;
    let mut events = Vec::new();
    while let Some(event) = reader.next() {
        if events.len() as u64 >= limits.trace_entries {
            return Err(exceeded(name, Hit::new(Limit::TraceEntries, limits)));
        }
        events.push((event.map_err(err)?, reader.line_number()));
    }
    Ok(ReplayHistory::from_trace(
        &events,
        reader.comments(),
        reader.is_complete(),
    ))
}

/// A reader that yields at most `hit.max` bytes and records `hit` when there is more.
struct Bounded<R> {
    inner: R,
    left: u64,
    limit: Hit,
    hit: Rc<Cell<Option<Hit>>>,
}

impl<R> Bounded<R> {
    fn new(inner: R, limit: Hit, hit: &Rc<Cell<Option<Hit>>>) -> Self {
        Bounded {
            inner,
            left: limit.max,
            limit,
            hit: Rc::clone(hit),
        }
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // At the bound: anything more is over it.
            let mut one = [0u8; 1];
            if self.inner.read(&mut one)? == 0 {
                return Ok(0);
            }
            self.hit.set(Some(self.limit));
            return Err(std::io::Error::other(format!(
                "more than {} bytes (the `{}` limit)",
                self.limit.max,
                self.limit.limit.name()
            )));
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}
