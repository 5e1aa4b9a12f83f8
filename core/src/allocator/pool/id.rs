//! A memory pool's identity, in the shape of PyTorch's `MempoolId_t`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A memory pool's id: a pair, as PyTorch's `MempoolId_t` (`(CaptureId_t, CaptureId_t)`).
///
/// `(0, 0)` is the default pool (ordinary allocations). PyTorch gives CUDA-graph pools
/// `(graph id, 0)` and user-created `torch.cuda.MemPool`s `(0, uid)`; memreuse has no graph
/// capture, so every pool it creates is `(0, uid)` with `uid` unique in the process, and
/// PyTorch's memory viewer groups segments by this pair (`segment_pool_id`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct MemPoolId(pub u64, pub u64);

impl MemPoolId {
    /// The default pool: ordinary allocations, never a [`super::MemPool`]'s.
    pub const DEFAULT: MemPoolId = MemPoolId(0, 0);

    /// A user pool id never handed out before in this process (`(0, uid)`, uid from 1).
    pub(crate) fn fresh() -> MemPoolId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        MemPoolId(0, NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// True for [`MemPoolId::DEFAULT`].
    pub fn is_default(self) -> bool {
        self == MemPoolId::DEFAULT
    }
}

impl fmt::Display for MemPoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.0, self.1)
    }
}
