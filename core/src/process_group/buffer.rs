//! [`CommBuffer`]: a tensor as a collective sees it (storage, element type, element count).

use crate::allocator::Storage;
use crate::backend::Backend;
use crate::comm::DType;

use super::error::PgError;

/// A tensor as a process-group operation sees it: a [`Storage`], the element type and how
/// many elements of it to communicate.
///
/// Every collective takes `impl Into<CommBuffer>`. A plain `&Storage` is the whole buffer
/// read as [`DType::F32`]; [`CommBuffer::new`] names another element type, and
/// [`CommBuffer::with_count`] communicates only the first `count` elements. A buffer whose
/// size is not a whole number of elements, or a count that does not fit the buffer, is
/// [`PgError::InvalidArgument`] (never a silent truncation).
///
/// ```
/// use std::sync::Arc;
/// use memreuse_core::process_group::CommBuffer;
/// use memreuse_core::testing::ManualBackend;
/// use memreuse_core::{AllocatorConfig, Backend, CachingAllocator, DType};
///
/// let device = Arc::new(ManualBackend::new(1 << 30));
/// let allocator = CachingAllocator::new(Arc::clone(&device), AllocatorConfig::default());
/// let t = allocator.allocate(4096, &device.default_stream()).unwrap();
///
/// assert_eq!(CommBuffer::from(&t).element_count("all_reduce").unwrap(), 1024);
/// let first_ten = CommBuffer::new(&t, DType::F32).with_count(10);
/// assert_eq!(first_ten.element_count("all_reduce").unwrap(), 10);
/// assert!(CommBuffer::new(&t, DType::F32).with_count(1025).element_count("all_reduce").is_err());
/// ```
pub struct CommBuffer<'a, B: Backend> {
    storage: &'a Storage<B>,
    dtype: DType,
    count: Option<usize>,
}

impl<B: Backend> Clone for CommBuffer<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for CommBuffer<'_, B> {}

impl<B: Backend> std::fmt::Debug for CommBuffer<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommBuffer")
            .field("storage", self.storage)
            .field("dtype", &self.dtype)
            .field("count", &self.count)
            .finish()
    }
}

impl<'a, B: Backend> CommBuffer<'a, B> {
    /// The whole of `storage`, as elements of `dtype`.
    pub fn new(storage: &'a Storage<B>, dtype: DType) -> Self {
        CommBuffer {
            storage,
            dtype,
            count: None,
        }
    }

    /// Only the first `count` elements (they must fit the storage's requested size).
    #[must_use]
    pub fn with_count(mut self, count: usize) -> Self {
        self.count = Some(count);
        self
    }

    /// The storage.
    pub fn storage(&self) -> &'a Storage<B> {
        self.storage
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// How many elements `op` communicates: the explicit count, or the requested size
    /// divided by the element size. A requested size that is not a whole number of
    /// elements, or a count whose bytes exceed it, is an error naming both.
    pub fn element_count(&self, op: &'static str) -> Result<usize, PgError> {
        let bytes = self.storage.requested_size();
        let elem = self.dtype.size_bytes();
        let dtype = self.dtype;
        match self.count {
            None if bytes % elem == 0 => Ok((bytes / elem) as usize),
            None => Err(PgError::InvalidArgument {
                op,
                reason: format!(
                    "a buffer of {bytes} bytes is not a whole number of {dtype} elements \
                     ({elem} bytes each): allocate a multiple of {elem} bytes or pass \
                     CommBuffer::new(&storage, dtype).with_count(n)"
                ),
            }),
            Some(count) => match (count as u64).checked_mul(elem) {
                Some(need) if need <= bytes => Ok(count),
                _ => Err(PgError::InvalidArgument {
                    op,
                    reason: format!(
                        "{count} {dtype} elements ({elem} bytes each) do not fit a buffer of \
                         {bytes} bytes (at most {} elements)",
                        bytes / elem
                    ),
                }),
            },
        }
    }
}

impl<'a, B: Backend> From<&'a Storage<B>> for CommBuffer<'a, B> {
    /// The whole storage as `f32` elements.
    fn from(storage: &'a Storage<B>) -> Self {
        CommBuffer::new(storage, DType::F32)
    }
}
