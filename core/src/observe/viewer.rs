//! Snapshots in the shape of `torch.cuda.memory._snapshot()`, for PyTorch's memory viewer.
//!
//! What the viewer needs (checked against `torch/cuda/_memory_viz.py` and
//! `torch/utils/viz/MemoryViz.js`), and what [`ViewerSnapshot`] guarantees:
//! - every segment has `device` (int), `address`, `total_size`, `stream` and `blocks`; the
//!   blocks tile the segment exactly, in address order (the viewer recomputes each block's
//!   address by summing the sizes before it, and `stats` asserts the sum);
//! - `device_traces` holds one list per device index up to the largest one, and the list of
//!   a device that has segments is never empty (a `snapshot` entry is added if the trace is);
//! - every integer is written as an i64 (a pickled integer wider than 8 bytes becomes a
//!   BigInt in the browser, and BigInt arithmetic with numbers throws);
//! - no byte strings (the browser's unpickler has no opcode for them), no `category` key on
//!   trace entries (the viewer then builds a legend and trips on it);
//! - blocks carry `frames` and `requested_size` together.

use std::path::Path;

use serde::Serialize;

use crate::allocator::{Snapshot, TraceAction, TraceEntry, trace_clock_us};
use crate::output::OutputError;

/// Why a snapshot could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A value does not fit in an i64.
    #[error("`{field}` = {value} does not fit in an i64")]
    Overflow {
        /// Which field.
        field: &'static str,
        /// The value.
        value: u64,
    },
    /// A segment's blocks do not cover it exactly in address order.
    #[error("segment at {address:#x}: its blocks do not tile it ({detail})")]
    NotTiled {
        /// The segment's address.
        address: u64,
        /// What is wrong.
        detail: String,
    },
    /// Serialization failed.
    #[error("could not serialize the snapshot: {0}")]
    Serialize(String),
    /// Writing the file failed.
    #[error("could not write {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The path names something that is neither replaced nor written through (a symbolic
    /// link, a directory, a block device): it is left alone.
    #[error("refusing to replace {path}: it is a {kind}, not a regular file")]
    NotARegularFile {
        /// The path.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// The project's output writer refused the path for another reason.
    #[error(transparent)]
    Output(OutputError),
}

fn i64_of(field: &'static str, value: u64) -> Result<i64, ExportError> {
    i64::try_from(value).map_err(|_| ExportError::Overflow { field, value })
}

/// One stack frame (`filename`, `name`, `line`), as the viewer prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Frame {
    /// Source file.
    pub filename: String,
    /// Function.
    pub name: String,
    /// Line.
    pub line: i64,
}

/// One block of a segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ViewerBlock {
    /// Device address.
    pub address: i64,
    /// Block size in bytes.
    pub size: i64,
    /// Bytes the caller asked for (0 for inactive blocks).
    pub requested_size: i64,
    /// `active_allocated`, `active_pending_free` or `inactive`.
    pub state: &'static str,
    /// Where it was allocated (empty: memreuse records no stacks).
    pub frames: Vec<Frame>,
}

/// One segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ViewerSegment {
    /// Device index.
    pub device: i64,
    /// Base address.
    pub address: i64,
    /// Segment size.
    pub total_size: i64,
    /// Bytes of allocated blocks.
    pub allocated_size: i64,
    /// Bytes of allocated and pending-free blocks.
    pub active_size: i64,
    /// Requested bytes of active blocks.
    pub requested_size: i64,
    /// Allocation stream.
    pub stream: i64,
    /// `small` or `large`.
    pub segment_type: &'static str,
    /// PyTorch's memory-pool id; `(0, 0)` is the default pool, `(0, uid)` a
    /// [`crate::allocator::MemPool`].
    pub segment_pool_id: (i64, i64),
    /// True for one mapped run of an expandable segment (reported as a segment of its own).
    pub is_expandable: bool,
    /// Where the segment was allocated (empty).
    pub frames: Vec<Frame>,
    /// Blocks in address order, tiling the segment.
    pub blocks: Vec<ViewerBlock>,
}

/// One trace entry of `device_traces`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ViewerTraceEntry {
    /// `alloc`, `free_requested`, `free_completed`, `segment_alloc`, `segment_free`,
    /// `segment_map`, `segment_unmap`, `snapshot` or `oom`.
    pub action: &'static str,
    /// Block or segment address (0 for `snapshot` and `oom`).
    pub addr: i64,
    /// Bytes.
    pub size: i64,
    /// Stream id.
    pub stream: i64,
    /// Microseconds on the allocator's trace clock.
    pub time_us: i64,
    /// Free device memory, on `oom` entries only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_free: Option<i64>,
    /// Stack (empty).
    pub frames: Vec<Frame>,
}

