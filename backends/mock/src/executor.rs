//! Running ops: which stream heads are ready, claiming and finishing them, the worker
//! threads of the threaded mode, the host-driven seeded scheduler of the deterministic
//! mode, and host waits with a timeout.
//!
//! Readiness of a stream's head entry:
//! - plain ops are ready once the stream is idle (in-order execution);
//! - a `Wait` is ready once the awaited stream finished the awaited position;
//! - a joint op is ready once every rank submitted it and every participant stream has
//!   it at its head; the first time any participant reaches it starts its timeout, after
//!   which it fails on every participant instead of waiting forever.

use std::sync::Arc;
use std::time::{Duration, Instant};

use memreuse_core::BackendError;
use parking_lot::MutexGuard;

use crate::cluster_state::{ClusterState, Core, ExecutedOp, Op, Part, Work};
use crate::error::{BACKEND_NAME, timeout};
use crate::region::{JointMemory, JointRegions};

/// Where a stream's head entry stands.
enum Head {
    /// Nothing queued, or the head is executing.
    Idle,
    /// Waiting on another stream or on joint participants (until the deadline, if any).
    Blocked(Option<Instant>),
    Ready(Pick),
}

/// What a ready head offers to run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pick {
    /// The head op itself.
    Plain,
    /// Joint op `k` of group `group`, one item of the head entry.
    Item(usize, u64),
}

/// What a claimed job does, run without the lock.
enum Action {
    Plain(Op),
    Joint {
        desc: String,
        parts: Vec<Part>,
        delay: Duration,
    },
    /// A joint op that timed out, mismatched or was failed on purpose; carries this rank's
    /// part so its body is dropped outside the lock.
    Fail(BackendError, Option<Part>),
}

/// What is needed to retire a job once it ran.
struct JobMeta {
    /// Streams whose head entry this job is (one, or every joint participant).
    streams: Vec<usize>,
    /// Joint group and op number, to retire the item and the slot.
    joint: Option<(usize, u64)>,
    seq: u64,
    desc: String,
}

/// A claimed unit of execution.
struct Job {
    meta: JobMeta,
    action: Action,
}

impl ClusterState {
    fn head(&mut self, s: usize, now: Instant) -> Head {
        let st = &self.streams[s];
        if st.running {
            return Head::Idle;
        }
        let Some(op) = st.queue.front() else {
            return Head::Idle;
        };
        let items: Vec<(usize, u64)> = match &op.work {
            Work::Wait { stream, target } => {
                return if self.streams[*stream].completed >= *target {
                    Head::Ready(Pick::Plain)
                } else {
                    Head::Blocked(None)
                };
            }
            Work::Joint(entry) => entry
                .items
                .iter()
                .filter(|i| !i.done)
                .map(|i| (i.group, i.k))
                .collect(),
            _ => return Head::Ready(Pick::Plain),
        };
        let mut deadline: Option<Instant> = None;
        for (group, k) in items {
            match self.item_state(group, k, now) {
                Head::Ready(pick) => return Head::Ready(pick),
                Head::Blocked(Some(d)) => deadline = Some(deadline.map_or(d, |x| x.min(d))),
                Head::Blocked(None) | Head::Idle => {}
            }
        }
        Head::Blocked(deadline)
    }

    /// Whether joint op `k` of `group` can run: every rank submitted it and every
    /// participant stream is idle with it in its head entry. Starts its timeout the first
    /// time it is looked at, and fails it once the timeout passed.
    fn item_state(&mut self, group: usize, k: u64, now: Instant) -> Head {
        let at_head = |w: &ClusterState, s: usize| {
            let st = &w.streams[s];
            !st.running
                && st.queue.front().is_some_and(|op| match &op.work {
                    Work::Joint(entry) => entry.pending(group, k).is_some(),
                    _ => false,
                })
        };
        let Some(slot) = self.groups[group].slots.get(&k) else {
            return Head::Blocked(None);
        };
        if slot.failed.is_some() {
            return Head::Ready(Pick::Item(group, k));
        }
        let here: Vec<bool> = slot
            .streams
            .iter()
            .map(|s| s.is_some_and(|s| at_head(self, s)))
            .collect();
        if here.iter().all(|&h| h) {
            return Head::Ready(Pick::Item(group, k));
        }
        let size = here.len();
        let slot = self.groups[group]
            .slots
            .get_mut(&k)
            .expect("slot checked above");
        let reached = *slot.first_reached.get_or_insert(now);
        let deadline = reached + slot.timeout;
        if now < deadline {
            return Head::Blocked(Some(deadline));
        }
        let missing: Vec<usize> = (0..size).filter(|&r| !here[r]).collect();
        let name = slot
            .parts
            .iter()
            .flatten()
            .map(|p| p.name.clone())
            .next()
            .unwrap_or_default();
        slot.failed = Some(timeout(
            format!("joint op `{name}` #{k} of group {group} (ranks {missing:?} did not reach it)"),
            slot.timeout,
        ));
        Head::Ready(Pick::Item(group, k))
    }

