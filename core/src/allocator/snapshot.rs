//! Memory snapshots in the shape of `torch.cuda.memory._snapshot()`.

use crate::backend::Backend;
use crate::ids::StreamId;

use super::index::SlotState;
use super::pool::MemPoolId;
use super::sizes::PoolKind;
use super::state::{Setup, State};
use super::trace::{TraceAction, TraceEntry};

/// A block's state, as PyTorch's snapshot names it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum BlockState {
    /// Handed out to a caller.
    ActiveAllocated,
    /// Freed by the caller, waiting for events on the streams that used it (or quarantined:
    /// its events could not be queried, see `quarantined_bytes`).
    ActivePendingFree,
    /// Free, cached in a pool.
    Inactive,
}

impl BlockState {
    /// PyTorch's name: `active_allocated`, `active_pending_free` or `inactive`.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }
}

/// Which pool a segment serves.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum SegmentType {
    /// 2 MiB segments for requests of at most 1 MiB.
    Small,
    /// Everything else.
    Large,
}

impl SegmentType {
    /// PyTorch's name: `small` or `large`.
    pub fn as_str(self) -> &'static str {
        match self {
            SegmentType::Small => "small",
            SegmentType::Large => "large",
        }
    }
}

/// One block of a segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BlockInfo {
    /// Device address.
    pub address: u64,
    /// Block size in bytes.
    pub size: u64,
    /// Bytes the caller asked for (0 for inactive blocks).
    pub requested_size: u64,
    /// State.
    pub state: BlockState,
}

/// One segment: a raw device allocation and the blocks that tile it.
#[derive(Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Device index.
    pub device: usize,
    /// Base address.
    pub address: u64,
    /// Segment size.
    pub total_size: u64,
    /// Bytes of allocated blocks.
    pub allocated_size: u64,
    /// Bytes of allocated and pending-free blocks.
    pub active_size: u64,
    /// Requested bytes of active blocks.
    pub requested_size: u64,
    /// Allocation stream.
    pub stream: StreamId,
    /// Small or large pool.
    pub segment_type: SegmentType,
    /// True for one mapped run of an expandable segment: as PyTorch's snapshot does, each
    /// contiguous mapped range of an expandable segment is reported as a segment of its
    /// own (unmapped addresses are not shown).
    pub is_expandable: bool,
    /// The memory pool the segment belongs to ([`MemPoolId::DEFAULT`] for ordinary
    /// allocations); PyTorch's snapshot calls it `segment_pool_id`.
    pub segment_pool_id: MemPoolId,
    /// Blocks in address order; they tile the segment exactly.
    pub blocks: Vec<BlockInfo>,
}

// By hand, not derived: the pool id is printed only for a pool's segment, so a snapshot
// without memory pools prints exactly as before pools existed (the golden test compares
// this text byte for byte).
impl std::fmt::Debug for SegmentInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("SegmentInfo");
        d.field("device", &self.device)
            .field("address", &self.address)
            .field("total_size", &self.total_size)
            .field("allocated_size", &self.allocated_size)
            .field("active_size", &self.active_size)
            .field("requested_size", &self.requested_size)
            .field("stream", &self.stream)
            .field("segment_type", &self.segment_type)
            .field("is_expandable", &self.is_expandable);
        if !self.segment_pool_id.is_default() {
            d.field("segment_pool_id", &self.segment_pool_id);
        }
        d.field("blocks", &self.blocks).finish()
    }
}

/// Segments (by address) and the trace ring buffer's contents (oldest first).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Snapshot {
    /// Every segment, in address order.
    pub segments: Vec<SegmentInfo>,
    /// Trace entries, oldest first.
    pub traces: Vec<TraceEntry>,
    /// The device's capacity in bytes when the snapshot was taken (the backend's
    /// `memory_info`; `None` when it could not say), so a reader of the file (whatif) knows
    /// the device an out-of-memory snapshot ran out on.
    pub device_total: Option<u64>,
}

impl<B: Backend> State<B> {
    /// Builds a snapshot after recording a `snapshot` trace entry.
    pub fn snapshot(&mut self, su: &Setup<B>) -> Snapshot {
        let active = self.index.figures().active_bytes.current();
        let default_stream = su.backend.stream_id(&su.backend.default_stream());
        self.trace
            .push(TraceAction::Snapshot, 0, active, default_stream, None);
        let device = su.backend.device_index();
        let device_total = su.backend.memory_info().ok().map(|m| m.total);
        let mut segments = Vec::with_capacity(self.index.segments().len());
        for (&address, seg) in self.index.segments() {
            let is_expandable = self.expandable.contains_key(&address);
            let segment_pool_id = self.pools.id_of(seg.lane);
            let mut info: Option<SegmentInfo> = None;
            for b in self.index.segment_blocks(seg.head) {
                let state = match b.state {
                    SlotState::Allocated { .. } => BlockState::ActiveAllocated,
                    SlotState::PendingFree { .. } | SlotState::Quarantined { .. } => {
                        BlockState::ActivePendingFree
                    }
                    SlotState::Free { .. } | SlotState::Vacant => BlockState::Inactive,
                    SlotState::Unmapped => {
                        // The end of a mapped run of an expandable segment.
                        segments.extend(info.take());
                        continue;
                    }
                };
                let info = info.get_or_insert_with(|| SegmentInfo {
                    device,
                    address: if is_expandable { b.ptr } else { address },
                    total_size: if is_expandable { 0 } else { seg.size },
                    allocated_size: 0,
                    active_size: 0,
                    requested_size: 0,
                    stream: seg.stream,
                    segment_type: match seg.pool {
                        PoolKind::Small => SegmentType::Small,
                        PoolKind::Large => SegmentType::Large,
                    },
                    is_expandable,
                    segment_pool_id,
                    blocks: Vec::new(),
                });
                let requested = b.state.requested();
                if is_expandable {
                    info.total_size += b.size;
                }
                if state == BlockState::ActiveAllocated {
                    info.allocated_size += b.size;
                }
                if state != BlockState::Inactive {
                    info.active_size += b.size;
                    info.requested_size += requested;
                }
                info.blocks.push(BlockInfo {
                    address: b.ptr,
                    size: b.size,
                    requested_size: requested,
                    state,
                });
            }
            segments.extend(info);
        }
        Snapshot {
            segments,
            traces: self.trace.to_vec(),
            device_total,
        }
    }
}
