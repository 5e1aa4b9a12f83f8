//! The history `whatif` replays, whatever file it came from: requests in order, each
//! naming the entry of the source file it came from, plus what the importer knows about the
//! parts of the recording that are missing.

use memreuse_core::history::{EventKind, HistoryEvent};

/// What one replayed entry asks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Action {
    /// Allocate `size` bytes on stream `stream` (an index into [`ReplayHistory::streams`]).
    Alloc {
        /// Requested bytes.
        size: u64,
        /// Stream index.
        stream: usize,
    },
    /// The user freed the allocation and it went back to the allocator at once.
    Free,
    /// The user freed it, but other streams still use it (PyTorch's `free_requested` long
    /// before its `free_completed`): it stays pending until [`Action::FreeCompleted`].
    FreeRequested,
    /// The pending free completed (the streams that used the block finished).
    FreeCompleted,
}

/// One entry: an action on allocation `id`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Entry {
    /// Allocation id, dense from 0 (the importer renumbers).
    pub id: usize,
    /// What happens.
    pub action: Action,
    /// Where it came from: the line of a `memreuse.trace/1` file, the index in
    /// `device_traces[device]` of a snapshot.
    pub source: u64,
}

/// An allocation live before the first entry (a snapshot's trace ring dropped its `alloc`),
/// reconstructed from the snapshot's segments.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct InitialBlock {
    /// Allocation id (entries may free it).
    pub id: usize,
    /// Requested bytes.
    pub size: u64,
    /// Stream index.
    pub stream: usize,
}

/// A history ready to replay.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct ReplayHistory {
    /// What the file was: `memreuse.trace/1`, `PyTorch snapshot (pickle)`, ...
    pub format: String,
    /// Stream numbers as the file wrote them, in order of first use; index 0 is the first.
    pub streams: Vec<u64>,
    /// Allocations live before the first entry.
    pub initial: Vec<InitialBlock>,
    /// The entries, in order.
    pub entries: Vec<Entry>,
    /// Number of allocation ids used (`initial` and entries).
    pub ids: usize,
    /// Frees (and pending-free completions) of blocks the history never allocated: counted
    /// and skipped.
    pub skipped_unknown_frees: u64,
    /// Entries of the recording allocator's own decisions (segment actions, snapshots),
    /// which are not requests and are not replayed.
    pub ignored_entries: u64,
    /// True when the recording is known to miss its beginning (or end): every figure is then
    /// a lower bound on the real job's.
    pub lower_bound: bool,
    /// Device memory the recording names, when it names one.
    pub device_total: Option<u64>,
    /// Source entries where the recording itself ran out of memory (`oom` entries).
    pub recorded_ooms: Vec<u64>,
}

impl ReplayHistory {
    /// Highest sum of requested bytes the program held at once (initial blocks included): the
    /// lower bound on any allocator's reserved peak. A block stops counting when the user
    /// frees it (`free_requested`), even while its free is pending.
    pub fn live_peak_bytes(&self) -> u64 {
        self.live_peak_at().0
    }

    /// [`ReplayHistory::live_peak_bytes`] and the entry (counted from 1) where the program
    /// first held it; 0 when the blocks live at the start already hold it.
    pub fn live_peak_at(&self) -> (u64, u64) {
        let mut sizes = vec![0u64; self.extent().0];
        let mut live: u64 = 0;
        for b in &self.initial {
            sizes[b.id] = b.size;
            live += b.size;
        }
        let (mut peak, mut at) = (live, 0);
        for (index, e) in self.entries.iter().enumerate() {
            match e.action {
                Action::Alloc { size, .. } => {
                    sizes[e.id] = size;
                    live += size;
                    if live > peak {
                        (peak, at) = (live, index as u64 + 1);
                    }
                }
                Action::Free | Action::FreeRequested => live = live.saturating_sub(sizes[e.id]),
                Action::FreeCompleted => {}
            }
        }
        (peak, at)
    }

    /// The position (counted from 1) of the first entry whose source index is at least
    /// `source`: how a recorded `oom` entry, which is not replayed, is numbered.
    pub fn position_of_source(&self, source: u64) -> u64 {
        self.entries.partition_point(|e| e.source < source) as u64 + 1
    }

    /// Converts the events of a validated `memreuse.trace/1` file, each with its line.
    pub fn from_trace(
        events: &[(HistoryEvent, u64)],
        comments: &[String],
        complete: bool,
    ) -> ReplayHistory {
        let mut out = ReplayHistory {
            format: memreuse_core::history::TRACE_FORMAT.to_owned(),
            lower_bound: !complete,
            device_total: device_total_comment(comments),
            ..ReplayHistory::default()
        };
        let mut ids = std::collections::HashMap::new();
        for &(event, line) in events {
            let stream = out.stream_index(event.stream.0);
            let (id, action) = match event.kind {
                EventKind::Alloc => {
                    let id = out.ids;
                    out.ids += 1;
                    ids.insert(event.id, id);
                    let size = event.size;
                    (id, Action::Alloc { size, stream })
                }
                // Validated by the reader: the id is live.
                EventKind::Free => (ids.remove(&event.id).unwrap_or_default(), Action::Free),
            };
            out.entries.push(Entry {
                id,
                action,
                source: line,
            });
        }
        out
    }

    /// Number of ids and of streams the entries use: at least [`ReplayHistory::ids`] and
    /// `streams.len()`, more when a history built by hand names higher ones (so a replay
    /// never indexes past its tables).
    pub fn extent(&self) -> (usize, usize) {
        let mut ids = self.ids;
        let mut streams = self.streams.len().max(1);
        for b in &self.initial {
            ids = ids.max(b.id + 1);
            streams = streams.max(b.stream + 1);
        }
        for e in &self.entries {
            ids = ids.max(e.id + 1);
            if let Action::Alloc { stream, .. } = e.action {
                streams = streams.max(stream + 1);
            }
        }
        (ids, streams)
    }

    /// The index of stream number `raw`, adding it on first use.
    pub fn stream_index(&mut self, raw: u64) -> usize {
        if let Some(i) = self.streams.iter().position(|&s| s == raw) {
            i
        } else {
            self.streams.push(raw);
            self.streams.len() - 1
        }
    }
}

/// A `device_total: BYTES` comment (documented in `docs/whatif-format.md`).
fn device_total_comment(comments: &[String]) -> Option<u64> {
    comments.iter().find_map(|c| {
        c.strip_prefix("device_total:")
            .and_then(|v| v.trim().parse().ok())
    })
}
