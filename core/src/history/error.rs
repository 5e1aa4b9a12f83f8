//! What can be wrong with a history or its file. Every variant names the entry (the line of
//! the file, or the 1-based position of an event built in memory: `unit` says which) and
//! says what is valid.

use thiserror::Error;

/// Why a history could not be read or built.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// The file could not be read (including a gzip stream that ends early or is corrupt).
    #[error("reading the trace failed: {source}")]
    Io {
        /// The underlying error.
        #[from]
        source: std::io::Error,
    },
    /// The file is empty: it lacks even the header.
    #[error("the trace is empty: a memreuse.trace/1 file starts with the line `memreuse.trace/1`")]
    Empty,
    /// The first line is not a `memreuse.trace/N` header.
    #[error("line 1: expected the header `memreuse.trace/1`, found `{found}`")]
    MissingHeader {
        /// What the first line held (cut to 80 characters).
        found: String,
    },
    /// The header names a version this reader does not read.
    #[error("line 1: `{found}` is not supported: this reader reads memreuse.trace/1")]
    UnsupportedVersion {
        /// The header found.
        found: String,
    },
    /// A line starts with a word that is no action.
    #[error(
        "line {entry}: unknown action `{found}`: expected `alloc`, `free`, `end` or a `#` comment"
    )]
    UnknownAction {
        /// Line number.
        entry: u64,
        /// The word found (cut to 80 characters).
        found: String,
    },
    /// A line lacks a field.
    #[error("line {entry}: missing field `{field}`: expected `{expected}`")]
    MissingField {
        /// Line number.
        entry: u64,
        /// The missing field.
        field: &'static str,
        /// The line's full syntax.
        expected: &'static str,
    },
    /// A field is not a decimal number.
    #[error(
        "line {entry}: field `{field}` is `{found}`: expected a decimal integer in 0..=18446744073709551615"
    )]
    BadNumber {
        /// Line number.
        entry: u64,
        /// The field.
        field: &'static str,
        /// What it held (cut to 80 characters).
        found: String,
    },
    /// A line has more fields than its action takes.
    #[error("line {entry}: unexpected field `{found}`: expected `{expected}`")]
    ExtraField {
        /// Line number.
        entry: u64,
        /// The first extra field (cut to 80 characters).
        found: String,
        /// The line's full syntax.
        expected: &'static str,
    },
    /// The last line does not end with a newline: the file was cut short.
    #[error(
        "line {entry}: the file ends in the middle of this line (truncated?): every line ends with a newline"
    )]
    Truncated {
        /// Line number of the unfinished line.
        entry: u64,
    },
    /// An `alloc` reuses the id of an allocation that is still live.
    #[error(
        "{unit} {entry}: id {id} is allocated again while still live (allocated at {unit} {alloc_entry}, never freed); ids are unique among live allocations"
    )]
    DuplicateId {
        /// `line` (read from a file) or `event` (1-based position in memory).
        unit: &'static str,
        /// The second `alloc`.
        entry: u64,
        /// The id.
        id: u64,
        /// The `alloc` that made it live.
        alloc_entry: u64,
    },
    /// A `free` names no live allocation.
    #[error(
        "{unit} {entry}: free of id {id}, which is not live (never allocated, or already freed)"
    )]
    UnknownId {
        /// `line` (read from a file) or `event` (1-based position in memory).
        unit: &'static str,
        /// The `free`.
        entry: u64,
        /// The id.
        id: u64,
    },
    /// A `free` disagrees with its `alloc` on size or stream.
    #[error(
        "{unit} {entry}: free of id {id} gives {field} {at_free}, but its alloc at {unit} {alloc_entry} gave {at_alloc}; a free repeats its allocation's size and stream"
    )]
    FreeMismatch {
        /// `line` (read from a file) or `event` (1-based position in memory).
        unit: &'static str,
        /// The `free`.
        entry: u64,
        /// The id.
        id: u64,
        /// `size` or `stream`.
        field: &'static str,
        /// The value at the `alloc`.
        at_alloc: u64,
        /// The value at the `free`.
        at_free: u64,
        /// The `alloc`.
        alloc_entry: u64,
    },
    /// The `end` line's count differs from the number of events read.
    #[error(
        "line {entry}: `end {declared}` but the file holds {read} alloc/free lines (lines lost?)"
    )]
    EndCountMismatch {
        /// Line of `end`.
        entry: u64,
        /// The count it declares.
        declared: u64,
        /// Events read.
        read: u64,
    },
    /// Something other than blank lines follows the `end` line.
    #[error("line {entry}: `{found}` after the `end` line: `end` is the last line")]
    AfterEnd {
        /// Line number.
        entry: u64,
        /// What was found (cut to 80 characters).
        found: String,
    },
}