    /// Takes what `pick` offers at the head of stream `s` for execution.
    fn claim(&mut self, s: usize, pick: Pick, joint_delay: Duration) -> Job {
        let Pick::Item(group, k) = pick else {
            let Some(op) = self.streams[s].queue.pop_front() else {
                unreachable!("claim is only called on a ready head");
            };
            self.streams[s].running = true;
            return Job {
                meta: JobMeta {
                    streams: vec![s],
                    joint: None,
                    seq: op.info.seq,
                    desc: op.info.desc.clone(),
                },
                action: Action::Plain(op),
            };
        };
        let seq = self.streams[s].queue.front().map_or(0, |op| op.info.seq);
        let slot = self.groups[group]
            .slots
            .get_mut(&k)
            .expect("queued joint op has a slot");
        let desc = slot
            .parts
            .iter()
            .flatten()
            .map(|p| p.name.clone())
            .next()
            .unwrap_or_default();
        if let Some(err) = slot.failed.clone() {
            // Each participant retires a failed op on its own, whenever it gets there.
            let rank = slot.streams.iter().position(|x| *x == Some(s));
            let part = rank.and_then(|r| slot.parts[r].take());
            self.streams[s].running = true;
            return Job {
                meta: JobMeta {
                    streams: vec![s],
                    joint: Some((group, k)),
                    seq,
                    desc,
                },
                action: Action::Fail(err, part),
            };
        }
        let streams: Vec<usize> = slot.streams.iter().flatten().copied().collect();
        let parts: Vec<Part> = slot.parts.iter_mut().filter_map(Option::take).collect();
        for &p in &streams {
            self.streams[p].running = true;
        }
        Job {
            meta: JobMeta {
                streams,
                joint: Some((group, k)),
                seq,
                desc: desc.clone(),
            },
            action: Action::Joint {
                desc,
                parts,
                delay: joint_delay,
            },
        }
    }

    /// Retires a job: advances its streams (a joint entry once all its items are done),
    /// records a failure, retires a finished slot.
    fn finish(&mut self, job: &JobMeta, result: &Result<(), BackendError>, trace_cap: usize) {
        for &s in &job.streams {
            self.streams[s].running = false;
            if self.trace.len() < trace_cap {
                self.trace.push(ExecutedOp {
                    seq: job.seq,
                    stream: memreuse_core::StreamId(s as u64),
                    op: job.desc.clone(),
                });
            }
            let entry_error = match (job.joint, self.streams[s].queue.front_mut()) {
                (None, _) => Some(result.as_ref().err().cloned()),
                (
                    Some((group, k)),
                    Some(Op {
                        work: Work::Joint(entry),
                        ..
                    }),
                ) => {
                    if let Some(i) = entry.pending(group, k) {
                        entry.items[i].done = true;
                    }
                    if let Err(e) = result
                        && entry.error.is_none()
                    {
                        entry.error = Some(e.clone());
                    }
                    if entry.items.iter().all(|i| i.done) {
                        let err = entry.error.take();
                        self.streams[s].queue.pop_front();
                        Some(err)
                    } else {
                        None
                    }
                }
                (Some(_), _) => unreachable!("a running joint item is at its stream's head"),
            };
            // `Some(..)`: the queue entry is complete.
            if let Some(err) = entry_error {
                let st = &mut self.streams[s];
                st.completed += 1;
                let pos = st.completed;
                if let Some(e) = err {
                    self.fail_stream(s, pos, e);
                }
            }
        }
        if let Some((group, k)) = job.joint {
            let size = self.groups[group].devices.len();
            if let Some(slot) = self.groups[group].slots.get_mut(&k) {
                slot.done += job.streams.len();
                if slot.done >= size {
                    self.groups[group].slots.remove(&k);
                }
            }
        }
    }

