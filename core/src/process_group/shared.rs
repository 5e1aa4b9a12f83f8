//! The state a group shares with its works, its watchdog and the allocator's free-memory
//! callback, and the release paths that run on it: observing completion, `wait()`, the
//! watchdog pass, the main thread's drain, the OOM callback and shutdown.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::counters::PgCounters;
use super::error::PgError;
use super::handoff::HandoffList;
use super::policy::{PolicyContext, ReusePolicy};
use super::settings::PgSettings;
use super::span::{WORK_SPAN_CAPACITY, WorkSpan};
use super::work_state::WorkState;
use crate::allocator::{CachingAllocator, Storage, trace_clock_us};
use crate::backend::Backend;
use crate::comm::{CommError, Communicator};

/// The watchdog's hand-off list of a group: completed works and the storages they held.
pub(crate) type Handoff<B> = HandoffList<Arc<WorkState<B>>, Storage<B>>;

/// Shared state of a group: used by `ProcessGroup`, every `Work`, the watchdog and the
/// allocator's free-memory callback.
pub(crate) struct PgShared<B: Backend> {
    pub(crate) allocator: Arc<CachingAllocator<B>>,
    pub(super) comm: Box<dyn Communicator<B>>,
    pub(super) comm_stream: B::Stream,
    pub(super) policy: Box<dyn ReusePolicy<B>>,
    pub(super) settings: PgSettings,
    /// Works not yet observed complete.
    pub(super) inflight: Mutex<Vec<Arc<WorkState<B>>>>,
    /// Storages of completed works, handed over by the watchdog, with the work whose end
    /// event the draining thread queries itself before dropping them.
    pub(super) to_unstash: Handoff<B>,
    pub(super) counters: PgCounters,
    pub(super) aborted: AtomicBool,
    /// The first work failure, kept for [`super::ProcessGroup::first_failure`] after the
    /// work itself is gone (a synchronous collective's failure is seen by the watchdog).
    pub(super) first_failure: Mutex<Option<PgError>>,
    /// The watchdog's stop flag and wake-up: it sleeps without a timeout while nothing is
    /// in flight (thousands of idle groups polling every 2 ms starve the ranks doing work),
    /// and [`PgShared::work_issued`] wakes it.
    pub(super) watchdog_signal: Arc<(Mutex<bool>, parking_lot::Condvar)>,
    /// The last [`WORK_SPAN_CAPACITY`] finished works, oldest first.
    pub(super) spans: Mutex<VecDeque<WorkSpan>>,
    /// Completed works never waited that still hold memory (see `unwaited.rs`).
    pub(super) unwaited: Mutex<Vec<Arc<WorkState<B>>>>,
}

impl<B: Backend> PgShared<B> {
    /// The shared state of a new group: nothing in flight, the policy `settings` choose.
    pub(super) fn new(
        allocator: Arc<CachingAllocator<B>>,
        comm: Box<dyn Communicator<B>>,
        comm_stream: B::Stream,
        settings: PgSettings,
    ) -> Self {
        PgShared {
            policy: settings.policy.instantiate::<B>(),
            allocator,
            comm,
            comm_stream,
            settings,
            inflight: Mutex::new(Vec::new()),
            to_unstash: Handoff::default(),
            counters: PgCounters::default(),
            aborted: AtomicBool::new(false),
            first_failure: Mutex::new(None),
            watchdog_signal: Arc::new((Mutex::new(false), parking_lot::Condvar::new())),
            spans: Mutex::new(VecDeque::new()),
            unwaited: Mutex::new(Vec::new()),
        }
    }

