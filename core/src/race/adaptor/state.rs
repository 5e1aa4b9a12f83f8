//! [`RaceWorld`]: the happens-before layer ([`HappensBefore`]) the adaptor drives from API
//! calls, shared by every rank of one world, with what only the adaptor needs: which
//! backend stream is which clock component, and the matching of communication ops.
//!
//! One mutex guards everything, as in the mock: a collective's arrival changes the clocks
//! of streams on other devices, so the state of all ranks must change atomically.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::ids::StreamId;
use crate::race::{AccessKind, HappensBefore, VClock};

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

/// Every clock of the world, and how the adaptor's calls map onto them.
pub(crate) struct WorldState {
    /// Clocks, rules and detectors (one device per wrapped backend).
    pub hb: HappensBefore,
    /// Per device, the clock component of each stream seen, by the backend's stream id.
    comps: Vec<HashMap<StreamId, usize>>,
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
}

impl std::fmt::Debug for RaceWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        let streams: usize = s.comps.iter().map(HashMap::len).sum();
        write!(f, "RaceWorld({} devices, {streams} streams)", s.comps.len())
    }
}

impl RaceWorld {
    /// A world with no devices yet; each device keeps at most `max_reports` reports (later
    /// races are only counted).
    pub fn new(max_reports: usize) -> Arc<RaceWorld> {
        Arc::new(RaceWorld {
            state: Mutex::new(WorldState {
                hb: HappensBefore::new(max_reports, true),
                comps: Vec::new(),
                next_family: 0,
                matchers: HashMap::new(),
                subgroups: HashMap::new(),
            }),
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
        s.comps.push(HashMap::new());
        s.hb.add_device()
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
        if let Some(&c) = self.comps[device].get(&stream) {
            return c;
        }
        let c = self.hb.add_stream(device, stream);
        self.comps[device].insert(stream, c);
        c
    }

    /// Records one op of kind `kind` on stream `stream` of `device` (see
    /// [`HappensBefore::begin_op`]). Returns the stream's component.
    pub(crate) fn op(
        &mut self,
        device: usize,
        stream: StreamId,
        kind: &str,
        accesses: &[(Range<u64>, AccessKind)],
    ) -> usize {
        let comp = self.comp(device, stream);
        self.hb.begin_op(comp, kind, accesses);
        comp
    }

    /// Rank `rank` of a `size`-member matching order `key` arrived at its next op on
    /// stream component `comp`. When every member arrived, each member's stream is ordered
    /// after every member's op (a collective orders everything before it on every
    /// participant before everything after it on any participant).
    pub(crate) fn arrive(&mut self, key: MatchKey, size: usize, rank: usize, comp: usize) {
        let clock = self.hb.stream_clock(comp).clone();
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
        let streams: Vec<usize> = slot.streams.iter().flatten().copied().collect();
        self.hb.meet(&streams, slot.clocks.iter().flatten());
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
