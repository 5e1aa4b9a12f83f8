//! The process group: issues communication with the configured reuse policy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::buffer::CommBuffer;
use super::builder::{PgSettings, ProcessGroupBuilder};
use super::counters::{PgCounters, PgStats};
use super::error::PgError;
use super::policy::{Handoff, WorkTensors};
use super::shared::PgShared;
use super::shelf::TensorShelf;
use super::watchdog::Watchdog;
use super::work::{CommKind, Work, WorkState};
use crate::allocator::{CachingAllocator, CallbackId, Storage};
use crate::backend::Backend;
use crate::comm::{CommError, Communicator, DType, ReduceOp};
use crate::ids::WorkId;

/// A process group: one communicator, one comm stream, one reuse policy.
///
/// Every operation takes the caller's *current* stream explicitly: the comm stream waits
/// on it before the operation, and `wait()` makes it wait for the work.
///
/// Tensors are passed as [`CommBuffer`]s: a `&Storage` is the whole buffer as `f32`
/// elements; [`CommBuffer::new`] and [`CommBuffer::with_count`] give another element type
/// or a count. A size that is not a whole number of elements, or a count that does not fit,
/// is [`PgError::InvalidArgument`] and nothing is issued.
pub struct ProcessGroup<B: Backend> {
    shared: Arc<PgShared<B>>,
    watchdog: Option<Watchdog>,
    oom_callback: CallbackId,
    oom_explainer: CallbackId,
}

