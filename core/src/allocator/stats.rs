//! Allocator statistics with PyTorch's names (`torch.cuda.memory_stats`).
//!
//! # Identities (exactly as implemented)
//! For every pool and for the aggregate, at every moment the allocator lock is free:
//! - `active_bytes.current == allocated_bytes.current + pending-free bytes + quarantined
//!   bytes` (a pending-free
//!   block left `allocated_*` when the user freed it and leaves `active_*` when it enters
//!   the pool);
//! - `reserved_bytes.current == active_bytes.current + cached free bytes`, hence
//!   `reserved_bytes.current == allocated_bytes.current + cached_free_bytes +
//!   pending_free_bytes + quarantined_bytes` (aggregate fields of [`AllocatorStats`]; a
//!   quarantined block is active, like a pending-free one);
//! - `inactive_split_bytes.current <= cached_free_bytes` (only free blocks of split segments
//!   count).
//!
//! The allocator stores only what cannot be derived (see the block index's figures):
//! `freed` is computed as `allocated - current`, and the aggregate's `current`,
//! `allocated` and `freed` as sums of the pools'; the aggregate `peak` is kept on every
//! increase (a peak of a sum is not the sum of the peaks).
//!
//! Byte figures are block sizes (rounded), except `requested_bytes`, which sums what callers
//! asked for, of active blocks.

use super::fragmentation::Fragmentation;

/// One statistic: current value, peak since the last reset, and cumulative increases
/// (`allocated`) and decreases (`freed`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// Value now.
    pub current: u64,
    /// Highest `current` since creation or [`super::CachingAllocator::reset_peak_stats`].
    pub peak: u64,
    /// Sum of all increases.
    pub allocated: u64,
    /// Sum of all decreases.
    pub freed: u64,
}

impl Stat {
    fn reset_peak(&mut self) {
        self.peak = self.current;
    }
}

/// A statistic for all pools together and for each pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatArray {
    /// Both pools (PyTorch's `all`).
    pub aggregate: Stat,
    /// Small pool (blocks for requests of at most 1 MiB).
    pub small_pool: Stat,
    /// Large pool.
    pub large_pool: Stat,
}

impl StatArray {
    fn reset_peak(&mut self) {
        self.aggregate.reset_peak();
        self.small_pool.reset_peak();
        self.large_pool.reset_peak();
    }
}

/// `stat_array.current` and friends read the aggregate, so code that only wants the
/// all-pools figure (PyTorch's `"allocated_bytes.all.current"`) need not name it.
impl std::ops::Deref for StatArray {
    type Target = Stat;

    fn deref(&self) -> &Stat {
        &self.aggregate
    }
}

/// Everything the allocator counts. See the module docs for the identities between fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Blocks handed out and not yet freed by the user.
    pub allocation: StatArray,
    /// Segments obtained from the device and not yet released.
    pub segment: StatArray,
    /// Blocks allocated or pending-free.
    pub active: StatArray,
    /// Free blocks inside split segments (fragments).
    pub inactive_split: StatArray,
    /// Bytes of blocks handed out and not yet freed by the user.
    pub allocated_bytes: StatArray,
    /// Bytes of all segments.
    pub reserved_bytes: StatArray,
    /// Bytes of allocated or pending-free blocks.
    pub active_bytes: StatArray,
    /// Bytes of free blocks inside split segments.
    pub inactive_split_bytes: StatArray,
    /// Bytes callers asked for, of active blocks.
    pub requested_bytes: StatArray,
    /// Mallocs that had to synchronize and release all cached blocks before retrying.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Times every pending event was synchronized (before a retry, or by `empty_cache`).
    pub num_sync_all_streams: u64,
    /// Successful raw device allocations.
    pub num_device_alloc: u64,
    /// Raw device frees.
    pub num_device_free: u64,
    /// `vm_map` calls (one per physical page) of expandable segments; each growth of a
    /// segment also counts once in `num_device_alloc`, as PyTorch counts `map_block`.
    pub num_device_map: u64,
    /// `vm_unmap` calls (one per physical page) of expandable segments; each unmapped
    /// range also counts once in `num_device_free`, as PyTorch counts `unmap_block`.
    pub num_device_unmap: u64,
    /// Allocated blocks of at least `max_split_size` bytes.
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size` bytes.
    pub oversize_segments: Stat,
    /// Events recorded for pending frees: one per used stream per free of a block with
    /// stream uses, whether the event was created or taken from the event pool.
    pub reuse_events_created: u64,
    /// Calls to `record_stream` and `record_stream_for_work` (including no-ops on the
    /// block's own stream).
    pub record_stream_calls: u64,
    /// Calls to `erase_stream` and `erase_stream_by_block`, whatever their outcome.
    pub erase_stream_calls: u64,
    /// Bytes of blocks freed by the user but waiting on events (current).
    pub pending_free_bytes: u64,
    /// Bytes of free blocks held in the pools (current).
    pub cached_free_bytes: u64,
    /// Bytes of blocks freed by the user whose event query (or synchronization) failed, so
    /// they cannot be proven unused: never reused until a synchronize of every stream that
    /// used them succeeds (see [`super::CachingAllocator::release_quarantined`]). Not part of
    /// `pending_free_bytes`. A memreuse figure; PyTorch has no equivalent.
    pub quarantined_bytes: u64,
    /// Fragmentation of the cached free blocks per pool (`1 - largest free block / free
    /// bytes`, see [`Fragmentation`]), computed when [`super::CachingAllocator::stats`] is
    /// called; `fragmentation.all.total_free == cached_free_bytes`.
    pub fragmentation: Fragmentation,
}

impl AllocatorStats {
    /// Resets every `peak` to its `current`.
    pub fn reset_peaks(&mut self) {
        for s in [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ] {
            s.reset_peak();
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }
}
