//! The bounds every importer enforces, so that a hostile or broken file ends in a typed
//! [`ImportError::LimitExceeded`](super::ImportError::LimitExceeded) (exit 2) instead of
//! filling the machine, overflowing the stack or running for hours.

/// Which bound a file ran into (the names `docs/whatif-format.md` lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// Bytes of the file as stored (compressed or not).
    FileBytes,
    /// Bytes after undoing gzip.
    DecompressedBytes,
    /// Pickle: values and MARKs on the pickle machine's stack; JSON: nested arrays and
    /// objects.
    Depth,
    /// Values, list items and dict pairs kept in memory (stack frames and other fields the
    /// importer does not read are skipped and do not count).
    Elements,
    /// Items read again through a container shared by several references (a pickle's memo):
    /// what a copying decoder would have duplicated.
    MemoCopies,
    /// Digits (text opcodes) or bytes (binary opcodes) of one pickle integer literal.
    IntegerDigits,
    /// Bytes of one string kept in memory (or one text line of a pickle opcode).
    StringBytes,
    /// Entries (lines) of a `memreuse.trace/1` file.
    TraceEntries,
}

impl Limit {
    /// The bound's name in messages and docs.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Limit::FileBytes => "file_bytes",
            Limit::DecompressedBytes => "decompressed_bytes",
            Limit::Depth => "depth",
            Limit::Elements => "elements",
            Limit::MemoCopies => "memo_copies",
            Limit::IntegerDigits => "integer_digits",
            Limit::StringBytes => "string_bytes",
            Limit::TraceEntries => "trace_entries",
        }
    }

    /// The value of this bound in `limits`.
    #[must_use]
    pub fn of(self, limits: &ImportLimits) -> u64 {
        match self {
            Limit::FileBytes => limits.file_bytes,
            Limit::DecompressedBytes => limits.decompressed_bytes,
            Limit::Depth => limits.depth,
            Limit::Elements => limits.elements,
            Limit::MemoCopies => limits.memo_copies,
            Limit::IntegerDigits => limits.integer_digits,
            Limit::StringBytes => limits.string_bytes,
            Limit::TraceEntries => limits.trace_entries,
        }
    }
}

/// The bounds of one import. The defaults admit real snapshots of several GB (PyTorch's are
/// mostly stack frames, which are skipped) while keeping memory within a small multiple of
/// the file's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportLimits {
    /// See [`Limit::FileBytes`]. Default 32 GiB.
    pub file_bytes: u64,
    /// See [`Limit::DecompressedBytes`]. Default 32 GiB.
    pub decompressed_bytes: u64,
    /// See [`Limit::Depth`]. Default 65,536 (a pickle's stack holds at most a few thousand
    /// values per nesting level; JSON is also held to its parser's fixed 128 levels).
    pub depth: u64,
    /// See [`Limit::Elements`]. Default 2^28 (8 bytes each, plus 16 for values that are not
    /// small integers).
    pub elements: u64,
    /// See [`Limit::MemoCopies`]. Default 2^24 (real snapshots share only the stack frames,
    /// which are skipped).
    pub memo_copies: u64,
    /// See [`Limit::IntegerDigits`]. Default 4,096 (a 64-bit integer needs 20).
    pub integer_digits: u64,
    /// See [`Limit::StringBytes`]. Default 16 MiB.
    pub string_bytes: u64,
    /// See [`Limit::TraceEntries`]. Default 2^31.
    pub trace_entries: u64,
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            file_bytes: 32 << 30,
            decompressed_bytes: 32 << 30,
            depth: 65_536,
            elements: 1 << 28,
            memo_copies: 1 << 24,
            integer_digits: 4096,
            string_bytes: 16 << 20,
            trace_entries: 1 << 31,
        }
    }
}

/// A bound hit while decoding, before the file name is known to the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hit {
    /// The bound.
    pub limit: Limit,
    /// Its value.
    pub max: u64,
}

impl Hit {
    /// The bound `limit` of `limits`, hit.
    pub fn new(limit: Limit, limits: &ImportLimits) -> Hit {
        Hit {
            limit,
            max: limit.of(limits),
        }
    }
}

/// Why decoding stopped.
#[derive(Debug)]
pub(super) enum Fail {
    /// A bound was hit.
    Limit(Hit),
    /// The content is not a valid pickle or JSON (truncated, corrupt): what is wrong.
    Decode(String),
    /// Reading failed.
    Io(std::io::Error),
}

impl From<Hit> for Fail {
    fn from(hit: Hit) -> Fail {
        Fail::Limit(hit)
    }
}
