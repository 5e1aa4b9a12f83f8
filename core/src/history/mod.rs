//! Allocation histories: what a program asked of its allocator, in order, independent of any
//! device, and the versioned `memreuse.trace/1` text format that stores one.
//!
//! This is not the allocator's own trace ring ([`crate::allocator::TraceEntry`]), which
//! records what the allocator *did* (segments, pending frees) in PyTorch's vocabulary. A
//! history records only the requests (allocate N bytes on stream S, free allocation I), so it
//! can be replayed through any allocator under any setting: the benchmark replays the
//! recorded model traces through every peer, and `memreuse-conformance whatif` replays a
//! history under every allocator setting.
//!
//! The format is specified in `docs/trace-format.md`. [`read_trace`] and [`TraceReader`]
//! read it (every malformed or truncated line is a [`HistoryError`] naming the line),
//! [`read_trace_file`] also reads gzip-compressed files, and [`TraceWriter`] writes it.
//!
//! ```
//! use memreuse_core::history::{read_trace, AllocationHistory, EventKind, HistoryEvent};
//! use memreuse_core::StreamId;
//!
//! let text = "memreuse.trace/1\nalloc 1 4096 0 10\nfree 1 4096 0 25\nend 2\n";
//! let history: AllocationHistory = read_trace(text.as_bytes()).unwrap();
//! assert_eq!(history.events()[1], HistoryEvent {
//!     kind: EventKind::Free, id: 1, size: 4096, stream: StreamId(0), time_us: Some(25),
//! });
//! assert_eq!(history.live_peak_bytes(), 4096);
//! assert!(history.is_complete());
//! ```

#![forbid(unsafe_code)]

mod error;
mod event;
mod reader;
mod validate;
mod writer;

pub use error::HistoryError;
pub use event::{AllocationHistory, EventKind, HistoryEvent};
pub use reader::{TraceReader, read_trace, read_trace_file};
pub use writer::{TraceWriter, write_trace};

/// The header line that opens every file of this format (its version is the number after
/// the slash).
pub const TRACE_FORMAT: &str = "memreuse.trace/1";
