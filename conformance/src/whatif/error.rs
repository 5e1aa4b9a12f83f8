//! Why a history file could not be imported. Every variant names the file's entry or field
//! and what is valid.

use memreuse_core::history::HistoryError;
use thiserror::Error;

use super::limits::Limit;

/// An import failure.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The file could not be read (or its gzip stream is cut or corrupt).
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The content is none of the formats `whatif` reads.
    #[error(
        "{path}: not a history `whatif` reads (starts with {start:?}): expected a memreuse.trace/1 \
         file, a PyTorch snapshot pickle (torch.cuda.memory._dump_snapshot) or a memreuse \
         snapshot (pickle or JSON), optionally gzip-compressed"
    )]
    UnknownFormat {
        /// The file.
        path: String,
        /// Its first bytes, escaped.
        start: String,
    },
    /// A `memreuse.trace/1` file is malformed.
    #[error("{path}: {source}")]
    Trace {
        /// The file.
        path: String,
        /// What is wrong, with the line.
        source: HistoryError,
    },
    /// The pickle or JSON could not be decoded (truncated, corrupt).
    #[error("{path}: cannot decode the {what}: {message} (truncated or corrupt?)")]
    Decode {
        /// The file.
        path: String,
        /// `pickle` or `JSON`.
        what: &'static str,
        /// The decoder's message.
        message: String,
    },
    /// The decoded value does not have a snapshot's shape.
    #[error("{path}: {at}: {message}")]
    Shape {
        /// The file.
        path: String,
        /// Where: `device_traces[0][17]`, `segments[3].blocks[2]`, ...
        at: String,
        /// What is wrong and what is valid.
        message: String,
    },
    /// The snapshot holds no trace for the device asked for.
    #[error(
        "{path}: no trace entries for device {device} (devices with entries: {devices:?}); record \
         with torch.cuda.memory._record_memory_history() before _dump_snapshot"
    )]
    NoTrace {
        /// The file.
        path: String,
        /// The device asked for (or the first one looked at).
        device: usize,
        /// Devices that have entries.
        devices: Vec<usize>,
    },
    /// The file runs into one of the importer's bounds (`ImportLimits`,
    /// `docs/whatif-format.md` "Limits"): it is hostile, corrupt or larger than any real
    /// snapshot; nothing is replayed.
    #[error(
        "{path}: exceeds the importer's `{}` limit of {max} (docs/whatif-format.md, Limits): \
         the file is corrupt, hostile or larger than the importer admits",
        limit.name()
    )]
    LimitExceeded {
        /// The file.
        path: String,
        /// Which bound.
        limit: Limit,
        /// Its value.
        max: u64,
    },
}
