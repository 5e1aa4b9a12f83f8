//! Small value types shared by every layer: device addresses, stream and allocation
//! identities, memory figures.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// An address in device memory. Backends hand these out; the allocator sub-divides them.
///
/// It is a plain number, never dereferenced on the host by the core crate.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The raw address.
    pub const fn addr(self) -> u64 {
        self.0
    }

    /// The address `bytes` past this one.
    ///
    /// Saturates instead of wrapping: an out-of-range pointer is reported by the backend,
    /// never turned into a small valid-looking address.
    #[must_use]
    pub const fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0.saturating_add(bytes))
    }
}

impl fmt::Debug for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A stream's identity within one backend device: comparable, hashable and cheap to copy.
///
/// The caching allocator keys its pools by this value, so two handles to the same stream
/// must give the same id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct StreamId(pub u64);

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream#{}", self.0)
    }
}

/// Identity of one hand-out of memory by the allocator (one `malloc`), unique in the process.
///
/// Backends that check memory accesses (the mock's race detector) use it to tell a race
/// inside one allocation (a schedule bug) from a race between two allocations that reused
/// the same bytes (an allocator or policy bug).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct AllocationId(pub u64);

impl AllocationId {
    /// A fresh id, never returned before in this process.
    pub fn fresh() -> AllocationId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        AllocationId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl fmt::Display for AllocationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "alloc#{}", self.0)
    }
}

/// Identity of one process-group work (one issued collective or batch), unique in the
/// process. Stream uses recorded on behalf of a work are erased per work (docs/design.md §3 rule 4).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct WorkId(pub u64);

impl WorkId {
    /// A fresh id, never returned before in this process.
    pub fn fresh() -> WorkId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        WorkId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl fmt::Display for WorkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "work#{}", self.0)
    }
}

/// Free and total device memory, in bytes, as the device reports them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct MemoryInfo {
    /// Bytes the device could still hand out.
    pub free: u64,
    /// Device capacity.
    pub total: u64,
}
