//! Pinned host buffers for host copies, pooled per device.
//!
//! With pinned memory (`aclrtMallocHost`) `aclrtMemcpyAsync` is truly asynchronous; with
//! pageable memory it returns only once the copy is done. torch_npu keeps a pinned host
//! caching allocator rather than allocating per copy, and so does this module: buffers are
//! sized in powers of two (at least [`MIN_PINNED`]), handed out by [`PinnedPool::take`] and
//! returned by [`PinnedPool::give`] once no enqueued copy reads them, and kept up to
//! [`MAX_CACHED_PINNED`] bytes.

use std::ffi::c_void;

use memreuse_core::BackendError;
use parking_lot::Mutex;

use crate::loader::Api;
use crate::result::{AclError, acl};

/// Smallest pinned buffer.
pub const MIN_PINNED: usize = 4096;
/// Idle pinned bytes a device keeps for reuse; beyond this, returned buffers are freed.
pub const MAX_CACHED_PINNED: usize = 64 << 20;

/// One pinned host buffer of `cap` bytes.
#[derive(Debug)]
pub(crate) struct Pinned {
    pub(crate) ptr: usize,
    pub(crate) cap: usize,
}

impl Pinned {
    pub(crate) fn as_mut_ptr(&self) -> *mut c_void {
        self.ptr as *mut c_void
    }
}

/// The idle pinned buffers of one device.
pub(crate) struct PinnedPool {
    api: &'static Api,
    idle: Mutex<Vec<Pinned>>,
}

impl PinnedPool {
    pub(crate) fn new(api: &'static Api) -> PinnedPool {
        PinnedPool {
            api,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A buffer of at least `len` bytes: the smallest idle one that fits (and is at most
    /// twice the size class), else a fresh `aclrtMallocHost`.
    pub(crate) fn take(&self, len: usize) -> Result<Pinned, BackendError> {
        let class = len.max(MIN_PINNED).next_power_of_two();
        {
            let mut idle = self.idle.lock();
            let best = idle
                .iter()
                .enumerate()
                .filter(|(_, b)| b.cap >= class && b.cap <= class * 2)
                .min_by_key(|(_, b)| b.cap)
                .map(|(i, _)| i);
            if let Some(i) = best {
                return Ok(idle.swap_remove(i));
            }
        }
        Ok(Pinned {
            ptr: acl::malloc_host(self.api, class)?,
            cap: class,
        })
    }

    /// Returns a buffer no enqueued copy reads any more.
    pub(crate) fn give(&self, buf: Pinned) {
        let mut idle = self.idle.lock();
        let cached: usize = idle.iter().map(|b| b.cap).sum();
        if cached + buf.cap <= MAX_CACHED_PINNED {
            idle.push(buf);
            return;
        }
        drop(idle);
        free_host(self.api, &buf);
    }
}

impl Drop for PinnedPool {
    fn drop(&mut self) {
        for b in self.idle.get_mut().drain(..) {
            free_host(self.api, &b);
        }
    }
}

fn free_host(api: &Api, buf: &Pinned) {
    // `buf` came from aclrtMallocHost and no enqueued copy reads it any more.
    if let Err(AclError(code)) = acl::free_host(api, buf.ptr) {
        tracing::warn!(code, "aclrtFreeHost failed");
    }
}
