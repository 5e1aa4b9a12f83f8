//! Opens a history file, whatever its format: `memreuse.trace/1`, a PyTorch snapshot
//! pickle, or a memreuse snapshot (pickle or JSON), each optionally gzip-compressed
//! (recognised by content, not by name).

use std::io::Read;
use std::path::Path;

use flate2::read::MultiGzDecoder;
use memreuse_core::history::{TRACE_FORMAT, TraceReader};

use super::error::ImportError;
use super::history::ReplayHistory;
use super::snapshot_import::import_snapshot;

/// Reads `path` and builds its history; `device` picks a snapshot's device (`None`: the
/// first with trace entries; ignored for traces, which hold one device).
pub fn import_file(path: &Path, device: Option<usize>) -> Result<ReplayHistory, ImportError> {
    let name = path.display().to_string();
    let io = |source| ImportError::Io {
        path: name.clone(),
        source,
    };
    let mut bytes = std::fs::read(path).map_err(io)?;
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut plain = Vec::new();
        MultiGzDecoder::new(bytes.as_slice())
            .read_to_end(&mut plain)
            .map_err(io)?;
        bytes = plain;
    }
    import_bytes(&name, &bytes, device)
}

/// Builds the history of a file's (decompressed) content.
pub fn import_bytes(
    name: &str,
    bytes: &[u8],
    device: Option<usize>,
) -> Result<ReplayHistory, ImportError> {
    if bytes.starts_with(b"memreuse.trace/") {
        return import_trace(name, bytes);
    }
    // Pickle protocol 2 and later start with PROTO (0x80).
    if bytes.first() == Some(&0x80) {
        return import_snapshot(name, bytes, false, device);
    }
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        return import_snapshot(name, bytes, true, device);
    }
    let start: String = bytes
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

fn import_trace(name: &str, bytes: &[u8]) -> Result<ReplayHistory, ImportError> {
    let err = |source| ImportError::Trace {
        path: name.to_owned(),
        source,
    };
    let mut reader = TraceReader::new(bytes).map_err(err)?;
    let mut events = Vec::new();
    while let Some(event) = reader.next() {
        events.push((event.map_err(err)?, reader.line_number()));
    }
    debug_assert!(bytes.starts_with(TRACE_FORMAT.as_bytes()) || events.is_empty());
    Ok(ReplayHistory::from_trace(
        &events,
        reader.comments(),
        reader.is_complete(),
    ))
}
