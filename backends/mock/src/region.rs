//! What ops declare and what their bodies see: declared byte ranges ([`MemAccess`]) and
//! the locked view of them a joint or custom op's body works on ([`JointMemory`]).

use memreuse_core::{AccessKind, BackendError, DevicePtr};
use parking_lot::MutexGuard;

use crate::error::BACKEND_NAME;
use crate::memory::Span;

/// The data movement of a joint or custom op. It runs once, on a worker (or the driving
/// host thread), with every declared region locked; it must not block on other device
/// work, and must not own the last handle to a device of the cluster.
pub type JointBody = Box<dyn FnOnce(&mut JointMemory<'_>) -> Result<(), BackendError> + Send>;

/// One byte range an op declares it reads or writes. The race detector checks it, and
/// the op's body sees it as a region (in declaration order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemAccess {
    /// First byte.
    pub ptr: DevicePtr,
    /// Length.
    pub bytes: u64,
    /// Read or write.
    pub kind: AccessKind,
}

impl MemAccess {
    /// The op reads `[ptr, ptr + bytes)`.
    pub fn read(ptr: DevicePtr, bytes: u64) -> MemAccess {
        MemAccess {
            ptr,
            bytes,
            kind: AccessKind::Read,
        }
    }

    /// The op writes `[ptr, ptr + bytes)`.
    pub fn write(ptr: DevicePtr, bytes: u64) -> MemAccess {
        MemAccess {
            ptr,
            bytes,
            kind: AccessKind::Write,
        }
    }
}

/// The regions of a joint or custom op, per rank: `(device slot, spans)`.
pub(crate) struct JointRegions(Vec<(usize, Vec<Span>)>);

impl JointRegions {
    pub(crate) fn new(ranks: Vec<(usize, Vec<Span>)>) -> JointRegions {
        JointRegions(ranks)
    }
}

/// What a joint or custom op's body sees: every declared region of every rank, locked for
/// the duration of the body. Regions are addressed by `(rank, region index)`; a custom op
/// has the single rank 0.
pub struct JointMemory<'a> {
    guards: Vec<MutexGuard<'a, Vec<u8>>>,
    /// Per rank, per region: `(guard index, offset, len)`.
    index: Vec<Vec<(usize, usize, usize)>>,
}

impl<'a> JointMemory<'a> {
    /// Locks every distinct buffer behind `regions`, in (device, address) order (the order
    /// every multi-buffer op uses, so concurrent ops cannot deadlock).
    pub(crate) fn lock(regions: &'a JointRegions) -> JointMemory<'a> {
        let mut keys: Vec<(usize, u64, &'a crate::memory::Buffer)> = regions
            .0
            .iter()
            .flat_map(|(dev, spans)| {
                spans
                    .iter()
                    .filter_map(move |s| s.buf.as_ref().map(|b| (*dev, s.base, b)))
            })
            .collect();
        keys.sort_by_key(|k| (k.0, k.1));
        keys.dedup_by_key(|k| (k.0, k.1));
        let guards = keys.iter().map(|k| k.2.lock()).collect();
        let index = regions
            .0
            .iter()
            .map(|(dev, spans)| {
                spans
                    .iter()
                    .map(|s| {
                        let g = keys
                            .binary_search_by_key(&(*dev, s.base), |k| (k.0, k.1))
                            .unwrap_or(usize::MAX);
                        (g, s.offset, s.len)
                    })
                    .collect()
            })
            .collect();
        JointMemory { guards, index }
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.index.len()
    }

    /// Number of regions `rank` declared.
    pub fn regions(&self, rank: usize) -> usize {
        self.index.get(rank).map_or(0, Vec::len)
    }

    fn locate(&self, rank: usize, region: usize) -> Result<(usize, usize, usize), BackendError> {
        self.index
            .get(rank)
            .and_then(|r| r.get(region))
            .copied()
            .filter(|(g, _, _)| *g < self.guards.len())
            .ok_or_else(|| {
                BackendError::invalid_argument(
                    BACKEND_NAME,
                    "JointMemory",
                    format!("rank {rank} has no backed region {region}"),
                )
            })
    }

    /// The bytes of region `region` of `rank`.
    pub fn bytes(&self, rank: usize, region: usize) -> Result<&[u8], BackendError> {
        let (g, off, len) = self.locate(rank, region)?;
        Ok(&self.guards[g][off..off + len])
    }

    /// The bytes of region `region` of `rank`, writable.
    pub fn bytes_mut(&mut self, rank: usize, region: usize) -> Result<&mut [u8], BackendError> {
        let (g, off, len) = self.locate(rank, region)?;
        Ok(&mut self.guards[g][off..off + len])
    }
}
