//! Joint ops: one op spanning one stream on each of several devices of a cluster (what a
//! mock communicator's collectives are made of).
//!
//! NCCL semantics: every rank submits its share of the group's ops from its own thread,
//! in the same order; the `k`-th submission of each rank forms the `k`-th joint op, which
//! runs once, when every participant stream has reached it. A rank that never arrives
//! turns the op into a [`BackendError::Timeout`] on every participant that did (see
//! [`JointOp::timeout`]), surfaced by event queries, synchronizes and
//! [`MockDevice::last_error`].

use std::sync::Arc;
use std::time::Duration;

use memreuse_core::{AccessKind, BackendError};

use crate::cluster_state::{ClusterState, GroupState, JointEntry, JointItem, Op, Part, Slot, Work};
use crate::device::MockDevice;
use crate::error::{BACKEND_NAME, injected};
use crate::handles::MockStream;
use crate::memory::Span;
use crate::owner::Owner;
use crate::region::{JointBody, JointMemory, MemAccess};

/// One rank's share of a joint op, built with the methods below and passed to
/// [`JointGroup::submit`].
pub struct JointOp {
    pub(crate) name: String,
    pub(crate) accesses: Vec<MemAccess>,
    pub(crate) body: Option<JointBody>,
    pub(crate) timeout: Option<Duration>,
}

impl JointOp {
    /// A joint op called `name` (every rank must use the same name at the same position,
    /// otherwise the op fails with `InvalidArgument` on every rank).
    pub fn new(name: impl Into<String>) -> JointOp {
        JointOp {
            name: name.into(),
            accesses: Vec::new(),
            body: None,
            timeout: None,
        }
    }

    /// Declares one more region of this rank (region indices follow declaration order).
    #[must_use]
    pub fn access(mut self, access: MemAccess) -> JointOp {
        self.accesses.push(access);
        self
    }

    /// Declares several regions.
    #[must_use]
    pub fn accesses(mut self, accesses: impl IntoIterator<Item = MemAccess>) -> JointOp {
        self.accesses.extend(accesses);
        self
    }

    /// The data movement. Of all ranks' bodies, the one of the lowest rank that gave one
    /// runs (once, with every rank's regions); a joint op without any body only
    /// synchronizes (a barrier). Bodies do not run on unbacked devices.
    #[must_use]
    pub fn body(
        mut self,
        body: impl FnOnce(&mut JointMemory<'_>) -> Result<(), BackendError> + Send + 'static,
    ) -> JointOp {
        self.body = Some(Box::new(body));
        self
    }

    /// How long the op waits, once the first participant stream reached it, for the
    /// others (default: the cluster's `joint_timeout`; the smallest of all ranks' wins).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> JointOp {
        self.timeout = Some(timeout);
        self
    }
}

/// A group of ranks, one device each, whose joint ops are matched in issue order (an
/// NCCL communicator's device side). Cheap to clone; each rank's thread uses its clone.
#[derive(Clone)]
pub struct JointGroup {
    owner: Arc<Owner>,
    id: usize,
    devices: Vec<MockDevice>,
}

impl std::fmt::Debug for JointGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JointGroup#{}({} ranks)", self.id, self.devices.len())
    }
}

