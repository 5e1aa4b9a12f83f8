//! The proxy of one communicator: a thread that matches what the members issued, waits on
//! the host until every member's stream reached its operation, moves the data through the
//! mappings and opens each member's gate.
//!
//! Matching follows NCCL: collectives in issue order across members (the `k`-th of every
//! member together; a kind or count that differs is an error on every member),
//! point-to-point per `(sender, receiver)` pair in issue order. An operation a member never
//! issues within the timeout is a [`BackendError::Timeout`] naming the missing members;
//! like a mismatch it aborts the communicator. On abort, every gate already handed in opens
//! (without moving data) once its stream reached it, so no stream stays held.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use memreuse_core::BackendError;
use memreuse_core::comm::{CommError, DType};
use parking_lot::{Condvar, Mutex};

use super::movement::{Kind, run_collective};
use crate::VulkanDevice;
use crate::handles::Gate;
use crate::memory::Span;
use crate::result::BACKEND;
use crate::sched::host_wait;

/// How long the proxy waits on one stream before looking at its queues again.
const POLL: Duration = Duration::from_millis(1);

/// `(creation number, ranks)` of a sub-group.
pub type SubgroupKey = (u64, Vec<usize>);

/// A member's gate, shared by the operations of one `group_start`/`group_end` batch: it
/// opens when all of them are done.
pub struct SharedGate {
    gate: Gate,
    remaining: AtomicUsize,
    /// Set when an operation behind the gate was dropped instead of run.
    failure: Mutex<Option<BackendError>>,
}

impl SharedGate {
    /// A gate that opens after `ops` operations finished.
    pub fn new(gate: Gate, ops: usize) -> Arc<SharedGate> {
        Arc::new(SharedGate {
            gate,
            remaining: AtomicUsize::new(ops),
            failure: Mutex::new(None),
        })
    }

    /// Marks the gate's operation as dropped (the first reason is kept).
    fn fail(&self, error: &BackendError) {
        self.failure.lock().get_or_insert_with(|| error.clone());
    }

    /// Opens the gate once its last operation finished (failed if any was dropped).
    fn finish_one(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            match self.failure.lock().take() {
                Some(e) => self.gate.open_failed(e),
                None => self.gate.open(),
            }
        }
    }
}

/// The error a stream reports for an operation its communicator dropped.
fn dropped(reason: &str) -> BackendError {
    BackendError::Device {
        backend: BACKEND.to_owned(),
        call: "communicator",
        code: -1,
        code_name: "VULKAN_COMM_ABORTED".to_owned(),
        message: format!("the operation did not run: {reason}"),
    }
}

/// One member's part of a collective.
pub struct Contribution {
    /// Operation, element type and element count (compared across members).
    pub kind: Kind,
    /// The element type.
    pub dtype: DType,
    /// Elements.
    pub count: usize,
    /// Buffers, in the order of [`Kind`].
    pub spans: Vec<Span>,
    /// The member's gate.
    pub gate: Arc<SharedGate>,
}

/// One side of a point-to-point transfer.
pub struct Side {
    /// The element type (compared with the other side's).
    pub dtype: DType,
    /// Elements.
    pub count: usize,
    /// The buffer.
    pub span: Span,
    /// The member's gate.
    pub gate: Arc<SharedGate>,
}

struct CollSet {
    first: Instant,
    slots: Vec<Option<Contribution>>,
}

struct Pair {
    first: Instant,
    send: Option<Side>,
    recv: Option<Side>,
}

#[derive(Default)]
struct HubState {
    collectives: BTreeMap<u64, CollSet>,
    pairs: HashMap<(usize, usize, u64), Pair>,
    /// Gates whose operations are done (or dropped by an abort), opened once reached.
    opening: Vec<Arc<SharedGate>>,
    aborted: Option<String>,
    error: Option<CommError>,
    members_left: usize,
    /// Something arrived since the proxy last looked (a wake-up it may have missed).
    dirty: bool,
}

/// What every member of one communicator shares.
pub struct Hub {
    /// Unique in the process (messages).
    pub uid: u64,
    /// Device of each group rank.
    pub devices: Vec<VulkanDevice>,
    /// How long an operation waits for a member that never issues it.
    pub timeout: Duration,
    state: Mutex<HubState>,
    wake: Condvar,
    /// `(creation number, ranks)` -> the sub-group's hub.
    pub subgroups: Mutex<HashMap<SubgroupKey, Arc<Hub>>>,
}