    /// Deterministic mode: every ready head (each joint op once), in stream order; or the
    /// earliest deadline to wait for when none is ready.
    fn ready_heads(&mut self, now: Instant) -> (Vec<(usize, Pick)>, Option<Instant>) {
        let mut ready: Vec<(usize, Pick)> = Vec::new();
        let mut deadline: Option<Instant> = None;
        for s in 0..self.streams.len() {
            match self.head(s, now) {
                Head::Idle => {}
                Head::Blocked(d) => {
                    if let Some(d) = d {
                        deadline = Some(deadline.map_or(d, |x| x.min(d)));
                    }
                }
                Head::Ready(pick) => {
                    // A joint op that will run runs once for all participants; a failed
                    // one is retired by each participant.
                    let shared = match pick {
                        Pick::Item(g, k) => self.groups[g]
                            .slots
                            .get(&k)
                            .is_some_and(|sl| sl.failed.is_none()),
                        Pick::Plain => false,
                    };
                    if !(shared && ready.iter().any(|(_, p)| *p == pick)) {
                        ready.push((s, pick));
                    }
                }
            }
        }
        (ready, deadline)
    }
}

impl Action {
    /// Executes the job (called without the cluster lock).
    fn run(self, backed: bool) -> Result<(), BackendError> {
        match self {
            Action::Plain(op) => {
                if !op.delay.is_zero() {
                    std::thread::sleep(op.delay);
                }
                run_work(op.work, backed)
            }
            Action::Joint { desc, parts, delay } => {
                if !delay.is_zero() {
                    std::thread::sleep(delay);
                }
                run_joint(&desc, parts, backed)
            }
            Action::Fail(err, part) => {
                drop(part);
                Err(err)
            }
        }
    }
}

fn run_work(work: Work, backed: bool) -> Result<(), BackendError> {
    // Unbacked devices only validated the ranges; busy periods still take their time.
    if !backed && !matches!(work, Work::Delay(_)) {
        return Ok(());
    }
    match work {
        Work::Memset(span) => {
            if let Some(buf) = &span.buf {
                buf.lock()[span.offset..span.offset + span.len].fill(0);
            }
        }
        Work::HostToDevice(span, data) => {
            if let Some(buf) = &span.buf {
                buf.lock()[span.offset..span.offset + span.len].copy_from_slice(&data);
            }
        }
        Work::DeviceToHost(span, out) => {
            if let Some(buf) = &span.buf {
                let bytes = buf.lock()[span.offset..span.offset + span.len].to_vec();
                *out.lock() = Some(bytes);
            }
        }
        Work::DeviceToDevice { src, dst } => {
            // Through a staging copy: the two ranges may share one buffer, and
            // `JointMemory` locks in the global (device, address) order.
            let regions = JointRegions::new(vec![(0, vec![src, dst])]);
            let mut mem = JointMemory::lock(&regions);
            let data = mem.bytes(0, 0)?.to_vec();
            mem.bytes_mut(0, 1)?.copy_from_slice(&data);
        }
        Work::Delay(d) => std::thread::sleep(d),
        Work::Wait { .. } | Work::Joint(_) => {}
        Work::Custom { regions, body } => {
            if let Some(body) = body {
                let regions = JointRegions::new(vec![(0, regions)]);
                let mut mem = JointMemory::lock(&regions);
                return body(&mut mem);
            }
        }
    }
    Ok(())
}

