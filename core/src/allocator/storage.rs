//! Tensor storage: a counted handle to an allocated block.
//!
//! No heap allocation per hand-out: the handle carries what its getters return, and the
//! count of handles lives in the block's slot of the allocator's index (changed under the
//! allocator lock by `clone` and `drop`). A [`WeakStorage`] holds the block's
//! generation-checked [`BlockRef`]: it upgrades only while that block is still allocated.

use std::fmt;
use std::sync::{Arc, Weak};

use crate::backend::Backend;
use crate::ids::{AllocationId, DevicePtr, StreamId};

use super::CachingAllocator;
use super::index::BlockRef;

/// What a handle knows of its block, copied into every handle.
pub(crate) struct Hand<B: Backend> {
    pub block: BlockRef,
    pub ptr: DevicePtr,
    pub size: u64,
    pub requested: u64,
    pub stream: B::Stream,
    pub stream_id: StreamId,
    pub allocation_id: AllocationId,
}

impl<B: Backend> Clone for Hand<B> {
    fn clone(&self) -> Self {
        Hand {
            block: self.block,
            ptr: self.ptr,
            size: self.size,
            requested: self.requested,
            stream: self.stream.clone(),
            stream_id: self.stream_id,
            allocation_id: self.allocation_id,
        }
    }
}

/// A counted handle to an allocated block. Cloning gives another handle to the same block;
/// dropping the last handle frees the block through its allocator (into the pool, or
/// pending-free if it has stream uses).
pub struct Storage<B: Backend> {
    pub(crate) allocator: Arc<CachingAllocator<B>>,
    pub(crate) hand: Hand<B>,
}

impl<B: Backend> Drop for Storage<B> {
    fn drop(&mut self) {
        // The allocator frees the block when this was its last handle.
        self.allocator.drop_handle(self.hand.block);
    }
}

impl<B: Backend> Clone for Storage<B> {
    fn clone(&self) -> Self {
        let counted = self.allocator.add_handle(self.hand.block);
        debug_assert!(counted, "a live storage's block is allocated");
        Storage {
            allocator: Arc::clone(&self.allocator),
            hand: self.hand.clone(),
        }
    }
}

// The allocator and the stream handle are left out, as before the handle held them inline.
#[allow(clippy::missing_fields_in_debug)]
impl<B: Backend> fmt::Debug for Storage<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Storage")
            .field("ptr", &self.hand.ptr)
            .field("size", &self.hand.size)
            .field("requested_size", &self.hand.requested)
            .field("stream", &self.hand.stream_id)
            .field("block", &self.hand.block)
            .field("allocation", &self.hand.allocation_id)
            .finish()
    }
}

impl<B: Backend> Storage<B> {
    /// Device address of the block.
    pub fn ptr(&self) -> DevicePtr {
        self.hand.ptr
    }

    /// Size of the block (the request rounded up by the allocator).
    pub fn size(&self) -> u64 {
        self.hand.size
    }

    /// Bytes the caller asked for.
    pub fn requested_size(&self) -> u64 {
        self.hand.requested
    }

    /// The stream the block was allocated on (the only stream its pool serves).
    pub fn stream(&self) -> &B::Stream {
        &self.hand.stream
    }

    /// Identity of [`Storage::stream`].
    pub fn stream_id(&self) -> StreamId {
        self.hand.stream_id
    }

    /// Generation-checked reference to the block, valid until the block returns to the pool
    /// (for the mode-3 `erase_stream_by_block` path).
    pub fn block_ref(&self) -> BlockRef {
        self.hand.block
    }

    /// Identity of this hand-out (as annotated on the backend).
    pub fn allocation_id(&self) -> AllocationId {
        self.hand.allocation_id
    }

    /// The allocator the block came from.
    pub fn allocator(&self) -> &Arc<CachingAllocator<B>> {
        &self.allocator
    }

    /// A handle that does not keep the block allocated.
    pub fn downgrade(&self) -> WeakStorage<B> {
        WeakStorage {
            allocator: Arc::downgrade(&self.allocator),
            hand: self.hand.clone(),
        }
    }

    /// Number of strong handles (diagnostics; takes the allocator lock).
    pub fn handle_count(&self) -> usize {
        self.allocator.handle_count(self.hand.block) as usize
    }
}

/// A non-owning handle to a [`Storage`].
pub struct WeakStorage<B: Backend> {
    allocator: Weak<CachingAllocator<B>>,
    hand: Hand<B>,
}

impl<B: Backend> Clone for WeakStorage<B> {
    fn clone(&self) -> Self {
        WeakStorage {
            allocator: Weak::clone(&self.allocator),
            hand: self.hand.clone(),
        }
    }
}

impl<B: Backend> fmt::Debug for WeakStorage<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WeakStorage")
    }
}

impl<B: Backend> WeakStorage<B> {
    /// The storage, if some strong handle still keeps it allocated (the block's generation
    /// tells a reused slot from the original block).
    pub fn upgrade(&self) -> Option<Storage<B>> {
        let allocator = self.allocator.upgrade()?;
        allocator.add_handle(self.hand.block).then(|| Storage {
            allocator,
            hand: self.hand.clone(),
        })
    }
}
