//! The stream-aware caching allocator (docs/design.md §3), generic over [`crate::Backend`].
//!
//! PyTorch's `CUDACachingAllocator` is the baseline: per-stream best-fit pools of blocks
//! carved from device segments, split and merged, with `record_stream` delaying reuse until
//! events on the using streams completed. memreuse adds per-work stream uses
//! ([`CachingAllocator::record_stream_for_work`], [`CachingAllocator::erase_stream`]) and
//! generation-checked block references ([`BlockRef`]) for the mode-3 erase of a dropped
//! tensor.
//!
//! # Layers
//! - `index/`: the device-free block index (segments and blocks as addresses and sizes,
//!   best fit with size-class bitmaps in PyTorch's exact order, split and merge, the
//!   memory figures). No `Backend` type, no device handles; tested alone.
//! - `state.rs`, `reclaim.rs`, `uses.rs`: the device-facing layer under the allocator lock
//!   (raw segments, stream uses and events, quarantine, the retry chain's steps).
//! - `expandable.rs` (with `index/expandable.rs`): `expandable_segments:True`, PyTorch's
//!   expandable segments: one reserved range per (stream, pool), pages mapped as blocks need
//!   them and whole free pages unmapped on release (docs/expandable-segments.md).
//! - `caching.rs`: the public face and the malloc chain, which drops the lock around
//!   callbacks and observers. The trace ring buffer is off by default
//!   ([`AllocatorConfig::with_trace_capacity`] turns it on), as PyTorch's memory history is.
//!
//! # Heap allocation on the hot path
//! None in the steady state: a cached allocate and a free without stream uses touch the
//! index's slab and class vectors (which keep their capacity) and return a [`Storage`]
//! handle by value (its handle count lives in the block's slot; no per-allocation `Arc`).
//! The per-work `record_stream` path allocates only when a block's use vector grows beyond
//! what its slot held before.

// Prose names PyTorch and torch_npu throughout; they are projects, not code items.
#![allow(clippy::doc_markdown)]

mod block;
mod caching;
mod callbacks;
mod config;
mod events;
mod expandable;
mod fragmentation;
mod index;
mod oom;
mod oom_culprits;
mod reclaim;
mod sizes;
mod snapshot;
mod state;
mod stats;
mod storage;
mod trace;
mod use_ledger;
mod uses;

pub use block::UseOwner;
pub use caching::{CachingAllocator, FreeMemoryCallback, LAZY_RECLAIM_EVENTS, OomObserver};
pub use callbacks::CallbackId;
pub use config::{
    ALLOC_CONF_ENV, AllocatorConfig, ConfigError, DEFAULT_TRACE_CAPACITY, VALID_KEYS,
};
pub use fragmentation::{Fragmentation, PoolFragmentation};
pub use index::BlockRef;
pub use oom::{AllocError, FormatSize, OomInfo, OutOfMemory};
pub use oom_culprits::{OomCulprits, OomExplainer, PendingHold, ShelfHold};
pub use sizes::{
    LARGE_BUFFER, MAX_NON_SPLIT_ROUNDING, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, ROUND_LARGE,
    ROUNDUP_INTERVALS, SMALL_BUFFER, SMALL_SIZE,
};
pub use snapshot::{BlockInfo, BlockState, SegmentInfo, SegmentType, Snapshot};
pub use stats::{AllocatorStats, Stat, StatArray};
pub use storage::{Storage, WeakStorage};
pub use trace::{TraceAction, TraceEntry, trace_clock_us};
pub use use_ledger::UseLedger;
pub use uses::EraseOutcome;
