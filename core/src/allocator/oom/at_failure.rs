//! The end of the malloc chain: the report built from the state at the failure, then,
//! without the allocator lock, the OOM snapshot written, the observers called and the
//! explainers asked for the culprits they know.
//!
//! The snapshot is taken here, with the allocator's public
//! [`crate::CachingAllocator::snapshot`], at the moment of failure, before any observer can
//! free memory; the file is written by the writer that observe registers
//! (`snapshot_writer.rs`), so the allocator never depends on observe.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::super::callbacks::{CallbackId, Registry};
use super::super::expandable::MAX_RESERVE;
use super::super::state::{Request, Setup, State};
use super::super::trace::TraceAction;
use super::culprits::{OomCulprits, OomExplainer, pending_culprits};
use super::report::{OomInfo, OutOfMemory};
use super::rounding::{Ask, Rounding};
use super::snapshot_writer::write_oom_snapshot;
use crate::backend::Backend;

/// The environment variable naming the OOM snapshot file (read when an allocator is
/// created).
pub const OOM_SNAPSHOT_ENV: &str = "MEMREUSE_OOM_SNAPSHOT";

/// An out-of-memory observer.
pub type OomObserver = dyn Fn(&OomInfo) + Send + Sync;

/// What runs at an out-of-memory besides the report: the snapshot file, the observers and
/// the explainers, each behind its own small lock (never the allocator's).
pub(crate) struct OomHooks {
    observers: Registry<OomObserver>,
    /// Process groups' contributions to the `OutOfMemory` culprits (op names, shelves).
    explainers: Registry<OomExplainer>,
    /// Where to write a snapshot at out-of-memory (`{device}` replaced by the index).
    snapshot: Mutex<Option<PathBuf>>,
}

impl OomHooks {
    /// No observer or explainer; the snapshot path from [`OOM_SNAPSHOT_ENV`] if it is set
    /// and not empty.
    pub fn from_env() -> Self {
        OomHooks {
            observers: Registry::new(),
            explainers: Registry::new(),
            snapshot: Mutex::new(
                std::env::var_os(OOM_SNAPSHOT_ENV)
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from),
            ),
        }
    }

    pub fn add_observer(&self, cb: Arc<OomObserver>) -> CallbackId {
        self.observers.add(cb)
    }

    pub fn remove_observer(&self, id: CallbackId) {
        self.observers.remove(id);
    }

    pub fn add_explainer(&self, explain: Arc<OomExplainer>) -> CallbackId {
        self.explainers.add(explain)
    }

    pub fn remove_explainer(&self, id: CallbackId) {
        self.explainers.remove(id);
    }

    pub fn set_snapshot_path(&self, path: Option<PathBuf>) {
        *self.snapshot.lock() = path;
    }

    pub fn snapshot_path(&self) -> Option<PathBuf> {
        self.snapshot.lock().clone()
    }

    /// The end of the chain for `req`: the report (with `at_miss`, what was pending when
    /// the request missed the cache, if the chain changed it since), then without the lock
    /// the snapshot, the observers and the explainers. Returns the error for `allocate` to
    /// return.
    pub fn fail<B: Backend>(
        &self,
        allocator: &crate::CachingAllocator<B>,
        st: &mut MutexGuard<'_, State<B>>,
        su: &Setup<B>,
        req: &Request<'_, B>,
        at_miss: AtMiss,
    ) -> Box<OutOfMemory> {
        let (info, mut err) = report(st, su, req);
        // Not taken: nothing changed the pending frees since the miss, so the report's own
        // list is what was pending then.
        if let Some(earlier) = at_miss.0 {
            err.culprits.merge_pending(earlier);
        }
        // The snapshot shows the moment of failure: before observers free anything.
        let template = self.snapshot_path();
        MutexGuard::unlocked(st, || {
            if let Some(template) = template {
                match write_oom_snapshot(allocator.snapshot(), &info, &template) {
                    Ok(file) => err.snapshot = Some(file),
                    Err((file, why)) => err.snapshot_error = Some((file, why)),
                }
            }
            for observer in self.observers.snapshot() {
                observer(&info);
            }
            for explain in self.explainers.snapshot() {
                explain(&mut err.culprits);
            }
            err.culprits.sort();
        });
        Box::new(err)
    }
}

