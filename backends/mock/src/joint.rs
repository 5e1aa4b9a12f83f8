//! Joint ops: one op spanning one stream on each of several devices of a cluster (what a
//! mock communicator's collectives are made of), and the memory view their bodies get.
//!
//! NCCL semantics: every rank submits its share of the group's ops from its own thread,
//! in the same order; the `k`-th submission of each rank forms the `k`-th joint op, which
//! runs once, when every participant stream has reached it. A rank that never arrives
//! turns the op into a [`BackendError::Timeout`] on every participant that did (see
//! [`JointOp::timeout`]), surfaced by event queries, synchronizes and
//! [`MockDevice::last_error`].

use std::sync::Arc;
use std::time::Duration;

use memreuse_core::{AccessKind, BackendError, DevicePtr};
use parking_lot::MutexGuard;

use crate::device::{MockDevice, MockStream, Owner};
use crate::error::invalid;
use crate::memory::Span;
use crate::world::{GroupState, Op, Part, Slot, Work};

/// The data movement of a joint or custom op. It runs once, on a worker (or the driving
/// host thread), with every declared region locked; it must not block on other device
/// work, and must not own the last handle to a device of the cluster.
pub type JointBody = Box<dyn FnOnce(&mut JointMemory<'_>) -> Result<(), BackendError> + Send>;

/// One byte range an op declares it reads or writes. The race detector checks it, and
/// the op's body sees it as a region (in declaration order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemAccess {
    /// First byte.
    pub ptr: DevicePtr,
    /// Length.
    pub bytes: u64,
    /// Read or write.
    pub kind: AccessKind,
}

impl MemAccess {
    /// The op reads `[ptr, ptr + bytes)`.
    pub fn read(ptr: DevicePtr, bytes: u64) -> MemAccess {
        MemAccess {
            ptr,
            bytes,
            kind: AccessKind::Read,
        }
    }

    /// The op writes `[ptr, ptr + bytes)`.
    pub fn write(ptr: DevicePtr, bytes: u64) -> MemAccess {
        MemAccess {
            ptr,
            bytes,
            kind: AccessKind::Write,
        }
    }
}

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
            return Err(invalid("JointGroup::new", "a group needs at least one device"));
        };
        if devices.iter().any(|d| !Arc::ptr_eq(&d.owner.core, &first.owner.core)) {
            return Err(invalid(
                "JointGroup::new",
                "all devices of a group must belong to one MockCluster",
            ));
        }
        let mut w = first.owner.core.world.lock();
        let id = w.groups.len();
        w.groups.push(GroupState {
            devices: devices.iter().map(|d| d.slot).collect(),
            submitted: vec![0; devices.len()],
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

    /// Enqueues rank `rank`'s share of the group's next joint op on `stream` (a stream of
    /// that rank's device). Its accesses are checked by the race detector now, as for any
    /// op. Returns the op's number in the group (0, 1, ...).
    pub fn submit(
        &self,
        rank: usize,
        stream: &MockStream,
        op: JointOp,
    ) -> Result<u64, BackendError> {
        const CALL: &str = "joint op";
        let Some(device) = self.devices.get(rank) else {
            return Err(invalid(
                CALL,
                format!("rank {rank} out of range for a group of {}", self.size()),
            ));
        };
        let core = &self.owner.core;
        let mut w = core.world.lock();
        let s = device.stream_index(stream, CALL)?;
        let spans = device.spans(&w, CALL, &op.accesses)?;
        let timeout = op.timeout.unwrap_or(core.config.joint_timeout);
        let info = w.begin_op(s, &op.name, &spans);
        let clock = w.streams[s].clock.clone();
        let size = self.size();
        let group = &mut w.groups[self.id];
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
            taken: false,
        });
        slot.timeout = slot.timeout.min(timeout);
        slot.parts[rank] = Some(Part {
            name: op.name,
            device: device.slot,
            regions: spans.into_iter().map(|(span, _)| span).collect(),
            body: op.body,
            clock,
        });
        slot.streams[rank] = Some(s);
        slot.arrived += 1;
        if slot.arrived == size {
            // A collective orders everything before it on every participant before
            // everything after it on any participant.
            let mut joint = crate::clock::VClock::default();
            for p in slot.parts.iter().flatten() {
                joint.join(&p.clock);
            }
            let streams: Vec<usize> = slot.streams.iter().flatten().copied().collect();
            for p in streams {
                w.streams[p].clock.join(&joint);
            }
        }
        w.push(
            s,
            Op {
                info,
                delay: Duration::ZERO,
                work: Work::Joint { group: self.id, k },
            },
        );
        drop(w);
        core.cv.notify_all();
        Ok(k)
    }
}