    /// What the policy may touch.
    pub(super) fn policy_context(&self) -> PolicyContext<'_, B> {
        PolicyContext {
            allocator: &self.allocator,
            comm_stream: &self.comm_stream,
            counters: &self.counters,
        }
    }

    /// Queries the work's end event on the calling thread; marks completion and picks up
    /// an asynchronous communicator error, or the device error the end event reports.
    /// Returns whether it is complete (a failed work is complete, with its error set).
    pub(super) fn observe(&self, state: &WorkState<B>) -> bool {
        if state.is_marked_completed() {
            // Query again so the *calling* thread has observed completion itself (the
            // mock's race detector keeps one host clock per thread).
            let _ = self.allocator.backend().query_event(&state.end_event);
            return true;
        }
        let done = match self.allocator.backend().query_event(&state.end_event) {
            Ok(done) => done,
            Err(e) => {
                // The comm stream reached the end event past a failed op (an injected fault,
                // a peer that never arrived): the work is over, and it failed. Recording it
                // here lets it leave the in-flight list and release what its policy holds.
                self.fail_work(
                    state,
                    PgError::Comm {
                        op: state.op,
                        work: state.id,
                        source: CommError::Backend(e),
                    },
                );
                self.mark_completed(state);
                return true;
            }
        };
        if done {
            if let Some(source) = self.comm.async_error() {
                self.fail_work(
                    state,
                    PgError::Comm {
                        op: state.op,
                        work: state.id,
                        source,
                    },
                );
            }
            self.mark_completed(state);
        } else if state.issued_at.elapsed() > self.settings.timeout && state.error().is_none() {
            // As NCCL process groups do: a timed-out collective leaves the communicator in
            // an unknown state, so abort it and fail what is queued behind. Abort *before*
            // publishing the error, so whoever sees the timeout (the user, polling while
            // the watchdog marks it) also finds the group aborted.
            self.comm.abort();
            self.aborted.store(true, Ordering::Release);
            self.fail_work(
                state,
                PgError::Timeout {
                    op: state.op,
                    work: state.id,
                    millis: self.settings.timeout.as_millis() as u64,
                },
            );
        }
        done
    }

    /// Marks the work complete; the first thread to do so records its span.
    fn mark_completed(&self, state: &WorkState<B>) {
        if !state.completed.swap(true, Ordering::AcqRel) {
            let span = WorkSpan {
                id: state.id,
                op: state.op,
                kind: state.kind,
                start_us: state.issued_us,
                end_us: trace_clock_us().max(state.issued_us),
                failed: state.error().is_some(),
            };
            let mut spans = self.spans.lock();
            if spans.len() == WORK_SPAN_CAPACITY {
                spans.pop_front();
            }
            spans.push_back(span);
        }
    }

    /// Records `err` as the work's error unless it already has one (counted once).
    pub(super) fn fail_work(&self, state: &WorkState<B>, err: PgError) {
        let mut slot = state.error.lock();
        if slot.is_none() {
            self.counters.works_failed.fetch_add(1, Ordering::Relaxed);
            self.first_failure.lock().get_or_insert_with(|| err.clone());
            *slot = Some(err);
        }
    }

    pub(crate) fn poll_work(&self, state: &WorkState<B>) -> Result<bool, PgError> {
        let done = self.observe(state);
        match state.error() {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }

    pub(crate) fn wait_work(
        &self,
        state: &Arc<WorkState<B>>,
        current: &B::Stream,
    ) -> Result<(), PgError> {
        let backend = self.allocator.backend();
        backend.stream_wait_event(current, &state.end_event)?;
        if self.settings.blocking_wait {
            self.block_until_done(state, Instant::now() + self.settings.timeout);
        }
        if state.held.shelf.mark_waited() {
            let released =
                self.policy
                    .on_wait(&self.policy_context(), state.id, &state.held, current);
            drop(released);
        }
        // Whatever the watchdog handed over is released now: wait() never leaves a
        // completed work's tensors held.
        self.drain_handoff();
        match state.error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The `wait()` of a synchronous operation issued on the current stream: stream order
    /// already made the stream wait, and the policy holds nothing; with blocking wait the
    /// host waits too, so a failure is returned here, as on the comm-stream path.
    pub(super) fn finish_on_current(&self, state: &WorkState<B>) -> Result<(), PgError> {
        if self.settings.blocking_wait {
            self.block_until_done(state, Instant::now() + self.settings.timeout);
        }
        state.held.shelf.mark_waited();
        match state.error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Polls the work on this thread (backing off to 5 ms) until it completed, failed, or
    /// `deadline` passed; true when it is over (completed or failed).
    pub(super) fn block_until_done(&self, state: &WorkState<B>, deadline: Instant) -> bool {
        let mut pause = Duration::from_micros(20);
        while !self.observe(state) && state.error().is_none() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
        true
    }

    /// Observes every in-flight work once; completed (or failed) ones leave the in-flight
    /// list and hand what their policy holds to the hand-off list. Returns how many works
    /// handed something over.
    fn scan_inflight(&self) -> u64 {
        let works: Vec<Arc<WorkState<B>>> = self.inflight.lock().clone();
        if works.is_empty() {
            return 0;
        }
        let mut finished = Vec::new();
        let mut handed = 0;
        for w in works {
            let done = self.observe(&w);
            if done || w.error().is_some() {
                let hand_over = |shelf: &_| self.to_unstash.hand_over(Arc::clone(&w), shelf);
                if self.policy.on_completion(&w.held, &hand_over) {
                    handed += 1;
                }
                self.note_unwaited(&w);
                finished.push(w.id);
            }
        }
        if !finished.is_empty() {
            self.inflight.lock().retain(|w| !finished.contains(&w.id));
        }
        handed
    }

    /// Records a new in-flight work and wakes an idle watchdog. The signal's lock is taken
    /// so the wake-up cannot fall between the watchdog's emptiness check and its sleep.
    pub(super) fn work_issued(&self, state: Arc<WorkState<B>>) {
        self.inflight.lock().push(state);
        let (lock, cv) = &*self.watchdog_signal;
        let _guard = lock.lock();
        cv.notify_all();
    }

    /// Whether no work is in flight (the watchdog may sleep until one is issued).
    pub(super) fn nothing_in_flight(&self) -> bool {
        self.inflight.lock().is_empty()
    }

    /// One watchdog pass: observe in-flight works, hand over completed shelves. The
    /// watchdog never drops a storage itself.
    pub(crate) fn watchdog_scan(&self) {
        let handed = self.scan_inflight();
        self.warn_unwaited();
        if handed > 0 {
            self.counters
                .shelf_unstashed_by_watchdog
                .fetch_add(handed, Ordering::Relaxed);
        }
    }

    /// Drops what was handed over, after querying each work's end event on this thread
    /// (so this thread has itself observed that the device is done with them).
    pub(super) fn drain_handoff(&self) -> bool {
        let items = self.to_unstash.drain();
        let any = !items.is_empty();
        for (work, storages) in items {
            self.observe(&work);
            drop(storages);
        }
        any
    }

    /// Main-thread release at every process-group call: drain the hand-off list, poll
    /// in-flight works itself (a slow or disabled watchdog only delays release), drain
    /// again.
    pub(crate) fn release_completed(&self) {
        self.drain_handoff();
        let handed = self.scan_inflight();
        self.warn_unwaited();
        if handed > 0 {
            self.counters
                .shelf_released_by_poll
                .fetch_add(handed, Ordering::Relaxed);
        }
        self.drain_handoff();
    }

    /// The allocator's free-memory callback: release everything completed works hold.
    /// Runs on the allocating thread without the allocator lock held.
    pub(super) fn release_completed_for_oom(&self) -> bool {
        let drained = self.drain_handoff();
        let handed = self.scan_inflight();
        if handed > 0 {
            self.counters
                .shelf_released_by_oom_callback
                .fetch_add(handed, Ordering::Relaxed);
        }
        let drained_again = self.drain_handoff();
        drained || handed > 0 || drained_again
    }

    /// Shutdown: wait for (or abort) in-flight work, then release everything held.
    pub(super) fn shutdown(&self) {
        let works: Vec<Arc<WorkState<B>>> = std::mem::take(&mut *self.inflight.lock());
        let deadline = Instant::now() + self.settings.timeout.min(Duration::from_secs(30));
        let mut pause = Duration::from_micros(20);
        for w in &works {
            while !self.observe(w) && w.error().is_none() {
                if Instant::now() >= deadline {
                    self.comm.abort();
                    self.aborted.store(true, Ordering::Release);
                    break;
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(5));
            }
        }
        // Nothing may still run on the comm stream when the storages go.
        let _ = self
            .allocator
            .backend()
            .synchronize_stream(&self.comm_stream);
        for w in &works {
            let held = w.held.shelf.unstash();
            drop(held);
            w.held.tracked.lock().clear();
        }
        self.drain_handoff();
    }
}