/// True when `req` is beyond what the device could ever hold, so the malloc chain
/// (which synchronizes streams, releases the cache and calls back) cannot help and the
/// request is refused at once as an out-of-memory: its block is larger than the
/// device's total (when the device reports one) or than the per-process limit, or, on a
/// device of unlimited total with expandable segments, larger than the most addresses
/// one expandable segment reserves ([`MAX_RESERVE`]; otherwise it would be mapped page
/// by page).
pub(crate) fn beyond_device<B: Backend>(
    st: &mut State<B>,
    su: &Setup<B>,
    req: &Request<'_, B>,
) -> bool {
    let total = su.backend.memory_info().map_or(0, |m| m.total);
    let cap = match total {
        0 => u64::MAX,
        u64::MAX if su.config.expandable_segments => MAX_RESERVE,
        t => t,
    };
    let limit = st.limit(su).ok().flatten().unwrap_or(u64::MAX);
    req.size > cap.min(limit)
}

/// What is pending in `st` now, grouped for the report.
pub(crate) fn culprits_now<B: Backend>(st: &State<B>) -> OomCulprits {
    pending_culprits(&st.pending, &st.index)
}

/// The pending frees as they were when a request missed the cache, taken only if the
/// malloc chain is about to change them.
///
/// The chain's later steps process events and synchronize the streams the pending frees
/// wait for, so an OOM report taken at its end would no longer see them. Walking them on
/// every miss would make each miss cost O(pending) (issue 27); instead the chain calls
/// [`AtMiss::capture`] just before each step that can change the pending frees (the
/// lazy-reclaim poll, the free-memory callbacks, the synchronizing release), and the
/// first call takes them. A miss served by a new segment walks nothing; one that reaches
/// the synchronizing release walks them once, no more than the synchronization itself
/// visits.
#[derive(Default)]
pub(crate) struct AtMiss(Option<OomCulprits>);

impl AtMiss {
    /// Takes the pending frees of `st`, unless they were taken earlier in this chain.
    pub fn capture<B: Backend>(&mut self, st: &State<B>) {
        if self.0.is_none() {
            self.0 = Some(if st.pending.is_empty() {
                OomCulprits::default()
            } else {
                culprits_now(st)
            });
        }
    }
}

/// Records the `oom` trace entry, counts it, and builds the observers' info and the error.
fn report<B: Backend>(
    st: &mut State<B>,
    su: &Setup<B>,
    req: &Request<'_, B>,
) -> (OomInfo, OutOfMemory) {
    let mem = su.backend.memory_info().unwrap_or_default();
    let limit = st.limit(su).ok().flatten();
    st.counts.num_ooms += 1;
    st.trace.push(
        TraceAction::Oom,
        0,
        req.requested,
        req.stream_id,
        Some(mem.free),
    );
    let f = st.index.figures();
    let allocated = f.allocated_bytes.current();
    let reserved = f.reserved_bytes.current();
    let device = su.backend.device_index();
    let info = OomInfo {
        device,
        requested: req.requested,
        limit,
        device_free: mem.free,
        device_total: mem.total,
        allocated,
        reserved,
    };
    let available = limit.map_or(mem.free, |l| mem.free.min(l.saturating_sub(reserved)));
    let ask = Ask {
        requested: req.requested,
        size: req.size,
        pool: req.pool,
        alloc_size: req.alloc_size,
    };
    let granularity = if su.config.expandable_segments {
        su.backend.vm_granularity().unwrap_or(1)
    } else {
        1
    };
    let rounding = Rounding::explain(
        &su.config,
        granularity,
        &ask,
        available,
        st.index.largest_free_block(),
    );
    let err = OutOfMemory {
        device,
        requested: req.requested,
        device_total: mem.total,
        device_free: mem.free,
        allocated,
        reserved_unallocated: reserved.saturating_sub(allocated),
        limit,
        largest_free_block: st.index.largest_free_block(),
        cached_free: f.cached_free_bytes,
        fragmentation: st.index.fragmentation(),
        culprits: culprits_now(st),
        rounding,
        snapshot: None,
        snapshot_error: None,
    };
    (info, err)
}