impl ViewerTraceEntry {
    /// Converts an allocator trace entry.
    pub fn from_entry(e: &TraceEntry) -> Result<Self, ExportError> {
        let device_free = match (e.action, e.device_free) {
            (TraceAction::Oom, free) => Some(i64_of("device_free", free.unwrap_or(0))?),
            (_, _) => None,
        };
        Ok(ViewerTraceEntry {
            action: e.action.as_str(),
            addr: i64_of("addr", e.addr)?,
            size: i64_of("size", e.size)?,
            stream: i64_of("stream", e.stream.0)?,
            time_us: i64_of("time_us", e.time_us)?,
            device_free,
            frames: Vec::new(),
        })
    }
}

/// A snapshot the memory viewer opens: `{"segments": [...], "device_traces": [[...], ...]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ViewerSnapshot {
    /// Segments of every device, by (device, address).
    pub segments: Vec<ViewerSegment>,
    /// One trace list per device index, oldest entry first.
    pub device_traces: Vec<Vec<ViewerTraceEntry>>,
    /// The device's capacity, when every snapshot converted recorded the same one (whatif
    /// reads it as the device the history ran on); absent otherwise. The viewer ignores it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_total: Option<i64>,
}

impl ViewerSnapshot {
    /// Converts the snapshot of the allocator of device `device`.
    pub fn from_snapshot(device: usize, snapshot: &Snapshot) -> Result<Self, ExportError> {
        Self::from_devices(&[(device, snapshot)])
    }

    /// Takes `allocator`'s snapshot and converts it (the device index is the backend's):
    /// the call when the program holds the allocator, not a device index.
    pub fn from_allocator<B: crate::Backend>(
        allocator: &crate::CachingAllocator<B>,
    ) -> Result<Self, ExportError> {
        Self::from_snapshot(allocator.backend().device_index(), &allocator.snapshot())
    }

    /// Converts the snapshots of several devices' allocators into one file.
    pub fn from_devices(snapshots: &[(usize, &Snapshot)]) -> Result<Self, ExportError> {
        let mut out = ViewerSnapshot::default();
        let mut traces: Vec<(usize, &[TraceEntry])> = Vec::new();
        for &(device, snap) in snapshots {
            for seg in &snap.segments {
                out.segments.push(convert_segment(seg)?);
            }
            traces.push((device, &snap.traces));
        }
        out.segments.sort_by_key(|s| (s.device, s.address));
        let max_device = traces
            .iter()
            .map(|&(d, _)| d)
            .chain(out.segments.iter().map(|s| s.device as usize))
            .max();
        if let Some(max) = max_device {
            out.device_traces = vec![Vec::new(); max + 1];
        }
        for (device, entries) in traces {
            // PyTorch's trace has no range reserve (its viewer knows only its own actions).
            for e in entries
                .iter()
                .filter(|e| e.action != TraceAction::SegmentReserve)
            {
                out.device_traces[device].push(ViewerTraceEntry::from_entry(e)?);
            }
        }
        let mut totals = snapshots.iter().map(|(_, s)| s.device_total);
        if let Some(Some(first)) = totals.next()
            && totals.all(|t| t == Some(first))
        {
            out.device_total = Some(i64_of("device_total", first)?);
        }
        out.fill_empty_traces();
        Ok(out)
    }

    /// Adds a `snapshot` entry to the trace of every device that has segments and no trace
    /// (the viewer offers only devices with a trace or segments, and plots an empty trace
    /// as nothing).
    pub fn fill_empty_traces(&mut self) {
        let now = i64::try_from(trace_clock_us()).unwrap_or(i64::MAX);
        for seg in &self.segments {
            let d = seg.device as usize;
            if self.device_traces.len() <= d {
                self.device_traces.resize(d + 1, Vec::new());
            }
        }
        for (d, trace) in self.device_traces.iter_mut().enumerate() {
            if !trace.is_empty() {
                continue;
            }
            let mut active = 0i64;
            let mut any = false;
            for seg in self.segments.iter().filter(|s| s.device as usize == d) {
                any = true;
                active = active.saturating_add(seg.active_size);
            }
            if any {
                trace.push(ViewerTraceEntry {
                    action: TraceAction::Snapshot.as_str(),
                    addr: 0,
                    size: active,
                    stream: 0,
                    time_us: now,
                    device_free: None,
                    frames: Vec::new(),
                });
            }
        }
    }

    /// Pretty JSON (the same keys as the pickle).
    pub fn to_json(&self) -> Result<String, ExportError> {
        serde_json::to_string_pretty(self).map_err(|e| ExportError::Serialize(e.to_string()))
    }

    /// The pickle (protocol 3, the viewer reads 2 to 4).
    pub fn to_pickle(&self) -> Result<Vec<u8>, ExportError> {
        serde_pickle::to_vec(self, serde_pickle::SerOptions::new())
            .map_err(|e| ExportError::Serialize(e.to_string()))
    }

    /// Writes the pickle to `path` (through a temporary file in the same directory, so a
    /// reader never sees half a file).
    pub fn write_pickle(&self, path: impl AsRef<Path>) -> Result<(), ExportError> {
        write_atomic(path.as_ref(), &self.to_pickle()?)
    }

