//! Replays a [`ReplayHistory`] through `CachingAllocator` under one setting, on
//! `memreuse_core::testing::ManualBackend`: a simulated device without backing memory whose
//! streams complete only when told. That is what keeps a recorded pending free exact: the
//! block is recorded on a side stream whose work completes at the history's
//! `free_completed` entry (or when the allocator itself synchronizes, as PyTorch does on
//! its out-of-memory retry), and every figure is deterministic.

use std::sync::Arc;

use memreuse_core::testing::{ManualBackend, ManualStream};
use memreuse_core::{AllocError, AllocatorConfig, Backend, CachingAllocator, Storage};

use super::oom_reason::oom_reason;

use super::history::{Action, ReplayHistory};

/// Points kept for the reserved-over-time chart (the maximum of each bucket of entries).
pub const CHART_POINTS: usize = 2000;

/// How often (in entries) the progress callback is called.
pub const PROGRESS_EVERY: u64 = 1 << 14;

/// What one replay measured.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ReplayFigures {
    /// Highest reserved bytes (segments), `reserved_bytes.peak`.
    pub reserved_peak_bytes: u64,
    /// Highest requested bytes the program held (the history's lower bound; up to the
    /// failing request when the replay ran out of memory).
    pub live_peak_bytes: u64,
    /// Highest bytes of blocks handed out (`allocated_bytes.peak`).
    pub allocated_peak_bytes: u64,
    /// Share of reserved bytes not handed out (cached or pending) when reserved first
    /// reached its peak: what fragmentation and caching cost at the worst moment.
    pub fragmentation_at_peak: f64,
    /// Raw device allocations (`num_device_alloc`).
    pub device_allocations: u64,
    /// Device frees (`num_device_free`).
    pub device_frees: u64,
    /// Segments at the end.
    pub segments_at_end: u64,
    /// Allocation retries after synchronizing (`num_alloc_retries`).
    pub alloc_retries: u64,
    /// The source entry of the first allocation that ran out of memory; the replay stops
    /// there, as the job would.
    pub first_oom_entry: Option<u64>,
    /// Its position among the history's entries, counted from 1 (how the terminal and the
    /// page number entries; `first_oom_entry` is the source file's own index).
    pub first_oom_position: Option<u64>,
    /// Its message.
    pub oom_message: Option<String>,
    /// Why it ran out of memory, in a few words: `live`, `cap`, `rounding` or
    /// `fragmentation`, then the figures (`docs/whatif-format.md`).
    pub oom_reason: Option<String>,
    /// Entries replayed (all of them when nothing ran out of memory).
    pub entries_replayed: u64,
    /// Reserved bytes over the replay: `(entry index, bytes)`, at most [`CHART_POINTS`].
    pub reserved_series: Vec<(u64, u64)>,
}

/// Replays `history` under `config` on a device of `capacity` bytes (`u64::MAX`:
/// unlimited); `progress(entries done)` is called every [`PROGRESS_EVERY`] entries.
pub fn replay(
    history: &ReplayHistory,
    config: AllocatorConfig,
    capacity: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<ReplayFigures, AllocError> {
    let backend = Arc::new(ManualBackend::new(capacity));
    let allocator = CachingAllocator::new(Arc::clone(&backend), config);
    let (ids, stream_count) = history.extent();
    let mut streams = vec![backend.default_stream()];
    for _ in 1..stream_count {
        streams.push(backend.create_stream()?);
    }
    let mut held: Vec<Option<Storage<ManualBackend>>> = Vec::new();
    held.resize_with(ids, || None);
    let mut requested = vec![0u64; ids];
    // Side streams of pending frees, by id; idle side streams to reuse.
    let mut pending: Vec<Option<ManualStream>> = vec![None; ids];
    let mut idle_side: Vec<ManualStream> = Vec::new();

    let mut figures = ReplayFigures::default();
    let (mut live, mut allocated, mut reserved_max) = (0u64, 0u64, 0u64);
    let bucket = (history.entries.len() / CHART_POINTS).max(1) as u64;
    let mut bucket_max = 0u64;

    for b in &history.initial {
        // PyTorch hands out no block for 0 bytes.
        if b.size > 0 {
            let s = allocator.allocate(b.size, &streams[b.stream])?;
            allocated += s.size();
            held[b.id] = Some(s);
        }
        requested[b.id] = b.size;
        live += b.size;
    }
    figures.live_peak_bytes = live;

    for (index, entry) in history.entries.iter().enumerate() {
        let index = index as u64;
        match entry.action {
            Action::Alloc { size, stream } => {
                if size > 0 {
                    match allocator.allocate(size, &streams[stream]) {
                        Ok(s) => {
                            allocated += s.size();
                            held[entry.id] = Some(s);
                        }
                        Err(AllocError::OutOfMemory(oom)) => {
                            // The job dies here: the request was never held.
                            figures.first_oom_entry = Some(entry.source);
                            figures.first_oom_position = Some(index + 1);
                            figures.oom_reason = Some(oom_reason(&oom, live, capacity));
                            figures.oom_message = Some(oom.to_string());
                            break;
                        }
                        Err(other) => return Err(other),
                    }
                }
                requested[entry.id] = size;
                live += size;
                figures.live_peak_bytes = figures.live_peak_bytes.max(live);
            }
            Action::Free => {
                live = live.saturating_sub(requested[entry.id]);
                if let Some(s) = held[entry.id].take() {
                    allocated -= s.size();
                }
            }
            Action::FreeRequested => {
                live = live.saturating_sub(requested[entry.id]);
                if let Some(s) = held[entry.id].take() {
                    allocated -= s.size();
                    let side = match idle_side.pop() {
                        Some(side) => side,
                        None => backend.create_stream()?,
                    };
                    backend.enqueue_work(&side)?;
                    allocator.record_stream(&s, &side);
                    pending[entry.id] = Some(side);
                }
            }
            Action::FreeCompleted => {
                if let Some(side) = pending[entry.id].take() {
                    backend.advance(&side);
                    idle_side.push(side);
                }
            }
        }
        let reserved = backend.raw_bytes_in_use();
        if reserved > reserved_max {
            reserved_max = reserved;
            figures.fragmentation_at_peak = 1.0 - allocated as f64 / reserved as f64;
        }
        bucket_max = bucket_max.max(reserved);
        if (index + 1) % bucket == 0 {
            figures.reserved_series.push((index, bucket_max));
            bucket_max = 0;
        }
        figures.entries_replayed = index + 1;
        if (index + 1) % PROGRESS_EVERY == 0 {
            progress(index + 1);
        }
    }
    if figures.entries_replayed % bucket != 0 {
        figures
            .reserved_series
            .push((figures.entries_replayed.saturating_sub(1), bucket_max));
    }
    let stats = allocator.stats();
    figures.reserved_peak_bytes = stats.reserved_bytes.peak;
    figures.allocated_peak_bytes = stats.allocated_bytes.peak;
    figures.device_allocations = stats.num_device_alloc;
    figures.device_frees = stats.num_device_free;
    figures.segments_at_end = stats.segment.current;
    figures.alloc_retries = stats.num_alloc_retries;
    // Storages drop before the allocator and the backend.
    drop(held);
    Ok(figures)
}
