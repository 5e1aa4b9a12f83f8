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
//!   Every block decision is made there: best fit, split, merge, the figures, and which
//!   blocks the retry chain releases, unmaps or spares (`index/victims.rs`).
//! - `pending.rs`: the pending-free lifecycle, one owner: stream uses, the blocks that wait
//!   for events on those streams, the events and their pool, quarantine.
//! - `state.rs`, `reclaim.rs`: the device-facing layer under the allocator lock (raw
//!   segments, the per-process limit, the retry chain's steps), carrying out the index's
//!   decisions and applying the pending frees' changes to it.
//! - `expandable.rs` (with `index/expandable.rs`): `expandable_segments:True`, PyTorch's
//!   expandable segments: one reserved range per (stream, pool), pages mapped as blocks need
//!   them and whole free pages unmapped on release (docs/expandable-segments.md).
//! - `oom/`: everything about an out-of-memory (report, culprits, message, the end of the
//!   chain with its snapshot, observers and explainers).
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

mod alloc_error;
mod caching;
mod callbacks;
mod config;
mod config_env;
mod config_keys;
mod events;
mod expandable;
mod expandable_segment;
mod fragmentation;
mod hooks;
mod index;
mod oom;
mod pending;
mod pool;
mod reclaim;
mod segment_events;
mod sizes;
mod snapshot;
mod snapshot_display;
mod state;
mod stats;
mod storage;
mod stream_use;
mod trace;
mod unlocked_malloc;
mod use_ledger;

pub use alloc_error::AllocError;
pub use caching::{CachingAllocator, FreeMemoryCallback, LAZY_RECLAIM_EVENTS};
pub use callbacks::CallbackId;
pub use config::{
    ALLOC_CONF_ENV, AllocatorConfig, ConfigError, DEFAULT_TRACE_CAPACITY, VALID_KEYS,
};
pub use config_env::{AllocConfPlatform, ChosenConf, PYTORCH_ALLOC_CONF_ENVS};
pub use config_keys::{KNOWN_UNSUPPORTED_KEYS, KeyOrigin};
pub use fragmentation::{Fragmentation, PoolFragmentation};
pub use index::BlockRef;
pub(crate) use oom::OomSnapshotWriter;
pub use oom::{
    FormatSize, OOM_SNAPSHOT_ENV, OomCulprits, OomExplainer, OomInfo, OomObserver, OutOfMemory,
    PendingHold, Rounding, RoundingCause, ShelfHold, culprit_holds_visited,
};
pub use pending::EraseOutcome;
pub use pool::{
    MemPool, MemPoolId, MemPoolOptions, MemPoolStats, PoolError, PoolScope, SEGMENT_ALIGNMENT,
    SegmentSource, SourceMemory,
};
pub use segment_events::{
    MAX_KEPT_FAILURES, SegmentEvent, SegmentEventFailure, SegmentEventKind, SegmentSubscriber,
    SubscriberError,
};
pub use sizes::{
    LARGE_BUFFER, MAX_NON_SPLIT_ROUNDING, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, ROUND_LARGE,
    ROUNDUP_INTERVALS, SMALL_BUFFER, SMALL_SIZE,
};
pub use snapshot::{BlockInfo, BlockState, SegmentInfo, SegmentType, Snapshot};
pub use stats::{AllocatorStats, Stat, StatArray};
pub use storage::{Storage, WeakStorage};
pub use stream_use::UseOwner;
pub use trace::{TraceAction, TraceEntry, trace_clock_us};
pub use use_ledger::UseLedger;