impl Hub {
    /// A hub over `devices` (group rank order) and its proxy thread.
    pub fn start(
        uid: u64,
        devices: Vec<VulkanDevice>,
        timeout: Duration,
    ) -> Result<Arc<Hub>, BackendError> {
        let hub = Arc::new(Hub {
            uid,
            state: Mutex::new(HubState {
                members_left: devices.len(),
                ..HubState::default()
            }),
            devices,
            timeout,
            wake: Condvar::new(),
            subgroups: Mutex::new(HashMap::new()),
        });
        let proxy = Arc::clone(&hub);
        std::thread::Builder::new()
            .name(format!("vulkan-proxy-{uid}"))
            .spawn(move || proxy.serve())
            .map_err(|e| BackendError::Unavailable {
                backend: BACKEND.to_owned(),
                reason: format!("could not start the communicator's proxy thread: {e}"),
            })?;
        Ok(hub)
    }

    /// `Err(Aborted)` once aborted.
    pub fn check_alive(&self) -> Result<(), CommError> {
        match &self.state.lock().aborted {
            Some(reason) => Err(CommError::Aborted {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Hands in member `rank`'s part of collective number `seq`.
    pub fn contribute(&self, seq: u64, rank: usize, c: Contribution) {
        let size = self.devices.len();
        let mut st = self.state.lock();
        if let Some(reason) = &st.aborted {
            c.gate.fail(&dropped(reason));
            st.opening.push(c.gate);
        } else {
            let set = st.collectives.entry(seq).or_insert_with(|| CollSet {
                first: Instant::now(),
                slots: (0..size).map(|_| None).collect(),
            });
            set.slots[rank] = Some(c);
        }
        st.dirty = true;
        drop(st);
        self.wake.notify_one();
    }

    /// Hands in one side of transfer number `seq` from `sender` to `receiver`.
    pub fn transfer(&self, key: (usize, usize, u64), sending: bool, side: Side) {
        let mut st = self.state.lock();
        if let Some(reason) = &st.aborted {
            side.gate.fail(&dropped(reason));
            st.opening.push(side.gate);
        } else {
            let pair = st.pairs.entry(key).or_insert_with(|| Pair {
                first: Instant::now(),
                send: None,
                recv: None,
            });
            if sending {
                pair.send = Some(side);
            } else {
                pair.recv = Some(side);
            }
        }
        st.dirty = true;
        drop(st);
        self.wake.notify_one();
    }

    /// The error that ended this communicator, if any.
    pub fn error(&self) -> Option<CommError> {
        let st = self.state.lock();
        st.error.clone().or_else(|| {
            st.aborted.as_ref().map(|reason| CommError::Aborted {
                reason: reason.clone(),
            })
        })
    }

    /// Aborts: later calls fail, held gates open once reached.
    pub fn abort(&self, reason: String, error: Option<CommError>) {
        let mut st = self.state.lock();
        let failure = match &error {
            Some(CommError::Backend(e)) => e.clone(),
            _ => dropped(&reason),
        };
        if st.aborted.is_none() {
            st.aborted = Some(reason);
            st.error = error;
        }
        let gates: Vec<Arc<SharedGate>> = std::mem::take(&mut st.collectives)
            .into_values()
            .flat_map(|set| set.slots.into_iter().flatten().map(|c| c.gate))
            .chain(
                std::mem::take(&mut st.pairs)
                    .into_values()
                    .flat_map(|p| [p.send, p.recv].into_iter().flatten().map(|s| s.gate)),
            )
            .collect();
        for g in &gates {
            g.fail(&failure);
        }
        st.opening.extend(gates);
        st.dirty = true;
        drop(st);
        self.wake.notify_one();
    }

    /// One member is gone; when the last goes the proxy finishes what it holds and stops.
    pub fn member_dropped(&self) {
        let last = {
            let mut st = self.state.lock();
            st.members_left = st.members_left.saturating_sub(1);
            st.members_left == 0
        };
        if last {
            self.abort(format!("communicator {} dropped", self.uid), None);
        }
    }

    fn serve(&self) {
        loop {
            let progressed = self.step();
            let mut st = self.state.lock();
            if progressed || st.dirty {
                continue;
            }
            let idle = st.collectives.is_empty() && st.pairs.is_empty() && st.opening.is_empty();
            if idle && st.members_left == 0 {
                return;
            }
            match next(&st) {
                Next::Ready => {}
                Next::WaitFor(gate) => {
                    drop(st);
                    let g = &gate.gate;
                    let _ = host_wait(&g.raw, g.sem, g.before, POLL, "proxy poll");
                }
                Next::Sleep if idle => self.wake.wait(&mut st),
                Next::Sleep => {
                    let deadline = self.deadline(&st);
                    let _ = self.wake.wait_until(&mut st, deadline);
                }
            }
        }
    }

    /// Earliest moment an incomplete operation times out.
    fn deadline(&self, st: &HubState) -> Instant {
        let firsts = st
            .collectives
            .values()
            .map(|s| s.first)
            .chain(st.pairs.values().map(|p| p.first));
        firsts.min().map_or_else(Instant::now, |t| t + self.timeout)
    }

    /// Runs everything that is ready; true when anything happened.
    fn step(&self) -> bool {
        let mut st = self.state.lock();
        st.dirty = false;
        let mut progressed = false;
        // Collectives whose every member handed in and reached them.
        let ready: Vec<u64> = st
            .collectives
            .iter()
            .filter(|(_, set)| {
                set.slots
                    .iter()
                    .all(|s| s.as_ref().is_some_and(|c| reached(&c.gate)))
            })
            .map(|(&k, _)| k)
            .collect();
        let sets: Vec<(u64, CollSet)> = ready
            .into_iter()
            .filter_map(|k| st.collectives.remove(&k).map(|s| (k, s)))
            .collect();
        let pair_keys: Vec<(usize, usize, u64)> = st
            .pairs
            .iter()
            .filter(|(_, p)| {
                p.send.as_ref().is_some_and(|s| reached(&s.gate))
                    && p.recv.as_ref().is_some_and(|s| reached(&s.gate))
            })
            .map(|(&k, _)| k)
            .collect();
        let pairs: Vec<((usize, usize, u64), Pair)> = pair_keys
            .into_iter()
            .filter_map(|k| st.pairs.remove(&k).map(|p| (k, p)))
            .collect();
        let timed_out = self.timed_out(&st);
        drop(st);
        for (seq, set) in sets {
            progressed = true;
            self.run_set(seq, set);
        }
        for (key, pair) in pairs {
            progressed = true;
            self.run_pair(key, pair);
        }
        if let Some(e) = timed_out {
            progressed = true;
            let reason = e.to_string();
            self.abort(reason, Some(CommError::Backend(e)));
        }
        // Open every finished gate whose stream reached it.
        let mut st = self.state.lock();
        let (open, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut st.opening)
            .into_iter()
            .partition(|g| reached(g));
        st.opening = keep;
        drop(st);
        for g in open {
            progressed = true;
            g.finish_one();
        }
        progressed
    }

    fn finish(&self, gates: impl IntoIterator<Item = Arc<SharedGate>>) {
        self.state.lock().opening.extend(gates);
    }

    fn run_set(&self, seq: u64, set: CollSet) {
        let members: Vec<Contribution> = set.slots.into_iter().flatten().collect();
        let (kind, dtype, count) = (members[0].kind, members[0].dtype, members[0].count);
        let odd = members
            .iter()
            .enumerate()
            .find(|(_, c)| c.kind != kind || c.dtype != dtype || c.count != count);
        if let Some((r, c)) = odd {
            let what = format!(
                "collective #{seq} of communicator {}: rank {r} issued {}({} {} elements), rank 0 {kind}({count} {dtype} elements)",
                self.uid, c.kind, c.count, c.dtype
            );
            let failure = dropped(&what);
            for c in &members {
                c.gate.fail(&failure);
            }
            self.finish(members.into_iter().map(|c| c.gate));
            self.abort(what.clone(), Some(mismatch(what)));
            return;
        }
        let spans: Vec<Vec<Span>> = members.iter().map(|c| c.spans.clone()).collect();
        if let Err(e) = run_collective(kind, dtype, &spans) {
            let what = format!("collective #{seq} of communicator {}: {e}", self.uid);
            let failure = dropped(&what);
            for c in &members {
                c.gate.fail(&failure);
            }
            self.finish(members.into_iter().map(|c| c.gate));
            self.abort(what.clone(), Some(mismatch(what)));
            return;
        }
        self.finish(members.into_iter().map(|c| c.gate));
    }

    fn run_pair(&self, key: (usize, usize, u64), pair: Pair) {
        let (Some(send), Some(recv)) = (pair.send, pair.recv) else {
            return;
        };
        if send.count == recv.count && send.dtype == recv.dtype {
            recv.span.store(&send.span.to_vec());
            self.finish([send.gate, recv.gate]);
        } else {
            let what = format!(
                "transfer #{} of communicator {} from rank {} to rank {}: {} {} elements sent, {} {} expected",
                key.2, self.uid, key.0, key.1, send.count, send.dtype, recv.count, recv.dtype
            );
            let failure = dropped(&what);
            send.gate.fail(&failure);
            recv.gate.fail(&failure);
            self.finish([send.gate, recv.gate]);
            self.abort(what.clone(), Some(mismatch(what)));
        }
    }

    /// The timeout error of the oldest incomplete operation past its deadline.
    fn timed_out(&self, st: &HubState) -> Option<BackendError> {
        let millis = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        let late = |first: Instant| first.elapsed() > self.timeout;
        for (seq, set) in &st.collectives {
            let missing: Vec<usize> = (0..set.slots.len())
                .filter(|&r| set.slots[r].is_none())
                .collect();
            if !missing.is_empty() && late(set.first) {
                return Some(BackendError::Timeout {
                    backend: BACKEND.to_owned(),
                    what: format!(
                        "collective #{seq} of communicator {}: ranks {missing:?} never issued it",
                        self.uid
                    ),
                    millis,
                });
            }
        }
        for ((from, to, seq), p) in &st.pairs {
            if (p.send.is_none() || p.recv.is_none()) && late(p.first) {
                let who = if p.send.is_none() { from } else { to };
                return Some(BackendError::Timeout {
                    backend: BACKEND.to_owned(),
                    what: format!(
                        "transfer #{seq} of communicator {} from rank {from} to rank {to}: rank {who} never issued its side",
                        self.uid
                    ),
                    millis,
                });
            }
        }
        None
    }
}

fn mismatch(what: String) -> CommError {
    CommError::invalid_argument("collective matching", what)
}

/// True once the gate's stream completed everything before it (a query error counts as
/// not yet; the host wait that follows reports nothing, the timeout does).
fn reached(g: &SharedGate) -> bool {
    g.gate.reached().unwrap_or(false)
}

/// What the proxy should do when [`Hub::step`] found nothing to run.
enum Next {
    /// Something became ready since: look again now.
    Ready,
    /// A complete operation (or finished gate) waits for this gate's stream.
    WaitFor(Arc<SharedGate>),
    /// Only incomplete operations (or nothing) are held.
    Sleep,
}

/// Decides [`Next`] from the held state (gates may have been reached after `step` looked).
fn next(st: &HubState) -> Next {
    let complete_colls = st
        .collectives
        .values()
        .filter(|s| s.slots.iter().all(Option::is_some))
        .map(|s| {
            s.slots
                .iter()
                .flatten()
                .map(|c| &c.gate)
                .collect::<Vec<_>>()
        });
    let complete_pairs = st
        .pairs
        .values()
        .filter(|p| p.send.is_some() && p.recv.is_some())
        .map(|p| {
            [&p.send, &p.recv]
                .into_iter()
                .flatten()
                .map(|s| &s.gate)
                .collect::<Vec<_>>()
        });
    let singles = st.opening.iter().map(|g| vec![g]);
    let mut wait = None;
    for gates in complete_colls.chain(complete_pairs).chain(singles) {
        match gates.iter().find(|g| !reached(g)) {
            None => return Next::Ready,
            Some(g) if wait.is_none() => wait = Some(Arc::clone(g)),
            Some(_) => {}
        }
    }
    wait.map_or(Next::Sleep, Next::WaitFor)
}
