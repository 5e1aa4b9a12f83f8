//! The allocator's error: out of memory, a backend failure, a stream of another device, or a
//! refused memory-pool request.

use thiserror::Error;

use super::oom::OutOfMemory;
use super::pool::PoolError;
use crate::error::BackendError;

/// Why [`super::CachingAllocator::allocate`] (or event processing) failed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllocError {
    /// Out of memory after the whole retry chain (boxed: the report is large and the
    /// path cold, so `Result<_, AllocError>` stays small on the hot path).
    #[error(transparent)]
    OutOfMemory(#[from] Box<OutOfMemory>),
    /// A backend call failed with something other than out-of-memory.
    #[error("memreuse allocator: {0}")]
    Backend(#[from] BackendError),
    /// A stream of another device (or another backend instance) was passed; pass a stream
    /// of this allocator's backend (its default stream or one it created).
    #[error(
        "memreuse allocator ({backend} device {device}): {call} was given a stream of another \
         device; pass a stream created by this allocator's backend"
    )]
    ForeignStream {
        /// The refused call (`allocate`, `record_stream`).
        call: &'static str,
        /// This allocator's backend name.
        backend: String,
        /// This allocator's device index.
        device: usize,
    },
    /// A memory-pool request was refused (a released or unknown pool, a failing segment
    /// source); the allocator is unchanged by it. Boxed, as the out-of-memory report is.
    #[error(transparent)]
    Pool(Box<PoolError>),
}

impl From<PoolError> for AllocError {
    fn from(e: PoolError) -> Self {
        AllocError::Pool(Box::new(e))
    }
}

impl From<OutOfMemory> for AllocError {
    fn from(oom: OutOfMemory) -> Self {
        AllocError::OutOfMemory(Box::new(oom))
    }
}