/// The regions of a joint or custom op, per rank: `(device slot, spans)`.
pub(crate) struct JointRegions(Vec<(usize, Vec<Span>)>);

impl JointRegions {
    pub(crate) fn new(ranks: Vec<(usize, Vec<Span>)>) -> JointRegions {
        JointRegions(ranks)
    }
}

/// What a joint or custom op's body sees: every declared region of every rank, locked for
/// the duration of the body. Regions are addressed by `(rank, region index)`; a custom op
/// has the single rank 0.
pub struct JointMemory<'a> {
    guards: Vec<MutexGuard<'a, Vec<u8>>>,
    /// Per rank, per region: `(guard index, offset, len)`.
    index: Vec<Vec<(usize, usize, usize)>>,
}

impl<'a> JointMemory<'a> {
    /// Locks every distinct buffer behind `regions`, in (device, address) order (the order
    /// every multi-buffer op uses, so concurrent ops cannot deadlock).
    pub(crate) fn lock(regions: &'a JointRegions) -> JointMemory<'a> {
        let mut keys: Vec<(usize, u64, &'a crate::memory::Buffer)> = regions
            .0
            .iter()
            .flat_map(|(dev, spans)| {
                spans
                    .iter()
                    .filter_map(move |s| s.buf.as_ref().map(|b| (*dev, s.base, b)))
            })
            .collect();
        keys.sort_by_key(|k| (k.0, k.1));
        keys.dedup_by_key(|k| (k.0, k.1));
        let guards = keys.iter().map(|k| k.2.lock()).collect();
        let index = regions
            .0
            .iter()
            .map(|(dev, spans)| {
                spans
                    .iter()
                    .map(|s| {
                        let g = keys
                            .binary_search_by_key(&(*dev, s.base), |k| (k.0, k.1))
                            .unwrap_or(usize::MAX);
                        (g, s.offset, s.len)
                    })
                    .collect()
            })
            .collect();
        JointMemory { guards, index }
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.index.len()
    }

    /// Number of regions `rank` declared.
    pub fn regions(&self, rank: usize) -> usize {
        self.index.get(rank).map_or(0, Vec::len)
    }

    fn locate(&self, rank: usize, region: usize) -> Result<(usize, usize, usize), BackendError> {
        self.index
            .get(rank)
            .and_then(|r| r.get(region))
            .copied()
            .filter(|(g, _, _)| *g < self.guards.len())
            .ok_or_else(|| {
                invalid(
                    "JointMemory",
                    format!("rank {rank} has no backed region {region}"),
                )
            })
    }

    /// The bytes of region `region` of `rank`.
    pub fn bytes(&self, rank: usize, region: usize) -> Result<&[u8], BackendError> {
        let (g, off, len) = self.locate(rank, region)?;
        Ok(&self.guards[g][off..off + len])
    }

    /// The bytes of region `region` of `rank`, writable.
    pub fn bytes_mut(&mut self, rank: usize, region: usize) -> Result<&mut [u8], BackendError> {
        let (g, off, len) = self.locate(rank, region)?;
        Ok(&mut self.guards[g][off..off + len])
    }
}

impl MockDevice {
    /// Enqueues a custom op on `stream`: `body` runs in stream order with the `accesses`
    /// as its regions (rank 0), and the race detector checks them like any op's.
    pub fn enqueue_custom(
        &self,
        stream: &MockStream,
        name: &str,
        accesses: &[MemAccess],
        body: impl FnOnce(&mut JointMemory<'_>) -> Result<(), BackendError> + Send + 'static,
    ) -> Result<(), BackendError> {
        const CALL: &str = "enqueue_custom";
        let core = &self.owner.core;
        let mut w = core.world.lock();
        let s = self.stream_index(stream, CALL)?;
        let spans = self.spans(&w, CALL, accesses)?;
        let info = w.begin_op(s, name, &spans);
        let body: JointBody = Box::new(body);
        w.push(
            s,
            Op {
                info,
                delay: core.config.delays.custom,
                work: Work::Custom {
                    regions: spans.into_iter().map(|(span, _)| span).collect(),
                    body: Some(body),
                },
            },
        );
        drop(w);
        core.cv.notify_all();
        Ok(())
    }
}