fn run_joint(desc: &str, parts: Vec<Part>, backed: bool) -> Result<(), BackendError> {
    if let Some(first) = parts.first()
        && let Some(other) = parts.iter().find(|p| p.name != first.name)
    {
        return Err(BackendError::invalid_argument(
            BACKEND_NAME,
            "joint op",
            format!(
                "ranks issued different ops at the same position: `{}` and `{}` ({desc})",
                first.name, other.name
            ),
        ));
    }
    let mut body = None;
    let mut per_rank = Vec::with_capacity(parts.len());
    for p in parts {
        if body.is_none() {
            body = p.body;
        }
        per_rank.push((p.device, p.regions));
    }
    let Some(body) = body else {
        return Ok(());
    };
    if !backed {
        return Ok(());
    }
    let regions = JointRegions::new(per_rank);
    let mut mem = JointMemory::lock(&regions);
    body(&mut mem)
}

/// Runs `job` with the lock released, then retires it and wakes every waiter.
fn run_job(core: &Core, w: &mut MutexGuard<'_, ClusterState>, job: Job) {
    let Job { meta, action } = job;
    let backed = core.config.backing;
    let result = MutexGuard::unlocked(w, || action.run(backed));
    w.finish(&meta, &result, core.config.trace_capacity);
    core.cv.notify_all();
}

/// Threaded mode: the loop of stream `s`'s worker thread.
pub(crate) fn worker(core: &Arc<Core>, s: usize) {
    let mut w = core.state.lock();
    loop {
        if w.shutdown {
            return;
        }
        match w.head(s, Instant::now()) {
            Head::Ready(pick) => {
                let job = w.claim(s, pick, core.config.delays.joint);
                run_job(core, &mut w, job);
            }
            Head::Idle if w.streams[s].queue.is_empty() => {
                // Only a push onto this stream (or shutdown) gives it work: sleep on its own
                // condvar (see `StreamState::wake`).
                let wake = Arc::clone(&w.streams[s].wake);
                wake.wait(&mut w);
            }
            Head::Idle | Head::Blocked(None) => core.cv.wait(&mut w),
            Head::Blocked(Some(deadline)) => {
                let _ = core.cv.wait_until(&mut w, deadline);
            }
        }
    }
}

/// Deterministic mode: runs one seeded pick among the ready heads. Returns `Err(deadline)`
/// (the earliest joint timeout, if any) when nothing is ready or another thread drives.
fn step(core: &Core, w: &mut MutexGuard<'_, ClusterState>) -> Result<(), Option<Instant>> {
    if w.driving {
        return Err(None);
    }
    let (ready, deadline) = w.ready_heads(Instant::now());
    if ready.is_empty() {
        return Err(deadline);
    }
    let pick = w.rng.as_mut().map_or(0, |r| r.below(ready.len()));
    let (s, offer) = ready[pick];
    let job = w.claim(s, offer, core.config.delays.joint);
    w.driving = true;
    run_job(core, w, job);
    w.driving = false;
    core.cv.notify_all();
    Ok(())
}

/// Deterministic mode: lets the device advance up to `steps` ops (a non-blocking query
/// observes a seeded amount of progress). No-op in threaded mode.
pub(crate) fn advance(core: &Core, w: &mut MutexGuard<'_, ClusterState>, steps: usize) {
    if w.rng.is_none() {
        return;
    }
    for _ in 0..steps {
        if step(core, w).is_err() {
            return;
        }
    }
}

/// Blocks the host until `done` holds, driving execution in deterministic mode; fails
/// with a timeout after the configured `sync_timeout`.
pub(crate) fn wait_until(
    core: &Core,
    w: &mut MutexGuard<'_, ClusterState>,
    what: &str,
    done: impl Fn(&ClusterState) -> bool,
) -> Result<(), BackendError> {
    let limit = core.config.sync_timeout;
    let deadline = Instant::now() + limit;
    loop {
        if done(w) {
            return Ok(());
        }
        if w.shutdown {
            return Err(crate::error::device(
                "synchronize",
                "the device was shut down while the host waited",
            ));
        }
        let mut until = deadline;
        if w.rng.is_some() {
            match step(core, w) {
                Ok(()) => continue,
                Err(Some(d)) => until = until.min(d),
                Err(None) => {}
            }
        }
        if Instant::now() >= deadline {
            return Err(timeout(what.to_owned(), limit));
        }
        let _ = core.cv.wait_until(w, until);
    }
}
