//! What can go wrong with a memory pool: each a typed error that says what was wrong and
//! what is valid. The allocator is unchanged by a refused request (nothing reserved, no
//! segment half-added), so it keeps serving.

use thiserror::Error;

use super::id::MemPoolId;
use crate::error::BackendError;

/// Why a memory-pool request failed ([`crate::allocator::AllocError::Pool`]).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolError {
    /// The pool was dropped or closed: its cached segments went back, and it takes no
    /// allocations any more. Allocate from a live [`super::MemPool`] or the default pool.
    #[error(
        "memreuse allocator: memory pool {id} was {how}; it takes no allocations (use a live pool or the default pool)"
    )]
    Released {
        /// The pool.
        id: MemPoolId,
        /// `dropped` or `closed`.
        how: &'static str,
    },
    /// The id names no pool of this allocator (a pool of another device's allocator, or an
    /// id made up by hand). Pass the id of a [`super::MemPool`] created on this allocator.
    #[error(
        "memreuse allocator: {id} is not a memory pool of this allocator; pass the id of a MemPool created on it"
    )]
    Unknown {
        /// The id given.
        id: MemPoolId,
    },
    /// The pool's segment source failed with something other than out-of-memory (which
    /// the chain treats as the device running out, as PyTorch treats a null from a
    /// pluggable allocator).
    #[error(
        "memreuse allocator: segment source `{source_name}` of memory pool {id} failed: {error}"
    )]
    SourceFailed {
        /// The pool.
        id: MemPoolId,
        /// The source's name.
        source_name: String,
        /// What it returned (boxed: the error stays small on the allocation path).
        error: Box<BackendError>,
    },
    /// The source returned memory that cannot back a segment (misaligned, or fewer bytes
    /// than asked for). The memory was handed back to the source.
    #[error(
        "memreuse allocator: segment source `{source_name}` of memory pool {id} returned unusable memory: {reason}"
    )]
    BadMemory {
        /// The pool.
        id: MemPoolId,
        /// The source's name.
        source_name: String,
        /// What was wrong and what is valid.
        reason: String,
    },
}
