//! Communication plan: every rank's communication ops as events, matched across ranks per
//! (phase, iteration) — collectives by k-th issue on each communicator, send/recv by k-th
//! pair per (sender, receiver). The reference interpreter executes this plan.

use std::collections::{BTreeMap, HashMap};

use super::kind::ValidationErrorKind as K;
use super::sink::Sink;
use memreuse_core::DType;

use crate::schedule::{BatchMember, OpKind, Phase, ReduceOp, Schedule, Topology};

/// Per live tensor name: its elements and element type.
type Sizes = HashMap<String, (u64, DType)>;

/// What the members of a communicator must agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CollDesc {
    pub(crate) op: &'static str,
    pub(crate) sizes: Vec<Option<u64>>,
    /// The element type of the first tensor (the dataflow stage makes the others equal).
    pub(crate) dtype: Option<DType>,
    pub(crate) reduce: Option<ReduceOp>,
    pub(crate) root: Option<usize>,
}

impl std::fmt::Display for CollDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.op)?;
        let sizes: Vec<String> = self
            .sizes
            .iter()
            .map(|s| s.map_or("?".to_owned(), |s| s.to_string()))
            .collect();
        write!(f, "({})", sizes.join(", "))?;
        // f32 is the format's default; another type is named.
        if let Some(d) = self.dtype.filter(|d| *d != DType::F32) {
            write!(f, " dtype={d}")?;
        }
        if let Some(r) = self.reduce {
            write!(f, " reduce={r}")?;
        }
        if let Some(r) = self.root {
            write!(f, " root={r}")?;
        }
        Ok(())
    }
}

/// One send or recv, alone or inside a batch.
#[derive(Debug, Clone)]
pub(crate) struct P2pMember {
    pub(crate) send: bool,
    pub(crate) peer: usize,
    pub(crate) tensor: String,
    pub(crate) elems: Option<u64>,
    pub(crate) dtype: Option<DType>,
    /// The matching member: (rank, event index, member index).
    pub(crate) partner: Option<(usize, usize, usize)>,
}

/// What a communication event is.
#[derive(Debug, Clone)]
pub(crate) enum EventKind {
    /// A collective on communicator `(group, index)`; `instance` once matched.
    Collective {
        group: String,
        index: usize,
        desc: CollDesc,
        instance: Option<usize>,
    },
    /// `send`, `recv` or `batch`.
    P2p(Vec<P2pMember>),
}

/// One communication op as issued by one rank.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    /// Position in the rank's whole program (`Schedule::rank_steps`).
    pub(crate) step: usize,
    pub(crate) phase: Phase,
    pub(crate) iter: u32,
    pub(crate) op_index: usize,
    pub(crate) kind: EventKind,
}

/// One matched collective: its members' (rank, event index) in group-rank order.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    pub(crate) members: Vec<(usize, usize)>,
}

/// Every rank's events and how they match.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommPlan {
    pub(crate) events: Vec<Vec<Event>>,
    pub(crate) instances: Vec<Instance>,
}

fn desc(kind: &OpKind, sizes: &Sizes) -> CollDesc {
    let size = |t: &str| sizes.get(t).map(|s| s.0);
    let dtype = match kind {
        OpKind::AllReduce { t, .. } | OpKind::Broadcast { t, .. } => sizes.get(t),
        OpKind::ReduceScatter { input, .. }
        | OpKind::AllGather { input, .. }
        | OpKind::AllToAll { input, .. } => sizes.get(input),
        _ => None,
    }
    .map(|s| s.1);
    let (sizes, reduce, root) = match kind {
        OpKind::AllReduce { t, reduce, .. } => {
            (vec![size(t)], Some(reduce.unwrap_or_default()), None)
        }
        OpKind::ReduceScatter {
            input, out, reduce, ..
        } => (
            vec![size(input), size(out)],
            Some(reduce.unwrap_or_default()),
            None,
        ),
        OpKind::AllGather { input, out, .. } | OpKind::AllToAll { input, out, .. } => {
            (vec![size(input), size(out)], None, None)
        }
        OpKind::Broadcast { t, root, .. } => (vec![size(t)], None, Some(root.unwrap_or(0))),
        _ => (Vec::new(), None, None),
    };
    CollDesc {
        op: kind.name(),
        sizes,
        dtype,
        reduce,
        root,
    }
}