/// One member of a batched point-to-point exchange: the whole tensor as `f32` elements
/// (a size that is not a multiple of 4 bytes fails the whole batch before anything is
/// issued).
#[derive(Clone, Copy, Debug)]
pub enum P2pOp<'a, B: Backend> {
    /// Send the tensor to a group rank.
    Send(&'a Storage<B>, usize),
    /// Receive into the tensor from a group rank.
    Recv(&'a Storage<B>, usize),
}

/// A batched point-to-point member's tensor, read as whole `f32` elements.
fn p2p_elems<B: Backend>(op: &'static str, s: &Storage<B>) -> Result<usize, PgError> {
    CommBuffer::from(s).element_count(op)
}

impl<B: Backend> ProcessGroup<B> {
    /// Starts building a group over `comm`, allocating through `allocator`.
    pub fn builder(
        allocator: Arc<CachingAllocator<B>>,
        comm: Box<dyn Communicator<B>>,
    ) -> ProcessGroupBuilder<B> {
        ProcessGroupBuilder {
            allocator,
            comm,
            mode: None,
            timeout: Duration::from_secs(600),
            watchdog_interval: Some(Duration::from_millis(2)),
            blocking_wait: false,
            unwaited_warning_after: Duration::from_secs(10),
        }
    }

    pub(super) fn create(
        allocator: Arc<CachingAllocator<B>>,
        comm: Box<dyn Communicator<B>>,
        settings: PgSettings,
    ) -> Result<Self, PgError> {
        let comm_stream = allocator.backend().create_stream()?;
        let shared = Arc::new(PgShared {
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
            spans: Mutex::new(std::collections::VecDeque::new()),
            unwaited: Mutex::new(Vec::new()),
        });
        let weak: Weak<PgShared<B>> = Arc::downgrade(&shared);
        // Before the allocator declares OOM it asks us to release the shelves of works
        // that already finished (querying their events ourselves, not only relying on
        // what the watchdog noticed). Runs without the allocator lock held.
        let oom_callback = shared.allocator.add_free_memory_callback(Arc::new(move || {
            weak.upgrade()
                .is_some_and(|s| s.release_completed_for_oom())
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
    pub fn work_spans(&self) -> Vec<super::WorkSpan> {
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

    /// In place: every member's tensor becomes the reduction over members.
    ///
    /// Tensors are `impl Into<CommBuffer>`: a `&Storage` is all of it as `f32`;
    /// [`CommBuffer::new`] / [`CommBuffer::with_count`] give the element type and count.
    pub fn all_reduce<'t>(
        &self,
        t: impl Into<CommBuffer<'t, B>>,
        op: ReduceOp,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (t, n, dtype) = Self::typed("all_reduce", t.into())?;
        self.issue(
            "all_reduce",
            CommKind::Collective,
            &[t],
            &[t],
            current,
            async_op,
            |c, s| c.all_reduce(t.ptr(), n, dtype, op, s),
        )
    }

    /// `output` (size x `input` elements) gathers every member's `input` by group rank.
    pub fn all_gather<'t>(
        &self,
        input: impl Into<CommBuffer<'t, B>>,
        output: impl Into<CommBuffer<'t, B>>,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (input, n, dtype) = Self::typed("all_gather", input.into())?;
        let (output, out_n) = Self::same_type("all_gather", output.into(), dtype)?;
        Self::check_len(
            "all_gather",
            out_n,
            n * self.size(),
            "output elements must be input elements x group size",
        )?;
        self.issue(
            "all_gather",
            CommKind::Collective,
            &[input],
            &[output],
            current,
            async_op,
            |c, s| c.all_gather(input.ptr(), output.ptr(), n, dtype, s),
        )
    }

    /// Member `r`'s `output` receives the reduction of chunk `r` of every member's `input`.
    pub fn reduce_scatter<'t>(
        &self,
        input: impl Into<CommBuffer<'t, B>>,
        output: impl Into<CommBuffer<'t, B>>,
        op: ReduceOp,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (output, n, dtype) = Self::typed("reduce_scatter", output.into())?;
        let (input, in_n) = Self::same_type("reduce_scatter", input.into(), dtype)?;
        Self::check_len(
            "reduce_scatter",
            in_n,
            n * self.size(),
            "input elements must be output elements x group size",
        )?;
        self.issue(
            "reduce_scatter",
            CommKind::Collective,
            &[input],
            &[output],
            current,
            async_op,
            |c, s| c.reduce_scatter(input.ptr(), output.ptr(), n, dtype, op, s),
        )
    }

    /// Equal-split all-to-all.
    pub fn all_to_all<'t>(
        &self,
        input: impl Into<CommBuffer<'t, B>>,
        output: impl Into<CommBuffer<'t, B>>,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (input, total, dtype) = Self::typed("all_to_all", input.into())?;
        let (output, out_n) = Self::same_type("all_to_all", output.into(), dtype)?;
        let size = self.size();
        Self::check_len(
            "all_to_all",
            out_n,
            total,
            "input and output must have equal lengths",
        )?;
        if size == 0 || total % size != 0 {
            return Err(PgError::InvalidArgument {
                op: "all_to_all",
                reason: format!("{total} elements are not divisible by the group size {size}"),
            });
        }
        self.issue(
            "all_to_all",
            CommKind::Collective,
            &[input],
            &[output],
            current,
            async_op,
            |c, s| c.all_to_all(input.ptr(), output.ptr(), total / size, dtype, s),
        )
    }

    /// Every member's tensor becomes group rank `root`'s.
    pub fn broadcast<'t>(
        &self,
        t: impl Into<CommBuffer<'t, B>>,
        root: usize,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (t, n, dtype) = Self::typed("broadcast", t.into())?;
        let (inputs, outputs): (&[&Storage<B>], &[&Storage<B>]) = if self.rank() == root {
            (&[t], &[])
        } else {
            (&[], &[t])
        };
        self.issue(
            "broadcast",
            CommKind::Collective,
            inputs,
            outputs,
            current,
            async_op,
            |c, s| c.broadcast(t.ptr(), n, dtype, root, s),
        )
    }

    /// Sends the tensor to group rank `peer`.
    pub fn send<'t>(
        &self,
        t: impl Into<CommBuffer<'t, B>>,
        peer: usize,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (t, n, dtype) = Self::typed("send", t.into())?;
        self.issue(
            "send",
            CommKind::PointToPoint,
            &[t],
            &[],
            current,
            async_op,
            |c, s| c.send(t.ptr(), n, dtype, peer, s),
        )
    }

    /// Receives into the tensor from group rank `peer`.
    pub fn recv<'t>(
        &self,
        t: impl Into<CommBuffer<'t, B>>,
        peer: usize,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (t, n, dtype) = Self::typed("recv", t.into())?;
        self.issue(
            "recv",
            CommKind::PointToPoint,
            &[],
            &[t],
            current,
            async_op,
            |c, s| c.recv(t.ptr(), n, dtype, peer, s),
        )
    }

    /// Issues sends and receives as one group (PyTorch's `batch_isend_irecv`): one work,
    /// always asynchronous. Every tensor it touches is covered by the policy.
    pub fn batch_isend_irecv(
        &self,
        ops: &[P2pOp<'_, B>],
        current: &B::Stream,
    ) -> Result<Work<B>, PgError> {
        let inputs: Vec<&Storage<B>> = ops
            .iter()
            .filter_map(|o| {
                if let P2pOp::Send(t, _) = o {
                    Some(*t)
                } else {
                    None
                }
            })
            .collect();
        let outputs: Vec<&Storage<B>> = ops
            .iter()
            .filter_map(|o| {
                if let P2pOp::Recv(t, _) = o {
                    Some(*t)
                } else {
                    None
                }
            })
            .collect();
        // Every member is checked before anything is issued (no half-issued batch).
        let counts = ops
            .iter()
            .map(|o| match *o {
                P2pOp::Send(t, _) | P2pOp::Recv(t, _) => p2p_elems("batch_isend_irecv", t),
            })
            .collect::<Result<Vec<usize>, PgError>>()?;
        self.issue(
            "batch_isend_irecv",
            CommKind::PointToPoint,
            &inputs,
            &outputs,
            current,
            true,
            |c, s| {
                c.group_start()?;
                let mut result = Ok(());
                for (op, &n) in ops.iter().zip(&counts) {
                    result = match *op {
                        P2pOp::Send(t, peer) => c.send(t.ptr(), n, DType::F32, peer, s),
                        P2pOp::Recv(t, peer) => c.recv(t.ptr(), n, DType::F32, peer, s),
                    };
                    if result.is_err() {
                        break;
                    }
                }
                // Close the group even after a failed member so the communicator stays usable.
                let end = c.group_end();
                result.and(end)
            },
        )
    }

    /// Synchronous barrier over the group.
    pub fn barrier(&self, current: &B::Stream) -> Result<(), PgError> {
        self.issue(
            "barrier",
            CommKind::Collective,
            &[],
            &[],
            current,
            false,
            |c, s| c.barrier(s),
        )
        .map(|_| ())
    }

    /// The storage, element count and element type of a buffer (its size checked).
    fn typed<'t>(
        op: &'static str,
        buf: CommBuffer<'t, B>,
    ) -> Result<(&'t Storage<B>, usize, DType), PgError> {
        Ok((buf.storage(), buf.element_count(op)?, buf.dtype()))
    }

    /// As [`Self::typed`] for the second buffer of an operation: same element type.
    fn same_type<'t>(
        op: &'static str,
        buf: CommBuffer<'t, B>,
        dtype: DType,
    ) -> Result<(&'t Storage<B>, usize), PgError> {
        if buf.dtype() != dtype {
            return Err(PgError::InvalidArgument {
                op,
                reason: format!(
                    "input and output must have one element type (got {dtype} and {})",
                    buf.dtype()
                ),
            });
        }
        Ok((buf.storage(), buf.element_count(op)?))
    }

    fn check_len(op: &'static str, got: usize, want: usize, rule: &str) -> Result<(), PgError> {
        if got == want {
            Ok(())
        } else {
            Err(PgError::InvalidArgument {
                op,
                reason: format!("{rule} (got {got}, expected {want})"),
            })
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn issue(
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
        sh.release_completed();
        if sh.aborted.load(Ordering::Acquire) {
            return Err(PgError::Aborted {
                reason: "the process group was aborted".to_owned(),
            });
        }
        if let Some(e) = sh.comm.async_error() {
            return Err(PgError::Communicator(e));
        }
        let backend = sh.allocator.backend();
        // The comm stream must not start before the current stream produced the inputs.
        let start = backend.create_event()?;
        backend.record_event(&start, current)?;
        backend.stream_wait_event(&sh.comm_stream, &start)?;
        let state = Arc::new(WorkState {
            id: WorkId::fresh(),
            op,
            kind,
            end_event: backend.create_event()?,
            issued_at: Instant::now(),
            issued_us: crate::allocator::trace_clock_us(),
            shelf: TensorShelf::default(),
            tracked: Mutex::new(Vec::new()),
            completed: AtomicBool::new(false),
            error: Mutex::new(None),
            seen_done_at: std::sync::OnceLock::new(),
            warned_unwaited: AtomicBool::new(false),
        });
        let cx = sh.policy_context();
        sh.policy
            .on_collective_start(&cx, &state, &WorkTensors { inputs, outputs }, kind);
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
        for out in outputs {
            sh.policy.after_launch(&cx, &state, out);
        }
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
            .remove_oom_explainer(self.oom_explainer);
        self.shared.shutdown();
    }
}
