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

use crate::error::timeout;
use crate::joint::{JointMemory, JointRegions};
use crate::world::{Core, ExecutedOp, Op, Part, Work, World};

/// Where a stream's head entry stands.
enum Head {
    /// Nothing queued, or the head is executing.
    Idle,
    /// Waiting on another stream or on joint participants (until the deadline, if any).
    Blocked(Option<Instant>),
    Ready,
}

/// What a claimed job does, run without the lock.
enum Action {
    Plain(Op),
    Joint {
        desc: String,
        parts: Vec<Part>,
        delay: Duration,
    },
    /// A joint op that timed out or mismatched; carries this rank's part so its body is
    /// dropped outside the lock.
    Fail(BackendError, Option<Part>),
}

/// What is needed to retire a job once it ran.
struct JobMeta {
    /// Streams whose head entry this job is (one, or every joint participant).
    streams: Vec<usize>,
    /// Joint group and op number, to retire the slot.
    joint: Option<(usize, u64)>,
    seq: u64,
    desc: String,
}

/// A claimed unit of execution.
struct Job {
    meta: JobMeta,
    action: Action,
}

impl World {
    fn head(&mut self, s: usize, now: Instant) -> Head {
        let st = &self.streams[s];
        if st.running {
            return Head::Idle;
        }
        let Some(op) = st.queue.front() else {
            return Head::Idle;
        };
        match op.work {
            Work::Wait { stream, target } => {
                if self.streams[stream].completed >= target {
                    Head::Ready
                } else {
                    Head::Blocked(None)
                }
            }
            Work::Joint { group, k } => self.joint_head(group, k, now),
            _ => Head::Ready,
        }
    }

    fn joint_head(&mut self, group: usize, k: u64, now: Instant) -> Head {
        let size = self.groups[group].devices.len();
        let at_head = |w: &World, s: usize| {
            let st = &w.streams[s];
            !st.running
                && st.queue.front().is_some_and(
                    |op| matches!(op.work, Work::Joint { group: g, k: j } if g == group && j == k),
                )
        };
        let Some(slot) = self.groups[group].slots.get(&k) else {
            return Head::Blocked(None);
        };
        if slot.failed.is_some() {
            return Head::Ready;
        }
        let all_here =
            slot.arrived == size && slot.streams.iter().all(|s| s.is_some_and(|s| at_head(self, s)));
        let missing: Vec<usize> = (0..size)
            .filter(|&r| !slot.streams[r].is_some_and(|s| at_head(self, s)))
            .collect();
        let slot = self.groups[group].slots.get_mut(&k).expect("slot checked above");
        if all_here {
            return Head::Ready;
        }
        let reached = *slot.first_reached.get_or_insert(now);
        let deadline = reached + slot.timeout;
        if now < deadline {
            return Head::Blocked(Some(deadline));
        }
        let name = slot
            .parts
            .iter()
            .flatten()
            .map(|p| p.name.clone())
            .next()
            .unwrap_or_default();
        slot.failed = Some(timeout(
            format!("joint op `{name}` #{k} of group {group} (ranks {missing:?} never arrived)"),
            slot.timeout,
        ));
        Head::Ready
    }

