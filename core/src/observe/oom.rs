//! OOM forensics: a viewer snapshot written at the moment of out-of-memory, before the
//! error returns to the caller.
//!
//! The allocator does it itself when `MEMREUSE_OOM_SNAPSHOT=PATH` was set when it was
//! created, or after [`crate::CachingAllocator::set_oom_snapshot_path`]: at the end of the
//! retry chain, before OOM observers run and before `allocate` returns, it writes
//! [`oom_snapshot`] as a pickle to the path (`{device}` replaced by the device index, so a
//! multi-device process writes one file per device), and the `OutOfMemory` message names
//! the file. The trace of the snapshot ends with the `oom` entry; enable tracing
//! (`AllocatorConfig::with_trace_capacity`) to see what led there, without it the trace
//! holds only that entry.
//!
//! The allocator does not call this module: it takes the snapshot and hands it to the
//! writer registered here (`inventory`), so observe stays built on the allocator and never
//! the reverse.

use std::path::{Path, PathBuf};

use super::viewer::{ExportError, ViewerSnapshot};
use crate::allocator::{
    CachingAllocator, OomInfo, OomSnapshotWriter, Snapshot, TraceAction, TraceEntry, trace_clock_us,
};
use crate::backend::Backend;
use crate::ids::StreamId;

// The allocator owns the variable (it reads it when it is created); re-exported where it
// was first documented.
pub use crate::allocator::OOM_SNAPSHOT_ENV;

/// The snapshot of `allocator` at an OOM described by `info`: the trace ends with the
/// `oom` entry (the `snapshot` entry that taking it records is dropped, and an `oom` entry
/// is added from `info` if the trace does not end with one).
pub fn oom_snapshot<B: Backend>(
    allocator: &CachingAllocator<B>,
    info: &OomInfo,
) -> Result<ViewerSnapshot, ExportError> {
    viewer_at_oom(allocator.snapshot(), info)
}

/// [`oom_snapshot`] from a snapshot already taken.
fn viewer_at_oom(mut snap: Snapshot, info: &OomInfo) -> Result<ViewerSnapshot, ExportError> {
    if snap
        .traces
        .last()
        .is_some_and(|e| e.action == TraceAction::Snapshot)
    {
        snap.traces.pop();
    }
    if !snap
        .traces
        .last()
        .is_some_and(|e| e.action == TraceAction::Oom)
    {
        snap.traces.push(TraceEntry {
            action: TraceAction::Oom,
            addr: 0,
            size: info.requested,
            stream: StreamId(0),
            time_us: trace_clock_us(),
            device_free: Some(info.device_free),
        });
    }
    ViewerSnapshot::from_snapshot(info.device, &snap)
}

/// The file for `device`: `{device}` in `template` replaced by the index.
pub fn oom_snapshot_path(template: &Path, device: usize) -> PathBuf {
    let text = template.to_string_lossy();
    if text.contains("{device}") {
        PathBuf::from(text.replace("{device}", &device.to_string()))
    } else {
        template.to_path_buf()
    }
}

/// Writes [`oom_snapshot`] as a pickle to [`oom_snapshot_path`]; returns the file, or the
/// file and why it could not be written (also logged), so the `OutOfMemory` message can say
/// so: the caller gets its `OutOfMemory` either way.
pub fn write_oom_snapshot<B: Backend>(
    allocator: &CachingAllocator<B>,
    info: &OomInfo,
    template: &Path,
) -> Result<PathBuf, (PathBuf, ExportError)> {
    write_snapshot_file(allocator.snapshot(), info, template)
}

/// [`write_oom_snapshot`] from a snapshot already taken.
fn write_snapshot_file(
    snap: Snapshot,
    info: &OomInfo,
    template: &Path,
) -> Result<PathBuf, (PathBuf, ExportError)> {
    let file = oom_snapshot_path(template, info.device);
    match viewer_at_oom(snap, info).and_then(|s| s.write_pickle(&file)) {
        Ok(()) => Ok(file),
        Err(e) => {
            tracing::warn!(%e, file = %file.display(), "memreuse: could not write the OOM snapshot");
            Err((file, e))
        }
    }
}

/// The writer the allocator calls at an out-of-memory (its snapshot, taken at the failure).
fn write_for_allocator(
    snap: Snapshot,
    info: &OomInfo,
    template: &Path,
) -> Result<PathBuf, (PathBuf, String)> {
    write_snapshot_file(snap, info, template).map_err(|(file, e)| (file, e.to_string()))
}

inventory::submit! {
    OomSnapshotWriter { write: write_for_allocator }
}
