//! OOM forensics: a viewer snapshot written at the moment of out-of-memory, before the
//! error returns to the caller.
//!
//! `MEMREUSE_OOM_SNAPSHOT=PATH` (read by [`install_oom_snapshot_from_env`]) or
//! [`install_oom_snapshot`] installs an OOM observer; the allocator calls observers after
//! its whole retry chain failed and before `allocate` returns the error. `{device}` in the
//! path is replaced by the device index (one file per device in a multi-device process).
//! The trace of the written snapshot ends with the `oom` entry (enable tracing with
//! `AllocatorConfig::with_trace_capacity` to see what led there; without it the trace holds
//! only that entry).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use super::viewer::{ExportError, ViewerSnapshot};
use crate::allocator::{
    CachingAllocator, CallbackId, OomInfo, TraceAction, TraceEntry, trace_clock_us,
};
use crate::backend::Backend;
use crate::ids::StreamId;

/// The environment variable naming the OOM snapshot file.
pub const OOM_SNAPSHOT_ENV: &str = "MEMREUSE_OOM_SNAPSHOT";

/// The snapshot of `allocator` at an OOM described by `info`: the trace ends with the
/// `oom` entry (the `snapshot` entry taking it records is dropped, and an `oom` entry is
/// added from `info` if the trace does not end with one).
pub fn oom_snapshot<B: Backend>(
    allocator: &CachingAllocator<B>,
    info: &OomInfo,
) -> Result<ViewerSnapshot, ExportError> {
    let mut snap = allocator.snapshot();
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

/// Installs an OOM observer on `allocator` that writes [`oom_snapshot`] as a pickle to
/// `path` (see [`oom_snapshot_path`]). Failures to write are logged, never raised: the
/// caller gets its `OutOfMemory` either way. Remove it with
/// `allocator.remove_oom_observer(id)`.
pub fn install_oom_snapshot<B>(allocator: &Arc<CachingAllocator<B>>, path: PathBuf) -> CallbackId
where
    B: Backend + Send + Sync + 'static,
{
    let weak: Weak<CachingAllocator<B>> = Arc::downgrade(allocator);
    allocator.add_oom_observer(Arc::new(move |info: &OomInfo| {
        let Some(alloc) = weak.upgrade() else {
            return;
        };
        let file = oom_snapshot_path(&path, info.device);
        match oom_snapshot(&alloc, info).and_then(|s| s.write_pickle(&file)) {
            Ok(()) => tracing::error!(
                path = %file.display(),
                "memreuse: out of memory on device {}; snapshot written to {} (open it with `python -m torch.cuda._memory_viz trace_plot FILE -o out.html`)",
                info.device,
                file.display()
            ),
            Err(e) => tracing::warn!(%e, "memreuse: could not write the OOM snapshot"),
        }
    }))
}

/// [`install_oom_snapshot`] with the path from `MEMREUSE_OOM_SNAPSHOT`, if it is set and
/// not empty.
pub fn install_oom_snapshot_from_env<B>(allocator: &Arc<CachingAllocator<B>>) -> Option<CallbackId>
where
    B: Backend + Send + Sync + 'static,
{
    let path = std::env::var_os(OOM_SNAPSHOT_ENV).filter(|p| !p.is_empty())?;
    Some(install_oom_snapshot(allocator, PathBuf::from(path)))
}
