//! Fragmentation per pool and device memory the allocator does not own.
//!
//! [`crate::AllocatorStats::fragmentation`] carries the live figures; [`fragmentation`]
//! recomputes them from a snapshot (a file written at OOM, say) and gives the same numbers.

use crate::MemoryInfo;
use crate::allocator::{BlockState, SegmentType, Snapshot};
pub use crate::allocator::{Fragmentation, PoolFragmentation};

/// Computes the fragmentation of every pool from a snapshot's free blocks (pending-free
/// blocks are not free yet and do not count).
pub fn fragmentation(snapshot: &Snapshot) -> Fragmentation {
    let mut f = Fragmentation::default();
    for seg in &snapshot.segments {
        for b in seg
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::Inactive)
        {
            f.add(seg.segment_type == SegmentType::Small, b.size);
        }
    }
    f
}

/// Device memory in use that the allocator does not own: `total - free - reserved`
/// (communicator buffers such as `NCCL_BUFFSIZE` / `HCCL_BUFFSIZE`, contexts, other
/// libraries). Saturates at 0 when the device's figures lag the allocator's.
pub fn memory_outside_allocator(info: MemoryInfo, reserved: u64) -> u64 {
    info.total
        .saturating_sub(info.free)
        .saturating_sub(reserved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_memory_saturates() {
        let info = MemoryInfo {
            free: 10,
            total: 100,
        };
        assert_eq!(memory_outside_allocator(info, 60), 30);
        assert_eq!(memory_outside_allocator(info, 95), 0);
    }
}