impl JointGroup {
    /// A group whose rank `r` runs on `devices[r]`; all must belong to one cluster.
    pub fn new(devices: &[MockDevice]) -> Result<JointGroup, BackendError> {
        let Some(first) = devices.first() else {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "JointGroup::new",
                "a group needs at least one device",
            ));
        };
        if devices
            .iter()
            .any(|d| !Arc::ptr_eq(&d.owner.core, &first.owner.core))
        {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "JointGroup::new",
                "all devices of a group must belong to one MockCluster",
            ));
        }
        let mut w = first.owner.core.state.lock();
        let id = w.groups.len();
        w.groups.push(GroupState {
            devices: devices.iter().map(|d| d.slot).collect(),
            submitted: vec![0; devices.len()],
            injected: Vec::new(),
            aborted: None,
            slots: std::collections::HashMap::new(),
        });
        drop(w);
        Ok(JointGroup {
            owner: Arc::clone(&first.owner),
            id,
            devices: devices.to_vec(),
        })
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.devices.len()
    }

    /// The device of `rank`.
    pub fn device(&self, rank: usize) -> Option<&MockDevice> {
        self.devices.get(rank)
    }

    /// Fault injection: the group's `k`-th joint op (numbered as [`JointGroup::submit`]
    /// returns) fails with [`BackendError::Injected`] on every rank instead of running.
    /// No effect on an op that already started.
    pub fn inject_failure(&self, k: u64) {
        let mut w = self.owner.core.state.lock();
        let group = &mut w.groups[self.id];
        match group.slots.get_mut(&k) {
            Some(slot) => {
                if slot.failed.is_none() {
                    slot.failed = Some(injected(format!("joint op #{k} of group {}", self.id)));
                }
            }
            None => {
                if group.submitted.iter().all(|&n| n <= k) {
                    group.injected.push(k);
                }
            }
        }
        drop(w);
        self.owner.core.cv.notify_all();
    }

    /// Aborts the group: every joint op of it that has not started, queued or submitted
    /// later, fails on every rank (with a `Device` error naming `reason`) instead of
    /// waiting for peers. Ops already running finish.
    pub fn abort(&self, reason: &str) {
        let mut w = self.owner.core.state.lock();
        let group = &mut w.groups[self.id];
        let err = crate::error::aborted(reason);
        for slot in group.slots.values_mut() {
            if slot.failed.is_none() {
                slot.failed = Some(err.clone());
            }
        }
        group.aborted = Some(err);
        drop(w);
        self.owner.core.cv.notify_all();
    }

    /// Enqueues rank `rank`'s share of the group's next joint op on `stream` (a stream of
    /// that rank's device). Its accesses are checked by the race detector now, as for any
    /// op. Returns the op's number in the group (0, 1, ...).
    pub fn submit(
        &self,
        rank: usize,
        stream: &MockStream,
        op: JointOp,
    ) -> Result<u64, BackendError> {
        let ks = JointGroup::submit_batch(stream, vec![(self, rank, op)])?;
        Ok(ks[0])
    }

    /// Enqueues several joint-op shares as **one** entry of `stream` (NCCL's
    /// `ncclGroupStart`/`ncclGroupEnd`): each `(group, rank, op)` is matched in its group
    /// as [`JointGroup::submit`] would, and the entry completes once all of them ran.
    /// Members of a batch never wait for each other, so a ring of sends and receives
    /// issued as batches cannot deadlock. Every `group.device(rank)` must be the device of
    /// `stream`. Returns each op's number in its group.
    pub fn submit_batch(
        stream: &MockStream,
        ops: Vec<(&JointGroup, usize, JointOp)>,
    ) -> Result<Vec<u64>, BackendError> {
        const CALL: &str = "joint op";
        let Some((first, first_rank, _)) = ops.first() else {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                CALL,
                "an empty batch",
            ));
        };
        let Some(device) = first.devices.get(*first_rank) else {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                CALL,
                format!(
                    "rank {first_rank} out of range for a group of {}",
                    first.size()
                ),
            ));
        };
        for (group, rank, _) in &ops {
            match group.devices.get(*rank) {
                Some(d)
                    if Arc::ptr_eq(&d.owner.core, &device.owner.core) && d.slot == device.slot => {}
                Some(_) => {
                    return Err(BackendError::invalid_argument(
                        BACKEND_NAME,
                        CALL,
                        "every op of a batch must be a share of the stream's own device",
                    ));
                }
                None => {
                    return Err(BackendError::invalid_argument(
                        BACKEND_NAME,
                        CALL,
                        format!("rank {rank} out of range for a group of {}", group.size()),
                    ));
                }
            }
        }
        let core = &device.owner.core;
        let mut w = core.state.lock();
        let s = device.stream_index(stream, CALL)?;
        // Validate everything before changing anything.
        let spans: Vec<Vec<(Span, AccessKind)>> = ops
            .iter()
            .map(|(_, _, op)| device.spans(&w, CALL, &op.accesses))
            .collect::<Result<_, _>>()?;
        let all: Vec<(Span, AccessKind)> = spans.iter().flatten().cloned().collect();
        let name = ops
            .iter()
            .map(|(_, _, op)| op.name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        let info = w.begin_op(s, &name, &all);
        let clock = w.hb.stream_clock(s).clone();
        let mut items = Vec::with_capacity(ops.len());
        for ((group, rank, op), spans) in ops.into_iter().zip(spans) {
            let timeout = op.timeout.unwrap_or(core.config.joint_timeout);
            let part = Part {
                name: op.name,
                device: device.slot,
                regions: spans.into_iter().map(|(span, _)| span).collect(),
                body: op.body,
                clock: clock.clone(),
            };
            let k = arrive(&mut w, group.id, rank, s, part, timeout);
            items.push(JointItem {
                group: group.id,
                k,
                done: false,
            });
        }
        let ks = items.iter().map(|i| i.k).collect();
        w.push(
            s,
            Op {
                info,
                delay: Duration::ZERO,
                work: Work::Joint(JointEntry { items, error: None }),
            },
        );
        drop(w);
        core.cv.notify_all();
        Ok(ks)
    }
}

/// Registers `part` as rank `rank`'s share of `group`'s next joint op; returns its number.
fn arrive(
    w: &mut ClusterState,
    group_id: usize,
    rank: usize,
    s: usize,
    part: Part,
    timeout: Duration,
) -> u64 {
    let group = &mut w.groups[group_id];
    let size = group.devices.len();
    let k = group.submitted[rank];
    group.submitted[rank] += 1;
    let slot = group.slots.entry(k).or_insert_with(|| Slot {
        parts: (0..size).map(|_| None).collect(),
        streams: vec![None; size],
        arrived: 0,
        first_reached: None,
        timeout,
        failed: None,
        done: 0,
    });
    slot.timeout = slot.timeout.min(timeout);
    if slot.failed.is_none() {
        slot.failed.clone_from(&group.aborted);
    }
    if slot.failed.is_none()
        && let Some(i) = group.injected.iter().position(|&j| j == k)
    {
        group.injected.swap_remove(i);
        slot.failed = Some(injected(format!(
            "joint op `{}` #{k} of group {group_id}",
            part.name
        )));
    }
    slot.parts[rank] = Some(part);
    slot.streams[rank] = Some(s);
    slot.arrived += 1;
    if slot.arrived == size {
        // A collective orders everything before it on every participant before
        // everything after it on any participant.
        let streams: Vec<usize> = slot.streams.iter().flatten().copied().collect();
        w.hb.meet(&streams, slot.parts.iter().flatten().map(|p| &p.clock));
    }
    k
}