fn rank_events(s: &Schedule, topo: &Topology, rank: usize) -> Vec<Event> {
    let mut sizes: Sizes = HashMap::new();
    let mut events = Vec::new();
    for (pos, step) in s.rank_steps(rank).enumerate() {
        let member = |m: &BatchMember, sizes: &Sizes| P2pMember {
            send: m.is_send(),
            peer: m.peer(),
            tensor: m.tensor().to_owned(),
            elems: sizes.get(m.tensor()).map(|s| s.0),
            dtype: sizes.get(m.tensor()).map(|s| s.1),
            partner: None,
        };
        let kind = match &step.op.kind {
            OpKind::Alloc {
                t, elems, dtype, ..
            } => {
                sizes.insert(t.clone(), (*elems, crate::schedule::elem_type(*dtype)));
                continue;
            }
            OpKind::Free { t } => {
                sizes.remove(t);
                continue;
            }
            OpKind::Send { t, peer, .. } => EventKind::P2p(vec![member(
                &BatchMember::Send {
                    t: t.clone(),
                    peer: *peer,
                },
                &sizes,
            )]),
            OpKind::Recv { t, peer, .. } => EventKind::P2p(vec![member(
                &BatchMember::Recv {
                    t: t.clone(),
                    peer: *peer,
                },
                &sizes,
            )]),
            OpKind::Batch { ops, .. } => {
                EventKind::P2p(ops.iter().map(|m| member(m, &sizes)).collect())
            }
            kind => {
                let Some(group) = kind.group() else { continue };
                // Not being in the group is reported by the dataflow stage.
                let Some(loc) = topo.locate(group, rank) else {
                    continue;
                };
                EventKind::Collective {
                    group: group.to_owned(),
                    index: loc.index,
                    desc: desc(kind, &sizes),
                    instance: None,
                }
            }
        };
        events.push(Event {
            step: pos,
            phase: step.phase,
            iter: step.iter,
            op_index: step.op_index,
            kind,
        });
    }
    events
}

type Segment = (Phase, u32);

impl CommPlan {
    /// Builds and matches the plan, reporting unmatched and mismatched communication.
    pub(crate) fn build(s: &Schedule, sink: &mut Sink) -> Self {
        let topo = Topology::new(s);
        let mut plan = CommPlan {
            events: (0..s.world_size)
                .map(|r| rank_events(s, &topo, r))
                .collect(),
            instances: Vec::new(),
        };
        plan.match_collectives(&topo, sink);
        plan.match_p2p(sink);
        plan
    }

    fn report(&self, sink: &mut Sink, rank: usize, event: usize, kind: K) {
        let e = &self.events[rank][event];
        sink.push(Some(e.phase), Some(e.op_index), Some(rank), kind);
    }

    fn match_collectives(&mut self, topo: &Topology, sink: &mut Sink) {
        // (segment, group, index) -> global rank -> that rank's event indices in order.
        type Issued = BTreeMap<usize, Vec<usize>>;
        let mut by_comm: BTreeMap<(Segment, String, usize), Issued> = BTreeMap::new();
        for (rank, events) in self.events.iter().enumerate() {
            for (ei, e) in events.iter().enumerate() {
                if let EventKind::Collective { group, index, .. } = &e.kind {
                    by_comm
                        .entry(((e.phase, e.iter), group.clone(), *index))
                        .or_default()
                        .entry(rank)
                        .or_default()
                        .push(ei);
                }
            }
        }
        for ((_, group, index), issued) in by_comm {
            let Some(&first_rank) = issued.keys().next() else {
                continue;
            };
            let members: Vec<usize> = topo
                .locate(&group, first_rank)
                .map(|l| l.members.to_vec())
                .unwrap_or_default();
            let communicator = format!("{group}[{index}]");
            let longest = issued.values().map(Vec::len).max().unwrap_or(0);
            for k in 0..longest {
                let at: Vec<Option<usize>> = members
                    .iter()
                    .map(|m| issued.get(m).and_then(|v| v.get(k)).copied())
                    .collect();
                if at.iter().any(Option::is_none) {
                    for (m, e) in members.iter().zip(&at) {
                        if let Some(e) = e {
                            self.report(
                                sink,
                                *m,
                                *e,
                                K::UnmatchedCollective {
                                    communicator: communicator.clone(),
                                    index: k,
                                },
                            );
                        }
                    }
                    continue;
                }
                let pairs: Vec<(usize, usize)> = members
                    .iter()
                    .copied()
                    .zip(at.into_iter().flatten())
                    .collect();
                let descs: Vec<CollDesc> = pairs
                    .iter()
                    .filter_map(|&(r, e)| match &self.events[r][e].kind {
                        EventKind::Collective { desc, .. } => Some(desc.clone()),
                        EventKind::P2p(_) => None,
                    })
                    .collect();
                let mut consistent = true;
                for (&(r, e), d) in pairs.iter().zip(&descs).skip(1) {
                    if *d != descs[0] {
                        consistent = false;
                        let detail = format!("{d} here, {} at group rank 0", descs[0]);
                        self.report(
                            sink,
                            r,
                            e,
                            K::CollectiveMismatch {
                                communicator: communicator.clone(),
                                index: k,
                                detail,
                            },
                        );
                    }
                }
                if consistent {
                    let id = self.instances.len();
                    for &(r, e) in &pairs {
                        if let EventKind::Collective { instance, .. } = &mut self.events[r][e].kind
                        {
                            *instance = Some(id);
                        }
                    }
                    self.instances.push(Instance { members: pairs });
                }
            }
        }
    }

