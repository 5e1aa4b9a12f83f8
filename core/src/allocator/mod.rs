//! The stream-aware caching allocator (DESIGN.md §3), generic over [`crate::Backend`].
//!
//! PyTorch's `CUDACachingAllocator` is the baseline: per-stream best-fit pools of blocks
//! carved from device segments, split and merged, with `record_stream` delaying reuse until
//! events on the using streams completed. memreuse adds per-work stream uses
//! ([`CachingAllocator::record_stream_for_work`], [`CachingAllocator::erase_stream`]) and
//! generation-checked block references ([`BlockRef`]) for the mode-3 erase of a dropped
//! tensor.
//!
//! # The cached fast path
//! A block freed with no stream uses is parked unmerged (`bins.rs`) and taken back by the
//! next request that eager best fit would serve with it, with no pool operation; every
//! observable effect (addresses, sizes, statistics, snapshots) is that of PyTorch's eager
//! merge-on-free. The trace ring buffer is off by default
//! ([`AllocatorConfig::with_trace_capacity`] turns it on), as PyTorch's memory history is.
//!
//! # Heap allocation on the hot path
//! A cached allocate and a free without stream uses allocate only for the returned
//! [`Storage`] handle (one `Arc`) and whatever the ordered pool sets need when a B-tree node
//! splits (rare once the pools are warm). Slots, their use and event vectors, the event pool
//! and the trace ring buffer (once full) are reused; the per-work `record_stream` path
//! allocates only when a block's use vector grows beyond what its slot held before.

// Prose names PyTorch and torch_npu throughout; they are projects, not code items.
#![allow(clippy::doc_markdown)]

mod bins;
mod block;
mod caching;
mod callbacks;
mod config;
mod events;
mod fragmentation;
// Wired into the allocator in the next step.
#[allow(dead_code)]
mod index;
mod oom;
mod pool;
mod reclaim;
mod sizes;
mod snapshot;
mod state;
mod stats;
mod storage;
mod trace;
mod uses;

pub use block::{BlockRef, UseOwner};
pub use caching::{CachingAllocator, FreeMemoryCallback, LAZY_RECLAIM_EVENTS, OomObserver};
pub use callbacks::CallbackId;
pub use config::{
    ALLOC_CONF_ENV, AllocatorConfig, ConfigError, DEFAULT_TRACE_CAPACITY, VALID_KEYS,
};
pub use fragmentation::{Fragmentation, PoolFragmentation};
pub use oom::{AllocError, FormatSize, OomInfo, OutOfMemory};
pub use sizes::{
    LARGE_BUFFER, MAX_NON_SPLIT_ROUNDING, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, ROUND_LARGE,
    ROUNDUP_INTERVALS, SMALL_BUFFER, SMALL_SIZE,
};
pub use snapshot::{BlockInfo, BlockState, SegmentInfo, SegmentType, Snapshot};
pub use stats::{AllocatorStats, Stat, StatArray};
pub use storage::{Storage, WeakStorage};
pub use trace::{TraceAction, TraceEntry, trace_clock_us};
pub use uses::EraseOutcome;
