//! What makes reserved or device memory unusable at an out-of-memory: the culprits the
//! [`super::OutOfMemory`] message names.
//!
//! Four kinds, from counters the allocator and the process groups already keep:
//! - bytes **pending** behind a stream use (a work's collective on its comm stream, or the
//!   user's own `record_stream`), freed by the program but not reusable until that stream
//!   passes the free — a late `wait()` shows up here;
//! - bytes **held on the shelves** of works never waited (mode 2), reported by the process
//!   groups through [`crate::CachingAllocator::add_oom_explainer`];
//! - cached bytes free but **fragmented**, per pool (free bytes outside the largest block);
//! - device memory **outside the allocator** (communicator buffers, contexts), which
//!   [`super::OutOfMemory::outside_allocator`] already computes.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use super::super::fragmentation::{Fragmentation, PoolFragmentation};
use super::super::index::BlockIndex;
use super::super::pending::PendingFrees;
use super::super::stream_use::UseOwner;
use super::format::FormatSize;
use crate::backend::Backend;
use crate::ids::{StreamId, WorkId};

/// Freed bytes that wait for one stream use before they can be reused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingHold {
    /// Who recorded the use: a process-group work, or the user's `record_stream`.
    pub owner: UseOwner,
    /// The stream the freed blocks wait for.
    pub stream: StreamId,
    /// The operation of the owning work (`all_reduce`, ...), when a process group knows it.
    pub op: Option<&'static str>,
    /// Bytes of the pending-free blocks.
    pub bytes: u64,
    /// Number of pending-free blocks.
    pub blocks: u64,
}

/// Storages a work keeps alive on its shelf because it was never waited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShelfHold {
    /// The work.
    pub work: WorkId,
    /// Its operation (`all_reduce`, ...).
    pub op: &'static str,
    /// Bytes of the stashed storages.
    pub bytes: u64,
    /// Number of stashed storages.
    pub storages: u64,
}

/// The culprits of one out-of-memory; [`OomCulprits::is_empty`] when none was found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OomCulprits {
    /// Pending-free bytes per (owner, stream), largest first.
    pub pending: Vec<PendingHold>,
    /// Shelves of works never waited, largest first.
    pub shelved: Vec<ShelfHold>,
}

/// Called at out-of-memory (without the allocator lock) to add what the caller knows:
/// op names of pending works, shelves of works never waited.
pub type OomExplainer = dyn Fn(&mut OomCulprits) + Send + Sync;

impl OomCulprits {
    /// True when no pending or shelved bytes were found.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.shelved.is_empty()
    }

    /// Orders both lists largest first (after explainers added to them).
    pub fn sort(&mut self) {
        self.pending
            .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.stream.0.cmp(&b.stream.0)));
        self.shelved
            .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.work.0.cmp(&b.work.0)));
    }

    /// Adds pending entries seen earlier in the malloc chain that are not listed yet.
    pub(crate) fn merge_pending(&mut self, earlier: OomCulprits) {
        let listed: HashSet<(UseOwner, StreamId)> =
            self.pending.iter().map(|q| (q.owner, q.stream)).collect();
        self.pending.extend(
            earlier
                .pending
                .into_iter()
                .filter(|p| !listed.contains(&(p.owner, p.stream))),
        );
    }

    /// Names the operation of `work` in the pending entries it owns.
    pub fn name_work(&mut self, work: WorkId, op: &'static str) {
        for p in &mut self.pending {
            if p.owner == UseOwner::Work(work) {
                p.op = Some(op);
            }
        }
    }
}

/// Free cached bytes a pool cannot hand out as one block: all but its largest block.
pub(crate) fn fragmented_bytes(f: &Fragmentation) -> (u64, u64) {
    let crumbs = |p: &PoolFragmentation| p.total_free - p.largest_free;
    (crumbs(&f.small), crumbs(&f.large))
}

impl fmt::Display for PendingHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} blocks) pending behind ",
            FormatSize(self.bytes),
            self.blocks
        )?;
        match (self.owner, self.op) {
            (UseOwner::Work(w), Some(op)) => write!(f, "{w} ({op}) on {}", self.stream),
            (UseOwner::Work(w), None) => write!(f, "{w} on {}", self.stream),
            (UseOwner::User, _) => write!(f, "record_stream uses of {}", self.stream),
        }
    }
}

impl fmt::Display for ShelfHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} storages) on the shelf of {} ({}), never waited",
            FormatSize(self.bytes),
            self.storages,
            self.work,
            self.op
        )
    }
}

/// Uses visited by [`pending_culprits`] in this process (every walk adds the uses it
/// visits): what a test asserts to prove no cache miss walks the pending frees.
static HOLDS_VISITED: AtomicU64 = AtomicU64::new(0);

/// Uses of pending-free blocks visited so far, in this process, to name OOM culprits.
///
/// A cache miss walks none: the culprits are taken only when an out-of-memory is
/// reported, or just before the malloc chain synchronizes the streams that hold them.
#[doc(hidden)]
pub fn culprit_holds_visited() -> u64 {
    HOLDS_VISITED.load(Ordering::Relaxed)
}

/// The pending-free blocks grouped by the owner and stream of each use they wait for, in
/// the order each group first appears (one hash lookup per use: linear in the uses).
pub(crate) fn pending_culprits<B: Backend>(
    pending: &PendingFrees<B>,
    index: &BlockIndex,
) -> OomCulprits {
    let mut held: Vec<PendingHold> = Vec::new();
    let mut group: HashMap<(UseOwner, StreamId), usize> = HashMap::new();
    let mut visited = 0u64;
    for (slot, owner, stream) in pending.holds() {
        visited += 1;
        let size = index.block(slot).size;
        match group.entry((owner, stream)) {
            Entry::Occupied(i) => {
                let p = &mut held[*i.get()];
                p.bytes = p.bytes.saturating_add(size);
                p.blocks += 1;
            }
            Entry::Vacant(v) => {
                v.insert(held.len());
                held.push(PendingHold {
                    owner,
                    stream,
                    op: None,
                    bytes: size,
                    blocks: 1,
                });
            }
        }
    }
    HOLDS_VISITED.fetch_add(visited, Ordering::Relaxed);
    OomCulprits {
        pending: held,
        shelved: Vec::new(),
    }
}
