//! [`RaceWorld`]: the clocks the adaptor derives from API calls, shared by every rank of
//! one world, and the per-device engines.
//!
//! One mutex guards everything, as in the mock: a collective's arrival changes the clocks
//! of streams on other devices, so the state of all ranks must change atomically.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::ids::StreamId;
use crate::race::{AccessKind, DeviceDetector, OpInfo, VClock};

/// Which issue order a communication op is matched in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Channel {
    /// The communicator's collectives (one issue order for all members).
    Collective,
    /// Point-to-point from `sender` to `receiver` (group ranks).
    Pair(usize, usize),
}

/// A matching order: communicator family plus channel.
pub(crate) type MatchKey = (u64, Channel);

/// The `k`-th op of one matching order, while some participant has not arrived.
struct Slot {
    /// Clock of each arrived participant's stream at its op.
    clocks: Vec<Option<VClock>>,
    /// Clock component (stream) of each arrived participant.
    streams: Vec<Option<usize>>,
    arrived: usize,
}

/// One matching order's progress.
struct Matcher {
    submitted: Vec<u64>,
    slots: HashMap<u64, Slot>,
}

/// What the adaptor knows about one device.
pub(crate) struct DeviceState {
    pub detector: DeviceDetector,
    /// What the host driving this device has observed complete.
    pub host: VClock,
    /// Clock component of each stream seen, by the backend's stream id.
    pub streams: HashMap<StreamId, usize>,
    /// Label of the ops recorded next (`set_op_label`).
    pub label: Arc<str>,
}

/// Every clock of the world.
pub(crate) struct WorldState {
    pub devices: Vec<DeviceState>,
    /// Clock of each stream, by component.
    pub clocks: Vec<VClock>,
    next_op: u64,
    next_family: u64,
    matchers: HashMap<MatchKey, Matcher>,
    /// `(parent family, new_group call number, ranks)` -> the sub-group's family.
    subgroups: HashMap<(u64, u64, Vec<usize>), u64>,
}

/// The shared state of one race-checked world: every [`super::RaceChecker`] and
/// [`super::RaceCheckedComm`] of the world holds it. Create one per world (one per
/// conformance run), then one checker per device with [`super::RaceChecker::new`].
pub struct RaceWorld {
    pub(crate) state: Mutex<WorldState>,
    max_reports: usize,
}

impl std::fmt::Debug for RaceWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        write!(
            f,
            "RaceWorld({} devices, {} streams)",
            s.devices.len(),
            s.clocks.len()
        )
    }
}

impl RaceWorld {
    /// A world with no devices yet; each device keeps at most `max_reports` reports (later
    /// races are only counted).
    pub fn new(max_reports: usize) -> Arc<RaceWorld> {
        Arc::new(RaceWorld {
            state: Mutex::new(WorldState {
                devices: Vec::new(),
                clocks: Vec::new(),
                next_op: 0,
                next_family: 0,
                matchers: HashMap::new(),
                subgroups: HashMap::new(),
            }),
            max_reports,
        })
    }

    /// A fresh communicator identity: every member of one communicator must be wrapped
    /// with the same family (see [`super::RaceCheckedComm::new`]).
    pub fn new_family(&self) -> u64 {
        let mut s = self.state.lock();
        s.new_family()
    }

    pub(crate) fn add_device(&self) -> usize {
        let mut s = self.state.lock();
        s.devices.push(DeviceState {
            detector: DeviceDetector::new(self.max_reports),
            host: VClock::default(),
            streams: HashMap::new(),
            label: Arc::from(""),
        });
        s.devices.len() - 1
    }
}

impl WorldState {
    fn new_family(&mut self) -> u64 {
        let f = self.next_family;
        self.next_family += 1;
        f
    }

    /// The clock component of `stream` of `device`; a stream seen for the first time
    /// starts from the device's host clock (what a stream created now would know).
    pub(crate) fn comp(&mut self, device: usize, stream: StreamId) -> usize {
        if let Some(&c) = self.devices[device].streams.get(&stream) {
            return c;
        }
        let c = self.clocks.len();
        self.clocks.push(self.devices[device].host.clone());
        self.devices[device].streams.insert(stream, c);
        c
    }

    /// Records one op of kind `kind` on stream `stream` of `device`: joins the host clock
    /// into the stream, ticks it, and checks and records `accesses`. Returns the stream's
    /// component.
    pub(crate) fn op(
        &mut self,
        device: usize,
        stream: StreamId,
        kind: &str,
        accesses: &[(Range<u64>, AccessKind)],
    ) -> usize {
        let comp = self.comp(device, stream);
        let seq = self.next_op;
        self.next_op += 1;
        let dev = &mut self.devices[device];
        let desc = if dev.label.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind} [{}]", dev.label)
        };
        let clock = &mut self.clocks[comp];
        clock.join(&dev.host);
        let tick = clock.tick(comp);
        let info = Arc::new(OpInfo { seq, desc, stream });
        dev.detector
            .record_op(&info, clock, comp, tick, accesses, &dev.host);
        comp
    }

    /// The host of `device` observed everything `clock` knows.
    pub(crate) fn observe(&mut self, device: usize, clock: &VClock) {
        self.devices[device].host.join(clock);
    }

    /// The joined clocks of every stream of `device` (what `synchronize_device` waits for).
    pub(crate) fn device_clock(&self, device: usize) -> VClock {
        let mut all = VClock::default();
        for &c in self.devices[device].streams.values() {
            all.join(&self.clocks[c]);
        }
        all
    }

    /// Rank `rank` of a `size`-member matching order `key` arrived at its next op on
    /// stream component `comp`. When every member arrived, each member's stream is ordered
    /// after every member's op (a collective orders everything before it on every
    /// participant before everything after it on any participant).
    pub(crate) fn arrive(&mut self, key: MatchKey, size: usize, rank: usize, comp: usize) {
        let clock = self.clocks[comp].clone();
        let m = self.matchers.entry(key).or_insert_with(|| Matcher {
            submitted: vec![0; size],
            slots: HashMap::new(),
        });
        if rank >= m.submitted.len() {
            return;
        }
        let k = m.submitted[rank];
        m.submitted[rank] += 1;
        let slot = m.slots.entry(k).or_insert_with(|| Slot {
            clocks: vec![None; size],
            streams: vec![None; size],
            arrived: 0,
        });
        slot.clocks[rank] = Some(clock);
        slot.streams[rank] = Some(comp);
        slot.arrived += 1;
        if slot.arrived < size {
            return;
        }
        let Some(slot) = m.slots.remove(&k) else {
            return;
        };
        let mut joint = VClock::default();
        for c in slot.clocks.iter().flatten() {
            joint.join(c);
        }
        for s in slot.streams.into_iter().flatten() {
            self.clocks[s].join(&joint);
        }
    }

    /// The family of the sub-group `ranks` created by the `seq`-th `new_group` call of
    /// members of `parent` (the same for every member that makes that call).
    pub(crate) fn subgroup(&mut self, parent: u64, seq: u64, ranks: &[usize]) -> u64 {
        let key = (parent, seq, ranks.to_vec());
        if let Some(&f) = self.subgroups.get(&key) {
            return f;
        }
        let f = self.new_family();
        self.subgroups.insert(key, f);
        f
    }
}