    fn match_p2p(&mut self, sink: &mut Sink) {
        // (segment, sender, receiver) -> (sends, recvs) as (rank, event, member).
        type Side = Vec<(usize, usize, usize)>;
        let mut pairs: BTreeMap<(Segment, usize, usize), (Side, Side)> = BTreeMap::new();
        for (rank, events) in self.events.iter().enumerate() {
            for (ei, e) in events.iter().enumerate() {
                let EventKind::P2p(members) = &e.kind else {
                    continue;
                };
                for (mi, m) in members.iter().enumerate() {
                    let seg = (e.phase, e.iter);
                    if m.send {
                        pairs
                            .entry((seg, rank, m.peer))
                            .or_default()
                            .0
                            .push((rank, ei, mi));
                    } else {
                        pairs
                            .entry((seg, m.peer, rank))
                            .or_default()
                            .1
                            .push((rank, ei, mi));
                    }
                }
            }
        }
        for (sends, recvs) in pairs.into_values() {
            for k in 0..sends.len().max(recvs.len()) {
                match (sends.get(k), recvs.get(k)) {
                    (Some(&s), Some(&r)) => self.link(s, r, sink),
                    (Some(&(rank, e, m)), None) | (None, Some(&(rank, e, m))) => {
                        let (dir, peer) = self.member(rank, e, m).map_or(("send", 0), |x| {
                            (if x.send { "send" } else { "recv" }, x.peer)
                        });
                        self.report(sink, rank, e, K::UnmatchedP2p { dir, peer });
                    }
                    (None, None) => {}
                }
            }
        }
    }

    fn member(&self, rank: usize, event: usize, member: usize) -> Option<&P2pMember> {
        match &self.events.get(rank)?.get(event)?.kind {
            EventKind::P2p(m) => m.get(member),
            EventKind::Collective { .. } => None,
        }
    }

    fn link(&mut self, s: (usize, usize, usize), r: (usize, usize, usize), sink: &mut Sink) {
        let (Some(se), Some(re)) = (
            self.member(s.0, s.1, s.2).and_then(|m| m.elems),
            self.member(r.0, r.1, r.2).and_then(|m| m.elems),
        ) else {
            return;
        };
        if se != re {
            self.report(
                sink,
                s.0,
                s.1,
                K::P2pSizeMismatch {
                    peer: r.0,
                    elems: se,
                    peer_elems: re,
                },
            );
            self.report(
                sink,
                r.0,
                r.1,
                K::P2pSizeMismatch {
                    peer: s.0,
                    elems: re,
                    peer_elems: se,
                },
            );
            return;
        }
        let types = (
            self.member(s.0, s.1, s.2).and_then(|m| m.dtype),
            self.member(r.0, r.1, r.2).and_then(|m| m.dtype),
        );
        if let (Some(st), Some(rt)) = types
            && st != rt
        {
            for (me, other, here, there) in [(s, r, st, rt), (r, s, rt, st)] {
                self.report(
                    sink,
                    me.0,
                    me.1,
                    K::P2pTypeMismatch {
                        peer: other.0,
                        dtype: here,
                        peer_dtype: there,
                    },
                );
            }
            return;
        }
        for (me, other) in [(s, r), (r, s)] {
            if let EventKind::P2p(members) = &mut self.events[me.0][me.1].kind
                && let Some(m) = members.get_mut(me.2)
            {
                m.partner = Some(other);
            }
        }
    }
}
