//! Per-pool statistics.

use super::id::MemPoolId;

/// The figures of one memory pool ([`super::MemPool::stats`]). Its memory is also counted
/// in the allocator-wide [`crate::allocator::AllocatorStats`], as PyTorch's device
/// statistics count private pools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemPoolStats {
    /// The pool.
    pub id: MemPoolId,
    /// Segments the pool holds.
    pub segments: u64,
    /// Bytes of those segments.
    pub reserved_bytes: u64,
    /// Highest `reserved_bytes` since the pool was created.
    pub peak_reserved_bytes: u64,
    /// Bytes of allocated blocks.
    pub allocated_bytes: u64,
    /// Allocated blocks.
    pub allocations: u64,
    /// Bytes of allocated and pending-free blocks.
    pub active_bytes: u64,
    /// Bytes the callers asked for, of active blocks.
    pub requested_bytes: u64,
    /// Bytes of free cached blocks.
    pub cached_free_bytes: u64,
    /// Segments obtained (from the pool's source, else the device).
    pub num_device_alloc: u64,
    /// Segments given back.
    pub num_device_free: u64,
    /// False once the pool was dropped or closed.
    pub live: bool,
}