    /// Writes the JSON to `path`.
    pub fn write_json(&self, path: impl AsRef<Path>) -> Result<(), ExportError> {
        write_atomic(path.as_ref(), self.to_json()?.as_bytes())
    }
}

/// Writes `bytes` to `path` by the project's one output writer ([`crate::output`]): a
/// regular file is replaced atomically, a character device or FIFO written through, a
/// symbolic link (other than `/dev/stdout` and kin), a directory or a block device refused
/// and left alone. `Ok` means the file is there.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    match crate::output::write_file(path, bytes) {
        Ok(_) => Ok(()),
        Err(OutputError::NotARegularFile { path, kind }) => {
            Err(ExportError::NotARegularFile { path, kind })
        }
        Err(OutputError::Io { path, source }) => Err(ExportError::Io { path, source }),
        Err(other) => Err(ExportError::Output(other)),
    }
}

fn convert_segment(seg: &crate::allocator::SegmentInfo) -> Result<ViewerSegment, ExportError> {
    let mut blocks = seg.blocks.clone();
    blocks.sort_by_key(|b| b.address);
    let tiling = |detail: String| ExportError::NotTiled {
        address: seg.address,
        detail,
    };
    let mut cursor = seg.address;
    for b in &blocks {
        if b.address != cursor {
            return Err(tiling(format!(
                "block at {:#x} where {cursor:#x} was expected",
                b.address
            )));
        }
        cursor = cursor
            .checked_add(b.size)
            .ok_or_else(|| tiling("address overflow".to_owned()))?;
    }
    if cursor != seg.address.saturating_add(seg.total_size) {
        return Err(tiling(format!(
            "blocks cover {} of {} bytes",
            cursor - seg.address,
            seg.total_size
        )));
    }
    let blocks = blocks
        .iter()
        .map(|b| {
            Ok(ViewerBlock {
                address: i64_of("block address", b.address)?,
                size: i64_of("block size", b.size)?,
                requested_size: i64_of("requested_size", b.requested_size)?,
                state: b.state.as_str(),
                frames: Vec::new(),
            })
        })
        .collect::<Result<Vec<_>, ExportError>>()?;
    Ok(ViewerSegment {
        device: i64_of("device", seg.device as u64)?,
        address: i64_of("address", seg.address)?,
        total_size: i64_of("total_size", seg.total_size)?,
        allocated_size: i64_of("allocated_size", seg.allocated_size)?,
        active_size: i64_of("active_size", seg.active_size)?,
        requested_size: i64_of("requested_size", seg.requested_size)?,
        stream: i64_of("stream", seg.stream.0)?,
        segment_type: seg.segment_type.as_str(),
        segment_pool_id: (
            i64_of("segment_pool_id", seg.segment_pool_id.0)?,
            i64_of("segment_pool_id", seg.segment_pool_id.1)?,
        ),
        is_expandable: seg.is_expandable,
        frames: Vec::new(),
        blocks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StreamId;
    use crate::allocator::{BlockInfo, BlockState, SegmentInfo, SegmentType};

    fn segment(blocks: Vec<(u64, u64)>) -> SegmentInfo {
        SegmentInfo {
            device: 1,
            address: 4096,
            total_size: 2048,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: StreamId(3),
            segment_type: SegmentType::Small,
            is_expandable: false,
            segment_pool_id: crate::allocator::MemPoolId::DEFAULT,
            blocks: blocks
                .into_iter()
                .map(|(address, size)| BlockInfo {
                    address,
                    size,
                    requested_size: 0,
                    state: BlockState::Inactive,
                })
                .collect(),
        }
    }

    #[test]
    fn blocks_are_sorted_and_must_tile() {
        let snap = Snapshot {
            segments: vec![segment(vec![(5120, 1024), (4096, 1024)])],
            traces: Vec::new(),
            device_total: None,
        };
        let v = ViewerSnapshot::from_snapshot(1, &snap).unwrap();
        assert_eq!(v.segments[0].blocks[0].address, 4096);
        assert_eq!(v.device_traces.len(), 2);
        assert!(v.device_traces[0].is_empty());
        assert_eq!(v.device_traces[1][0].action, "snapshot");
        let gap = Snapshot {
            segments: vec![segment(vec![(4096, 1024), (5376, 768)])],
            traces: Vec::new(),
            device_total: None,
        };
        assert!(matches!(
            ViewerSnapshot::from_snapshot(1, &gap),
            Err(ExportError::NotTiled { .. })
        ));
    }

    #[test]
    fn u64_beyond_i64_is_an_error_not_a_panic() {
        let mut s = segment(vec![(4096, 2048)]);
        s.stream = StreamId(u64::MAX);
        let snap = Snapshot {
            segments: vec![s],
            traces: Vec::new(),
            device_total: None,
        };
        assert!(matches!(
            ViewerSnapshot::from_snapshot(1, &snap),
            Err(ExportError::Overflow { .. })
        ));
    }
}
