//! Tensor storage: a reference-counted handle to an allocated block.

use std::fmt;
use std::sync::{Arc, Weak};

use crate::backend::Backend;
use crate::ids::{AllocationId, DevicePtr, StreamId};

use super::CachingAllocator;
use super::block::BlockRef;

pub(crate) struct StorageInner<B: Backend> {
    pub allocator: Arc<CachingAllocator<B>>,
    pub block: BlockRef,
    pub ptr: DevicePtr,
    pub size: u64,
    pub requested: u64,
    pub stream: B::Stream,
    pub stream_id: StreamId,
    pub allocation_id: AllocationId,
}

impl<B: Backend> Drop for StorageInner<B> {
    fn drop(&mut self) {
        // The last handle is gone: the block goes back through the allocator, into its pool
        // or into pending-free when other streams used it.
        self.allocator.free_block(self.block);
    }
}

/// A reference-counted handle to an allocated block. Cloning gives another handle to the
/// same block; dropping the last handle frees the block through its allocator (into the
/// pool, or pending-free if it has stream uses).
pub struct Storage<B: Backend> {
    pub(crate) inner: Arc<StorageInner<B>>,
}

impl<B: Backend> Clone for Storage<B> {
    fn clone(&self) -> Self {
        Storage {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<B: Backend> fmt::Debug for Storage<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Storage")
            .field("ptr", &self.inner.ptr)
            .field("size", &self.inner.size)
            .field("requested_size", &self.inner.requested)
            .field("stream", &self.inner.stream_id)
            .field("block", &self.inner.block)
            .field("allocation", &self.inner.allocation_id)
            .finish()
    }
}

impl<B: Backend> Storage<B> {
    /// Device address of the block.
    pub fn ptr(&self) -> DevicePtr {
        self.inner.ptr
    }

    /// Size of the block (the request rounded up by the allocator).
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// Bytes the caller asked for.
    pub fn requested_size(&self) -> u64 {
        self.inner.requested
    }

    /// The stream the block was allocated on (the only stream its pool serves).
    pub fn stream(&self) -> &B::Stream {
        &self.inner.stream
    }

    /// Identity of [`Storage::stream`].
    pub fn stream_id(&self) -> StreamId {
        self.inner.stream_id
    }

    /// Generation-checked reference to the block, valid until the block returns to the pool
    /// (for the mode-3 `erase_stream_by_block` path).
    pub fn block_ref(&self) -> BlockRef {
        self.inner.block
    }

    /// Identity of this hand-out (as annotated on the backend).
    pub fn allocation_id(&self) -> AllocationId {
        self.inner.allocation_id
    }

    /// The allocator the block came from.
    pub fn allocator(&self) -> &Arc<CachingAllocator<B>> {
        &self.inner.allocator
    }

    /// A handle that does not keep the block allocated.
    pub fn downgrade(&self) -> WeakStorage<B> {
        WeakStorage {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// Number of strong handles (diagnostics).
    pub fn handle_count(&self) -> usize {
        Arc::strong_count(&self.inner)
    }
}

/// A non-owning handle to a [`Storage`].
pub struct WeakStorage<B: Backend> {
    inner: Weak<StorageInner<B>>,
}

impl<B: Backend> Clone for WeakStorage<B> {
    fn clone(&self) -> Self {
        WeakStorage {
            inner: Weak::clone(&self.inner),
        }
    }
}

impl<B: Backend> fmt::Debug for WeakStorage<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WeakStorage")
    }
}

impl<B: Backend> WeakStorage<B> {
    /// The storage, if some strong handle still keeps it allocated.
    pub fn upgrade(&self) -> Option<Storage<B>> {
        self.inner.upgrade().map(|inner| Storage { inner })
    }
}
