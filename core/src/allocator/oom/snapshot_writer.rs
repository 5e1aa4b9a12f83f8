//! The extension point through which the allocator has its OOM snapshot file written.
//!
//! The allocator decides *when* a snapshot is taken (at the failure, before observers can
//! free memory) and *where* it goes (`MEMREUSE_OOM_SNAPSHOT`,
//! [`crate::CachingAllocator::set_oom_snapshot_path`]); the file format (the viewer's
//! pickle) belongs to `observe`, which is built on the allocator and registers the writer
//! here with `inventory`. So the dependency runs one way: observe names the allocator,
//! the allocator never names observe.

use std::path::{Path, PathBuf};

use super::super::snapshot::Snapshot;
use super::report::OomInfo;

/// Writes the snapshot taken at an out-of-memory to the file for `info.device` made from
/// the path template; returns the file, or the file and why it could not be written.
pub(crate) type WriteOomSnapshot =
    fn(Snapshot, &OomInfo, &Path) -> Result<PathBuf, (PathBuf, String)>;

/// One registered OOM-snapshot writer (submitted with `inventory::submit!`).
pub(crate) struct OomSnapshotWriter {
    /// The writer.
    pub write: WriteOomSnapshot,
}

inventory::collect!(OomSnapshotWriter);

/// Writes `snapshot` through the registered writer (the first, if several were linked).
pub(crate) fn write_oom_snapshot(
    snapshot: Snapshot,
    info: &OomInfo,
    template: &Path,
) -> Result<PathBuf, (PathBuf, String)> {
    match inventory::iter::<OomSnapshotWriter>.into_iter().next() {
        Some(w) => (w.write)(snapshot, info, template),
        None => Err((
            template.to_path_buf(),
            "no OOM snapshot writer is linked into this build".to_owned(),
        )),
    }
}
