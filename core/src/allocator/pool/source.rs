//! A pool's segment source: who allocates the pool's raw memory, as a
//! `CUDAPluggableAllocator` does for a `torch.cuda.MemPool` (NCCL's `ncclMemAlloc` for
//! registered communication buffers, a host-pinned allocator for offloading).

use crate::error::BackendError;
use crate::ids::DevicePtr;

/// The alignment every segment's base must have: the allocator's smallest block (512
/// bytes, PyTorch's `kMinBlockSize`), so every block carved from it stays aligned.
pub const SEGMENT_ALIGNMENT: u64 = 512;

/// Memory a [`SegmentSource`] handed out: its base and how many bytes are usable there.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SourceMemory {
    /// Base address (a multiple of [`SEGMENT_ALIGNMENT`]).
    pub ptr: DevicePtr,
    /// Usable bytes from `ptr` (at least the bytes asked for).
    pub len: u64,
}

/// Allocates and frees a pool's raw segments instead of the backend's `malloc`/`free`.
///
/// Called with the allocator's lock held, as PyTorch calls a pluggable allocator inside
/// its lock: a source must not call back into the allocator. An out-of-memory error
/// ([`BackendError::is_out_of_memory`]) makes the allocator's retry chain go on (release
/// cached memory, retry, then report out of memory); any other error is returned to the
/// caller as [`super::PoolError::SourceFailed`]. Memory that is misaligned or shorter than
/// asked is handed back through [`SegmentSource::free`] and refused
/// ([`super::PoolError::BadMemory`]).
pub trait SegmentSource: Send + Sync {
    /// A short name for messages (`ncclMemAlloc`, `pinned-host`).
    fn name(&self) -> &str;

    /// At least `bytes` bytes of device memory, aligned to [`SEGMENT_ALIGNMENT`].
    fn alloc(&self, bytes: u64) -> Result<SourceMemory, BackendError>;

    /// Gives back memory [`SegmentSource::alloc`] returned (`len` is the `len` it said).
    fn free(&self, memory: SourceMemory) -> Result<(), BackendError>;
}

/// Why `memory` cannot back a segment of `bytes` bytes, if it cannot.
pub(crate) fn unusable(memory: SourceMemory, bytes: u64) -> Option<String> {
    if memory.ptr.addr() % SEGMENT_ALIGNMENT != 0 {
        return Some(format!(
            "base {:#x} is not a multiple of {SEGMENT_ALIGNMENT} bytes",
            memory.ptr.addr()
        ));
    }
    if memory.len < bytes {
        return Some(format!(
            "{} bytes returned where {bytes} were asked for (a source returns at least what is asked)",
            memory.len
        ));
    }
    if memory.ptr.addr().checked_add(memory.len).is_none() {
        return Some(format!(
            "{:#x} + {} bytes passes the end of the address space",
            memory.ptr.addr(),
            memory.len
        ));
    }
    None
}
