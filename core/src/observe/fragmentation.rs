//! Fragmentation per pool and device memory the allocator does not own.

use crate::MemoryInfo;
use crate::allocator::{BlockState, SegmentType, Snapshot};

/// The free (cached, `inactive`) blocks of one pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolFragmentation {
    /// Bytes of free blocks.
    pub total_free: u64,
    /// The largest free block.
    pub largest_free: u64,
    /// Number of free blocks.
    pub free_blocks: u64,
}

impl PoolFragmentation {
    /// `1 - largest free block / total free` (RMM's arena and Umpire's definition): 0 when
    /// all free memory is one block (or there is none), close to 1 when it is in crumbs.
    pub fn ratio(&self) -> f64 {
        if self.total_free == 0 {
            0.0
        } else {
            1.0 - self.largest_free as f64 / self.total_free as f64
        }
    }

    fn add(&mut self, size: u64) {
        self.total_free += size;
        self.largest_free = self.largest_free.max(size);
        self.free_blocks += 1;
    }
}

/// Fragmentation of the small pool, the large pool and both together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fragmentation {
    /// Small pool (2 MiB segments).
    pub small: PoolFragmentation,
    /// Large pool.
    pub large: PoolFragmentation,
    /// Both pools.
    pub all: PoolFragmentation,
}

impl Fragmentation {
    /// `(pool label, figures)` for `all`, `small` and `large`, as metrics label them.
    pub fn by_pool(&self) -> [(&'static str, PoolFragmentation); 3] {
        [
            ("all", self.all),
            ("small", self.small),
            ("large", self.large),
        ]
    }
}

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
            f.all.add(b.size);
            match seg.segment_type {
                SegmentType::Small => f.small.add(b.size),
                SegmentType::Large => f.large.add(b.size),
            }
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
    fn ratio_is_zero_for_one_block_and_grows_with_crumbs() {
        let mut p = PoolFragmentation::default();
        assert!(p.ratio().abs() < f64::EPSILON);
        p.add(100);
        assert!(p.ratio().abs() < f64::EPSILON);
        p.add(100);
        p.add(200);
        assert!((p.ratio() - 0.5).abs() < 1e-12);
    }

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