    /// Takes the ready head of stream `s` for execution.
    fn claim(&mut self, s: usize, joint_delay: Duration) -> Job {
        let Some(op) = self.streams[s].queue.pop_front() else {
            unreachable!("claim is only called on a ready head");
        };
        let (seq, desc) = (op.info.seq, op.info.desc.clone());
        let Work::Joint { group, k } = op.work else {
            self.streams[s].running = true;
            return Job {
                meta: JobMeta {
                    streams: vec![s],
                    joint: None,
                    seq,
                    desc,
                },
                action: Action::Plain(op),
            };
        };
        // Put it back: a joint entry leaves every participant queue at once.
        self.streams[s].queue.push_front(op);
        let slot = self.groups[group].slots.get_mut(&k).expect("queued joint op has a slot");
        if let Some(err) = slot.failed.clone() {
            let rank = slot.streams.iter().position(|x| *x == Some(s));
            let part = rank.and_then(|r| slot.parts[r].take());
            self.streams[s].queue.pop_front();
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
        slot.taken = true;
        let streams: Vec<usize> = slot.streams.iter().map(|x| x.expect("all arrived")).collect();
        let parts: Vec<Part> = slot.parts.iter_mut().map(|p| p.take().expect("all arrived")).collect();
        for &p in &streams {
            self.streams[p].queue.pop_front();
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

    /// Retires a job: advances its streams, records a failure, retires a finished slot.
    fn finish(&mut self, job: &JobMeta, result: Result<(), BackendError>, trace_cap: usize) {
        for &s in &job.streams {
            let st = &mut self.streams[s];
            st.running = false;
            st.completed += 1;
            let pos = st.completed;
            if let Err(e) = &result {
                self.fail_stream(s, pos, e.clone());
            }
            if self.trace.len() < trace_cap {
                self.trace.push(ExecutedOp {
                    seq: job.seq,
                    stream: memreuse_core::StreamId(s as u64),
                    op: job.desc.clone(),
                });
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

    /// Deterministic mode: every ready head, each joint op once, in stream order; or the
    /// earliest deadline to wait for when none is ready.
    fn ready_heads(&mut self, now: Instant) -> (Vec<usize>, Option<Instant>) {
        let mut ready = Vec::new();
        let mut seen_joint = Vec::new();
        let mut deadline: Option<Instant> = None;
        for s in 0..self.streams.len() {
            match self.head(s, now) {
                Head::Idle => {}
                Head::Blocked(d) => {
                    if let Some(d) = d {
                        deadline = Some(deadline.map_or(d, |x| x.min(d)));
                    }
                }
                Head::Ready => {
                    if let Some(Work::Joint { group, k }) =
                        self.streams[s].queue.front().map(|o| &o.work)
                    {
                        let key = (*group, *k);
                        let failed = self.groups[key.0].slots.get(&key.1).is_some_and(|sl| sl.failed.is_some());
                        if !failed {
                            if seen_joint.contains(&key) {
                                continue;
                            }
                            seen_joint.push(key);
                        }
                    }
                    ready.push(s);
                }
            }
        }
        (ready, deadline)
    }
}

impl Action {
    /// Executes the job (called without the world lock).
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
    if !backed {
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
            let (Some(sb), Some(db)) = (&src.buf, &dst.buf) else {
                return Ok(());
            };
            if src.base == dst.base {
                sb.lock()
                    .copy_within(src.offset..src.offset + src.len, dst.offset);
            } else {
                // Two allocations of one device: lock in address order, as every
                // multi-buffer op does, so concurrent copies cannot deadlock.
                let (first, second) = if src.base < dst.base { (sb, db) } else { (db, sb) };
                let g1 = first.lock();
                let mut g2 = second.lock();
                if src.base < dst.base {
                    g2[dst.offset..dst.offset + dst.len]
                        .copy_from_slice(&g1[src.offset..src.offset + src.len]);
                } else {
                    let mut g1 = g1;
                    g1[dst.offset..dst.offset + dst.len]
                        .copy_from_slice(&g2[src.offset..src.offset + src.len]);
                }
            }
        }
        Work::Delay(d) => std::thread::sleep(d),
        Work::Wait { .. } | Work::Joint { .. } => {}
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
        return Err(crate::error::invalid(
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
fn run_job(core: &Core, w: &mut MutexGuard<'_, World>, job: Job) {
    let Job { meta, action } = job;
    let backed = core.config.backing;
    let result = MutexGuard::unlocked(w, || action.run(backed));
    w.finish(&meta, result, core.config.trace_capacity);
    core.cv.notify_all();
}

/// Threaded mode: the loop of stream `s`'s worker thread.
pub(crate) fn worker(core: &Arc<Core>, s: usize) {
    let mut w = core.world.lock();
    loop {
        if w.shutdown {
            return;
        }
        match w.head(s, Instant::now()) {
            Head::Ready => {
                let job = w.claim(s, core.config.delays.joint);
                run_job(core, &mut w, job);
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
fn step(core: &Core, w: &mut MutexGuard<'_, World>) -> Result<(), Option<Instant>> {
    if w.driving {
        return Err(None);
    }
    let (ready, deadline) = w.ready_heads(Instant::now());
    if ready.is_empty() {
        return Err(deadline);
    }
    let pick = w.rng.as_mut().map_or(0, |r| r.below(ready.len()));
    let job = w.claim(ready[pick], core.config.delays.joint);
    w.driving = true;
    run_job(core, w, job);
    w.driving = false;
    core.cv.notify_all();
    Ok(())
}

/// Deterministic mode: lets the device advance up to `steps` ops (a non-blocking query
/// observes a seeded amount of progress). No-op in threaded mode.
pub(crate) fn advance(core: &Core, w: &mut MutexGuard<'_, World>, steps: usize) {
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
    w: &mut MutexGuard<'_, World>,
    what: &str,
    done: impl Fn(&World) -> bool,
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
