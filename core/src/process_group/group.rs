//! The process group: issues communication with the configured reuse policy.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::counters::PgStats;
use super::error::PgError;
use super::kind::CommKind;
use super::policy::WorkTensors;
use super::settings::PgSettings;
use super::shared::PgShared;
use super::span::WorkSpan;
use super::watchdog::Watchdog;
use super::work::Work;
use super::work_state::WorkState;
use crate::allocator::{CachingAllocator, CallbackId, Storage};
use crate::backend::Backend;
use crate::comm::{CommError, Communicator};
use crate::ids::WorkId;

/// A process group: one communicator, one comm stream, one reuse policy.
///
/// Every operation takes the caller's *current* stream explicitly: the comm stream waits
/// on it before the operation, and `wait()` makes it wait for the work.
///
/// Tensors are passed as [`CommBuffer`](super::CommBuffer)s: a `&Storage` is the whole
/// buffer as `f32` elements; [`CommBuffer::new`](super::CommBuffer::new) and
/// [`CommBuffer::with_count`](super::CommBuffer::with_count) give another element type or a
/// count. A size that is not a whole number of elements, or a count that does not fit,
/// is [`PgError::InvalidArgument`] and nothing is issued.
pub struct ProcessGroup<B: Backend> {
    shared: Arc<PgShared<B>>,
    watchdog: Option<Watchdog>,
    oom_callback: CallbackId,
    pressure_callback: CallbackId,
    oom_explainer: CallbackId,
}

impl<B: Backend> ProcessGroup<B> {
    /// Creates a group with `settings`: its comm stream, its watchdog, and its free-memory
    /// callback and OOM explainer (used by the builder and by sub-groups).
    pub(super) fn create(
        allocator: Arc<CachingAllocator<B>>,
        comm: Box<dyn Communicator<B>>,
        settings: PgSettings,
    ) -> Result<Self, PgError> {
        let comm_stream = allocator.backend().create_stream()?;
        let shared = Arc::new(PgShared::new(allocator, comm, comm_stream, settings));
        let weak: Weak<PgShared<B>> = Arc::downgrade(&shared);
        // Before the allocator declares OOM it asks us to release the shelves of works
        // that already finished (querying their events ourselves, not only relying on
        // what the watchdog noticed). Runs without the allocator lock held.
        let oom_callback = shared.allocator.add_free_memory_callback(Arc::new(move || {
            weak.upgrade()
                .is_some_and(|s| s.release_completed_for_oom())
        }));
        // When the allocation would fail even so, it asks us again, and we may wait for
        // works still in flight (mode 2's shelves hold memory only a completion returns).
        let weak: Weak<PgShared<B>> = Arc::downgrade(&shared);
        let pressure_callback =
            shared
                .allocator
                .add_memory_pressure_callback(Arc::new(move || {
                    weak.upgrade().is_some_and(|s| s.release_inflight_for_oom())
                }));
        let weak: Weak<PgShared<B>> = Arc::downgrade(&shared);
        let oom_explainer = shared.allocator.add_oom_explainer(Arc::new(
            move |culprits: &mut crate::allocator::OomCulprits| {
                if let Some(s) = weak.upgrade() {
                    s.explain_oom(culprits);
                }
            },
        ));
        let watchdog = match shared.settings.watchdog_interval {
            Some(interval) => {
                Some(
                    Watchdog::spawn(&shared, interval).map_err(|e| PgError::Aborted {
                        reason: format!("could not start the watchdog thread: {e}"),
                    })?,
                )
            }
            None => None,
        };
        Ok(ProcessGroup {
            shared,
            watchdog,
            oom_callback,
            pressure_callback,
            oom_explainer,
        })
    }

    /// This member's rank in the group.
    pub fn rank(&self) -> usize {
        self.shared.comm.rank()
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.shared.comm.size()
    }

