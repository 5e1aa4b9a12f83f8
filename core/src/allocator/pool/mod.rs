//! Memory pools (`torch.cuda.MemPool`): segments of their own that no other pool and no
//! ordinary allocation ever uses (docs/memory-pools.md).
//!
//! - `id.rs`: [`MemPoolId`], PyTorch's `MempoolId_t` pair.
//! - `source.rs`: [`SegmentSource`], who allocates a pool's raw memory (a pluggable
//!   allocator: `ncclMemAlloc` for registered communication buffers).
//! - `table.rs`: the pools behind the allocator's lock (options, source, life, counters)
//!   and the scopes that route a thread's allocations into a pool.
//! - `malloc.rs`: the pool-aware steps of the allocator's chain (raw memory from a source,
//!   the oversize release within a pool, `use_on_oom`, a pool's own release).
//! - `handle.rs`: [`MemPool`] and its [`PoolScope`] guard, the public face.
//! - `stats.rs`: [`MemPoolStats`].
//!
//! The index keeps each pool's free blocks in a lane of their own (`index/lanes.rs`), so
//! best fit, split and merge never cross pools; everything else (stream uses, pending
//! frees, events, the trace, the allocator-wide figures) is shared with ordinary
//! allocations, as in PyTorch, whose device statistics include private pools' memory.

mod error;
mod handle;
mod id;
mod malloc;
mod source;
mod stats;
mod table;

pub use error::PoolError;
pub use handle::{MemPool, PoolScope};
pub use id::MemPoolId;
pub(crate) use malloc::obtain_raw;
pub use source::{SEGMENT_ALIGNMENT, SegmentSource, SourceMemory};
pub use stats::MemPoolStats;
pub use table::MemPoolOptions;
pub(crate) use table::{DEFAULT_LANE, PoolTable};
