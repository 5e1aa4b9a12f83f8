//! Fragmentation of the cached free memory, per pool, as part of [`super::AllocatorStats`].
//!
//! The figure is RMM's arena and Umpire's: `1 - largest free block / total free bytes`.
//! Pending-free and quarantined blocks are not free yet and do not count. Free blocks merge
//! at once (as in PyTorch), so the figures equal what observe's `fragmentation`
//! computes from a snapshot.

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

    /// Counts one free block of `size` bytes.
    pub fn add(&mut self, size: u64) {
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

    /// Counts one free block of `size` bytes of the small (`small == true`) or large pool.
    pub fn add(&mut self, small: bool, size: u64) {
        self.all.add(size);
        if small {
            self.small.add(size);
        } else {
            self.large.add(size);
        }
    }
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
        assert_eq!(p.free_blocks, 3);
    }

    #[test]
    fn pools_add_up_to_all() {
        let mut f = Fragmentation::default();
        f.add(true, 512);
        f.add(false, 4 << 20);
        f.add(false, 2 << 20);
        assert_eq!(f.all.total_free, 512 + (6 << 20));
        assert_eq!(f.all.largest_free, 4 << 20);
        assert_eq!(f.small.free_blocks, 1);
        assert_eq!(f.large.free_blocks, 2);
    }
}