    /// The policy's name (`0`..`3`, or `unsafe`).
    pub fn policy_name(&self) -> &'static str {
        self.shared.policy.name()
    }

    /// The stream this group enqueues its communication on.
    pub fn comm_stream(&self) -> &B::Stream {
        &self.shared.comm_stream
    }

    /// The allocator this group's tensors come from.
    pub fn allocator(&self) -> &Arc<CachingAllocator<B>> {
        &self.shared.allocator
    }

    /// Counters of this group.
    pub fn stats(&self) -> PgStats {
        self.shared.counters.snapshot()
    }

    /// The last [`super::WORK_SPAN_CAPACITY`] finished works (issue to observed completion,
    /// on the allocator's trace clock), oldest first.
    pub fn work_spans(&self) -> Vec<WorkSpan> {
        self.shared.spans.lock().iter().copied().collect()
    }

    /// Number of works not yet observed complete.
    pub fn inflight_works(&self) -> usize {
        self.shared.inflight.lock().len()
    }

    /// Runs one watchdog pass on the calling thread (for groups built without a watchdog
    /// thread, and for tests that drive the hand-off step by step).
    pub fn run_watchdog_once(&self) {
        self.shared.watchdog_scan();
    }

    /// Releases what completed works hold: drains the watchdog's hand-off list and polls
    /// in-flight works. Every process-group call does this first.
    pub fn release_completed(&self) {
        self.shared.release_completed();
    }

    /// Creates a sub-group (every member of this group calls it with the same ranks, in
    /// the same order); non-members get `None`. The sub-group has its own comm stream and
    /// watchdog and inherits this group's settings.
    pub fn new_group(&self, ranks: &[usize]) -> Result<Option<ProcessGroup<B>>, PgError> {
        self.shared.release_completed();
        // A sub-group of an aborted group would be created over a communicator whose
        // peers may already have given up: refuse it, as every other operation is.
        if self.is_aborted() {
            return Err(PgError::Aborted {
                reason: "the process group was aborted; it creates no sub-groups".to_owned(),
            });
        }
        match self.shared.comm.new_group(ranks)? {
            Some(comm) => Ok(Some(ProcessGroup::create(
                Arc::clone(&self.shared.allocator),
                comm,
                self.shared.settings.clone(),
            )?)),
            None => Ok(None),
        }
    }

    /// Aborts the group, as a rank that fails must (NCCL's `ncclCommAbort`): the
    /// communicator fails the pending and future operations of *every* member, so peers
    /// blocked on this rank fail at once, naming the abort, instead of waiting out the
    /// timeout; this member refuses new operations and sub-groups. Idempotent.
    pub fn abort(&self) {
        self.shared.comm.abort();
        self.shared.aborted.store(true, Ordering::Release);
    }

    /// Whether the group was aborted ([`ProcessGroup::abort`], a timeout, or a shutdown
    /// that gave up on work in flight).
    pub fn is_aborted(&self) -> bool {
        self.shared.aborted.load(Ordering::Acquire)
    }

    /// The first failure of any of the group's works (a collective that failed on the
    /// device, was aborted by a peer or timed out), whether or not a caller waited on it:
    /// a synchronous collective's failure is otherwise only visible in its data.
    pub fn first_failure(&self) -> Option<PgError> {
        self.shared.first_failure.lock().clone()
    }

    /// Refuses, before anything is issued, a reduction this group's communicator cannot
    /// do (`reduce` on `dtype`).
    pub(super) fn check_reduction(
        &self,
        op: &'static str,
        dtype: crate::comm::DType,
        reduce: crate::comm::ReduceOp,
    ) -> Result<(), PgError> {
        let sh = &self.shared;
        super::checks::reduction(
            op,
            sh.comm.as_ref(),
            sh.allocator.backend().as_ref(),
            dtype,
            reduce,
        )
    }

    /// Issues one work. An asynchronous one (and, with [`super::SyncCollectives::CommStream`], a
    /// synchronous one): the comm stream waits on `current`, the policy protects the
    /// tensors, `launch` enqueues the operation, the end event is recorded; a synchronous
    /// operation (`async_op` false) is waited at once. A synchronous one on
    /// [`super::SyncCollectives::CurrentStream`] goes to [`ProcessGroup::issue_on_current`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn issue(
        &self,
        op: &'static str,
        kind: CommKind,
        inputs: &[&Storage<B>],
        outputs: &[&Storage<B>],
        current: &B::Stream,
        async_op: bool,
        launch: impl FnOnce(&dyn Communicator<B>, &B::Stream) -> Result<(), CommError>,
    ) -> Result<Work<B>, PgError> {
        let sh = &self.shared;
        self.admit()?;
        if !async_op && sh.settings.sync_on_current_stream() {
            return self.issue_on_current(op, kind, current, launch);
        }
        let backend = sh.allocator.backend();
        // The comm stream must not start before the current stream produced the inputs.
        let start = backend.create_event()?;
        backend.record_event(&start, current)?;
        backend.stream_wait_event(&sh.comm_stream, &start)?;
        let id = WorkId::fresh();
        let state = Arc::new(WorkState::new(id, op, kind, backend.create_event()?));
        let cx = sh.policy_context();
        let tensors = WorkTensors { inputs, outputs };
        sh.policy
            .on_collective_start(&cx, state.id, &state.held, &tensors, kind);
        if let Err(source) = launch(sh.comm.as_ref(), &sh.comm_stream) {
            sh.fail_work(
                &state,
                PgError::Comm {
                    op,
                    work: state.id,
                    source,
                },
            );
        }
        backend.record_event(&state.end_event, &sh.comm_stream)?;
        sh.counters.works_issued.fetch_add(1, Ordering::Relaxed);
        sh.work_issued(Arc::clone(&state));
        let work = Work {
            state,
            group: Arc::clone(sh),
        };
        if !async_op {
            work.wait(current)?;
        }
        Ok(work)
    }

    /// A synchronous operation as PyTorch 2.8+ issues it: enqueued on `current` itself.
    /// Stream order protects its tensors (whatever runs on `current` next, a free and
    /// re-allocation included, runs after it), so the policy is not consulted: no hop
    /// event, no `record_stream`, no stash. The end event stays, on `current`, so the
    /// watchdog still sees a failure or a timeout ([`ProcessGroup::first_failure`]) and a
    /// blocking wait has something to wait for.
    fn issue_on_current(
        &self,
        op: &'static str,
        kind: CommKind,
        current: &B::Stream,
        launch: impl FnOnce(&dyn Communicator<B>, &B::Stream) -> Result<(), CommError>,
    ) -> Result<Work<B>, PgError> {
        let sh = &self.shared;
        let backend = sh.allocator.backend();
        let state = Arc::new(WorkState::new(
            WorkId::fresh(),
            op,
            kind,
            backend.create_event()?,
        ));
        if let Err(source) = launch(sh.comm.as_ref(), current) {
            sh.fail_work(
                &state,
                PgError::Comm {
                    op,
                    work: state.id,
                    source,
                },
            );
        }
        backend.record_event(&state.end_event, current)?;
        sh.counters.works_issued.fetch_add(1, Ordering::Relaxed);
        sh.work_issued(Arc::clone(&state));
        sh.finish_on_current(&state)?;
        Ok(Work {
            state,
            group: Arc::clone(sh),
        })
    }

    /// What every operation does first: release what completed works hold, then refuse
    /// to issue on an aborted group or a communicator that reported an error.
    fn admit(&self) -> Result<(), PgError> {
        let sh = &self.shared;
        sh.release_completed();
        if sh.aborted.load(Ordering::Acquire) {
            return Err(PgError::Aborted {
                reason: "the process group was aborted".to_owned(),
            });
        }
        if let Some(e) = sh.comm.async_error() {
            return Err(PgError::Communicator(e));
        }
        Ok(())
    }
}

impl<B: Backend> Drop for ProcessGroup<B> {
    fn drop(&mut self) {
        // Stop the watchdog first so it cannot hand over anything after the final drain.
        drop(self.watchdog.take());
        self.shared
            .allocator
            .remove_free_memory_callback(self.oom_callback);
        self.shared
            .allocator
            .remove_memory_pressure_callback(self.pressure_callback);
        self.shared
            .allocator
            .remove_oom_explainer(self.oom_explainer);
        self.shared.shutdown();
    }
}
