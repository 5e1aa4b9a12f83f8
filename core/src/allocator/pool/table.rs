//! The pools of one allocator, behind its lock: each pool's options and source, its
//! counters, whether it still takes allocations, and the scopes that route a thread's
//! allocations into a pool. Lanes are numbered from 1 in creation order (0 is the default
//! pool); the index keeps each lane's free blocks apart (`index/lanes.rs`).

use std::sync::Arc;
use std::thread::ThreadId;

use crate::ids::StreamId;

use super::error::PoolError;
use super::id::MemPoolId;
use super::source::SegmentSource;

/// The lane of the default pool (ordinary allocations).
pub(crate) const DEFAULT_LANE: u32 = 0;

/// How a pool behaves, fixed when it is created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemPoolOptions {
    /// An ordinary allocation about to run out of memory may take a cached block of this
    /// pool (PyTorch's `use_on_oom`): after the whole retry chain, before the error.
    pub use_on_oom: bool,
    /// Blocks of this pool are never split (PyTorch's `no_split`): an allocation takes a
    /// whole cached block or a new segment of its own.
    pub no_split: bool,
}

/// Where a pool is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Life {
    /// Takes allocations; its cached segments are released only by its own `empty_cache`.
    Live,
    /// Its handle was dropped or closed: no allocations; its segments go back to the
    /// device as they become free (the allocator's `empty_cache` and chain release them).
    Released(&'static str),
}

/// Counters of one pool (the figures of memory are walked from the index when asked).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PoolCounts {
    pub num_device_alloc: u64,
    pub num_device_free: u64,
    pub reserved: u64,
    pub peak_reserved: u64,
}

/// One pool.
pub(crate) struct PoolEntry {
    pub id: MemPoolId,
    pub options: MemPoolOptions,
    pub source: Option<Arc<dyn SegmentSource>>,
    pub life: Life,
    pub counts: PoolCounts,
}

/// A routing scope: this thread's allocations on these streams (every stream when empty)
/// go to `lane`.
struct Scope {
    token: u64,
    thread: ThreadId,
    streams: Vec<StreamId>,
    lane: u32,
}

/// Every pool of one allocator, and the open scopes.
#[derive(Default)]
pub(crate) struct PoolTable {
    /// Lane `i + 1` is `entries[i]`. Entries stay after release (their segments may still
    /// be allocated and the source frees them), so lanes are never reused.
    entries: Vec<PoolEntry>,
    scopes: Vec<Scope>,
    next_token: u64,
}

impl PoolTable {
    /// A new pool; returns its lane.
    pub fn create(
        &mut self,
        id: MemPoolId,
        options: MemPoolOptions,
        source: Option<Arc<dyn SegmentSource>>,
    ) -> u32 {
        self.entries.push(PoolEntry {
            id,
            options,
            source,
            life: Life::Live,
            counts: PoolCounts::default(),
        });
        self.entries.len() as u32
    }

    /// The pool of `lane` (never the default lane).
    pub fn entry(&self, lane: u32) -> Option<&PoolEntry> {
        self.entries.get((lane as usize).checked_sub(1)?)
    }

    pub fn entry_mut(&mut self, lane: u32) -> Option<&mut PoolEntry> {
        self.entries.get_mut((lane as usize).checked_sub(1)?)
    }

    /// The lane of `id`, live or not.
    pub fn lane_of(&self, id: MemPoolId) -> Result<u32, PoolError> {
        self.entries
            .iter()
            .position(|e| e.id == id)
            .map(|i| i as u32 + 1)
            .ok_or(PoolError::Unknown { id })
    }

    /// The lane of a request on `stream`: the pool named (`Some`), else the scopes'
    /// choice; refused when that pool takes no allocations.
    #[cold]
    pub fn lane_for(&self, pool: Option<MemPoolId>, stream: StreamId) -> Result<u32, PoolError> {
        let lane = match pool {
            Some(id) if id.is_default() => DEFAULT_LANE,
            Some(id) => self.lane_of(id)?,
            None => self.route(stream),
        };
        if lane != DEFAULT_LANE {
            self.check_live(lane)?;
        }
        Ok(lane)
    }

    /// `Ok` when `lane` takes allocations.
    pub fn check_live(&self, lane: u32) -> Result<(), PoolError> {
        match self.entry(lane) {
            Some(PoolEntry {
                life: Life::Live, ..
            }) => Ok(()),
            Some(PoolEntry {
                id,
                life: Life::Released(how),
                ..
            }) => Err(PoolError::Released { id: *id, how }),
            None => Err(PoolError::Unknown {
                id: MemPoolId(0, u64::from(lane)),
            }),
        }
    }

    /// True when `lane`'s pool has a segment source (its segments are then never
    /// expandable).
    #[inline]
    pub fn has_source(&self, lane: u32) -> bool {
        self.entry(lane).is_some_and(|e| e.source.is_some())
    }

    /// The id of `lane` ([`MemPoolId::DEFAULT`] for the default lane).
    pub fn id_of(&self, lane: u32) -> MemPoolId {
        self.entry(lane).map_or(MemPoolId::DEFAULT, |e| e.id)
    }

    /// Live pools that ordinary allocations may fall back on, in creation order.
    pub fn use_on_oom_lanes(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.options.use_on_oom && e.life == Life::Live)
            .map(|(i, _)| i as u32 + 1)
    }

    /// True when any scope is open (checked before the thread's id is looked up, so
    /// allocations pay nothing for routing while no scope exists).
    #[inline]
    pub fn routing(&self) -> bool {
        !self.scopes.is_empty()
    }

    /// The lane this thread's allocation on `stream` goes to: the most recently opened
    /// scope of this thread that covers the stream, else the default lane.
    #[cold]
    pub fn route(&self, stream: StreamId) -> u32 {
        let thread = std::thread::current().id();
        self.scopes
            .iter()
            .rev()
            .find(|s| s.thread == thread && (s.streams.is_empty() || s.streams.contains(&stream)))
            .map_or(DEFAULT_LANE, |s| s.lane)
    }

    /// Opens a scope of the current thread; returns its token.
    pub fn open_scope(&mut self, lane: u32, streams: Vec<StreamId>) -> u64 {
        self.next_token += 1;
        self.scopes.push(Scope {
            token: self.next_token,
            thread: std::thread::current().id(),
            streams,
            lane,
        });
        self.next_token
    }

    /// Closes the scope `token` (scopes may close in any order).
    pub fn close_scope(&mut self, token: u64) {
        self.scopes.retain(|s| s.token != token);
    }
}
