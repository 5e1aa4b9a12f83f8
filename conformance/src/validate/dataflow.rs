//! Per-rank program-order checks: tensor liveness, element initialisation, works, sizes of
//! local and collective ops, and the static race rules of docs/schedules.md "Races by
//! construction".
//!
//! Race model (conservative where the format is silent, so that what passes is safe on any
//! backend): an async communication op's accesses stay pending until its own `wait` or a
//! `sync` (a `drop_work` does not end them: nothing waited); a later communication op on the
//! same communicator may touch them (stream order on the comm stream covers it). For the
//! `record_stream` rule, a `check` on stream S counts as a host wait for earlier uses on S
//! only, and `sync` for every stream.

use std::collections::{BTreeSet, HashMap, HashSet};

use memreuse_core::DType;

use super::kind::ValidationErrorKind as K;
use super::sink::Sink;
use crate::schedule::{BatchMember, COMPUTE, OpKind, Phase, Schedule, Step, Topology};

/// Sorted, disjoint, non-adjacent half-open element ranges that have been written.
#[derive(Debug, Clone, Default)]
struct Intervals(Vec<(u64, u64)>);

impl Intervals {
    fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        let mut out = Vec::with_capacity(self.0.len() + 1);
        for &(a, b) in &self.0 {
            if b < s || a > e {
                out.push((a, b));
            } else {
                s = s.min(a);
                e = e.max(b);
            }
        }
        out.push((s, e));
        out.sort_unstable();
        self.0 = out;
    }

    /// The first element of `start..end` not covered, if any.
    fn first_missing(&self, start: u64, end: u64) -> Option<u64> {
        let mut at = start;
        for &(a, b) in &self.0 {
            if at >= end {
                return None;
            }
            if a > at {
                return Some(at);
            }
            at = at.max(b);
        }
        (at < end).then_some(at)
    }
}

/// Identifies the communicator whose stream order protects pending accesses.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CommKey {
    Group(String, usize),
    Pair(usize, usize),
}

struct Tensor {
    elems: u64,
    dtype: DType,
    alloc_stream: String,
    init: Intervals,
    /// Foreign streams with uses not yet covered by `record_stream` or a host wait.
    dirty: BTreeSet<String>,
    recorded: HashSet<String>,
}

struct Pending {
    tensor: String,
    write: bool,
    key: CommKey,
    work: String,
}

/// One tensor access of a communication op.
struct Access {
    tensor: String,
    write: bool,
    key: CommKey,
}

struct Walk<'a> {
    rank: usize,
    topo: &'a Topology,
    tensors: HashMap<String, Tensor>,
    ever_allocated: HashSet<String>,
    /// work name -> pending?
    works: HashMap<String, bool>,
    pending: Vec<Pending>,
    current: String,
    at: (Phase, usize),
}

pub(super) fn check(s: &Schedule, sink: &mut Sink) {
    let topo = Topology::new(s);
    for rank in 0..s.world_size {
        let mut walk = Walk {
            rank,
            topo: &topo,
            tensors: HashMap::new(),
            ever_allocated: HashSet::new(),
            works: HashMap::new(),
            pending: Vec::new(),
            current: COMPUTE.to_owned(),
            at: (Phase::Setup, 0),
        };
        for (phase, iter) in s.segments() {
            COMPUTE.clone_into(&mut walk.current);
            for step in s.segment_steps(rank, phase, iter) {
                if sink.is_full() {
                    return;
                }
                walk.at = (step.phase, step.op_index);
                walk.step(&step, sink);
            }
        }
        let mut names: Vec<&String> = walk.tensors.keys().collect();
        names.sort();
        for name in names {
            sink.push(None, None, Some(rank), K::LiveAtEnd(name.clone()));
        }
        let mut works: Vec<&String> = walk
            .works
            .iter()
            .filter(|(_, p)| **p)
            .map(|(w, _)| w)
            .collect();
        works.sort();
        for w in works {
            sink.push(None, None, Some(rank), K::WorkNeverWaited(w.clone()));
        }
    }
}

impl Walk<'_> {
    fn err(&self, sink: &mut Sink, kind: K) {
        sink.push(Some(self.at.0), Some(self.at.1), Some(self.rank), kind);
    }

    /// The live tensor `name`, or an error saying why there is none.
    fn live(&self, name: &str, sink: &mut Sink) -> Option<u64> {
        if let Some(t) = self.tensors.get(name) {
            return Some(t.elems);
        }
        let kind = if self.ever_allocated.contains(name) {
            K::UseAfterFree(name.to_owned())
        } else {
            K::UndefinedTensor(name.to_owned())
        };
        self.err(sink, kind);
        None
    }

    /// The element type of live tensor `name` (f32 for a name that is not live: its
    /// error is reported by [`Walk::live`]).
    fn dtype(&self, name: &str) -> DType {
        self.tensors.get(name).map_or(DType::F32, |t| t.dtype)
    }

    /// Reports tensors `a` and `b` of op `op` with different element types; `false` then.
    fn same_type(&self, op: &'static str, a: &str, b: &str, sink: &mut Sink) -> bool {
        let (ta, tb) = (self.dtype(a), self.dtype(b));
        if ta != tb {
            self.err(
                sink,
                K::TypeMismatch {
                    op,
                    detail: format!("{a:?} is {ta}, {b:?} is {tb}"),
                },
            );
        }
        ta == tb
    }

    /// Reports a reduction of `t`, whose type cannot be reduced (fp8); `false` then.
    fn reducible(&self, op: &'static str, t: &str, sink: &mut Sink) -> bool {
        let dtype = self.dtype(t);
        if dtype.is_fp8() {
            self.err(
                sink,
                K::NoReduction {
                    op,
                    tensor: t.to_owned(),
                    dtype,
                },
            );
        }
        !dtype.is_fp8()
    }

    /// Checks that `start..end` of `name` was written.
    fn require_init(&self, name: &str, start: u64, end: u64, sink: &mut Sink) {
        if let Some(elem) = self
            .tensors
            .get(name)
            .and_then(|t| t.init.first_missing(start, end))
        {
            self.err(
                sink,
                K::UninitializedRead {
                    tensor: name.to_owned(),
                    elem,
                },
            );
        }
    }

    fn define(&mut self, name: &str, start: u64, end: u64) {
        if let Some(t) = self.tensors.get_mut(name) {
            t.init.insert(start, end);
        }
    }

    /// Race check of an access against pending communication; `key` is `Some` for an
    /// access by a communication op.
    fn check_pending(&self, name: &str, write: bool, key: Option<&CommKey>, sink: &mut Sink) {
        let clash = self
            .pending
            .iter()
            .find(|p| p.tensor == name && (p.write || write) && key != Some(&p.key));
        if let Some(p) = clash {
            let access = if write { "writes" } else { "reads" };
            self.err(
                sink,
                K::AccessBeforeWait {
                    access,
                    tensor: name.to_owned(),
                    work: p.work.clone(),
                },
            );
        }
    }

    /// A use by a non-communication op on the current stream.
    fn local_use(&mut self, name: &str, write: bool, sink: &mut Sink) {
        self.check_pending(name, write, None, sink);
        if let Some(t) = self.tensors.get_mut(name)
            && t.alloc_stream != self.current
            && !t.recorded.contains(&self.current)
        {
            t.dirty.insert(self.current.clone());
        }
    }

    fn step(&mut self, step: &Step<'_>, sink: &mut Sink) {
        match &step.op.kind {
            OpKind::Alloc {
                t,
                elems,
                dtype,
                stream,
            } => {
                if self.tensors.contains_key(t) {
                    self.err(sink, K::ReallocatedWhileLive(t.clone()));
                    return;
                }
                let alloc_stream = stream.clone().unwrap_or_else(|| self.current.clone());
                self.ever_allocated.insert(t.clone());
                // Accesses pending on a previous tensor of this name ended with its free.
                self.tensors.insert(
                    t.clone(),
                    Tensor {
                        elems: *elems,
                        dtype: crate::schedule::elem_type(*dtype),
                        alloc_stream,
                        init: Intervals::default(),
                        dirty: BTreeSet::new(),
                        recorded: HashSet::new(),
                    },
                );
            }
            OpKind::Upload { t, .. } | OpKind::Zero { t } => {
                if let Some(n) = self.live(t, sink) {
                    self.local_use(t, true, sink);
                    self.define(t, 0, n);
                }
            }
            OpKind::Copy {
                src,
                dst,
                src_offset,
                dst_offset,
                elems,
            } => self.copy(src, dst, *src_offset, *dst_offset, *elems, sink),
            OpKind::Check { t } => {
                if let Some(n) = self.live(t, sink) {
                    self.require_init(t, 0, n, sink);
                    self.local_use(t, false, sink);
                    let current = self.current.clone();
                    if let Some(t) = self.tensors.get_mut(t) {
                        t.dirty.remove(&current);
                    }
                }
            }
            OpKind::Free { t } => {
                if self.live(t, sink).is_some()
                    && let Some(tensor) = self.tensors.remove(t)
                {
                    if let Some(stream) = tensor.dirty.first() {
                        self.err(
                            sink,
                            K::MissingRecordStream {
                                tensor: t.clone(),
                                stream: stream.clone(),
                            },
                        );
                    }
                    self.pending.retain(|p| &p.tensor != t);
                }
            }
            OpKind::RecordStream { t, stream } => {
                if self.live(t, sink).is_some()
                    && let Some(tensor) = self.tensors.get_mut(t)
                {
                    tensor.dirty.remove(stream);
                    tensor.recorded.insert(stream.clone());
                }
            }
            OpKind::SetStream { stream } => self.current.clone_from(stream),
            OpKind::Sync => {
                self.pending.clear();
                for t in self.tensors.values_mut() {
                    t.dirty.clear();
                }
            }
            OpKind::Wait { work } | OpKind::DropWork { work } => {
                match self.works.get_mut(work) {
                    Some(pending @ true) => *pending = false,
                    Some(false) => self.err(sink, K::WorkNotPending(work.clone())),
                    None => self.err(sink, K::UndefinedWork(work.clone())),
                }
                if matches!(step.op.kind, OpKind::Wait { .. }) {
                    self.pending.retain(|p| &p.work != work);
                } else {
                    for p in self.pending.iter_mut().filter(|p| &p.work == work) {
                        p.work = format!("{work} (dropped)");
                    }
                }
            }
            OpKind::WaitStream { .. } | OpKind::EmptyCache | OpKind::Delay { .. } => {}
            kind => self.comm(kind, sink),
        }
    }

    fn copy(
        &mut self,
        src: &str,
        dst: &str,
        src_offset: Option<u64>,
        dst_offset: Option<u64>,
        elems: Option<u64>,
        sink: &mut Sink,
    ) {
        let (Some(src_len), Some(dst_len)) = (self.live(src, sink), self.live(dst, sink)) else {
            return;
        };
        if !self.same_type("copy", src, dst, sink) {
            return;
        }
        let (so, dof) = (src_offset.unwrap_or(0), dst_offset.unwrap_or(0));
        let mismatch = |detail: String| K::SizeMismatch { op: "copy", detail };
        let n = if let Some(n) = elems {
            if so.checked_add(n).is_none_or(|e| e > src_len)
                || dof.checked_add(n).is_none_or(|e| e > dst_len)
            {
                self.err(
                    sink,
                    mismatch(format!(
                        "{n} elements from {so} of {src_len} to {dof} of {dst_len}"
                    )),
                );
                return;
            }
            n
        } else if so != 0 || dof != 0 {
            self.err(sink, mismatch("offsets need elems".to_owned()));
            return;
        } else if src_len != dst_len {
            self.err(
                sink,
                mismatch(format!("whole copy of {src_len} elements into {dst_len}")),
            );
            return;
        } else {
            src_len
        };
        self.require_init(src, so, so + n, sink);
        self.local_use(src, false, sink);
        self.local_use(dst, true, sink);
        self.define(dst, dof, dof + n);
    }

    /// Collects a communication op's accesses after checking names, membership and sizes.
    fn comm_accesses(&self, kind: &OpKind, sink: &mut Sink) -> Option<Vec<Access>> {
        let me = self.rank;
        if let OpKind::Send { t, peer, .. } | OpKind::Recv { t, peer, .. } = kind {
            let member = if matches!(kind, OpKind::Send { .. }) {
                BatchMember::Send {
                    t: t.clone(),
                    peer: *peer,
                }
            } else {
                BatchMember::Recv {
                    t: t.clone(),
                    peer: *peer,
                }
            };
            return self.p2p_access(&member, sink).map(|a| vec![a]);
        }
        if let OpKind::Batch { ops, .. } = kind {
            return ops.iter().map(|m| self.p2p_access(m, sink)).collect();
        }
        let group = kind.group()?;
        let Some(loc) = self.topo.locate(group, me) else {
            self.err(sink, K::NotInGroup(group.to_owned()));
            return None;
        };
        let key = CommKey::Group(group.to_owned(), loc.index);
        let gs = loc.members.len() as u64;
        let access = |tensor: &str, write| Access {
            tensor: tensor.to_owned(),
            write,
            key: key.clone(),
        };
        let accesses = match kind {
            OpKind::AllReduce { t, .. } => {
                self.live(t, sink)?;
                if !self.reducible("all_reduce", t, sink) {
                    return None;
                }
                vec![access(t, false), access(t, true)]
            }
            OpKind::Broadcast { t, root, .. } => {
                self.live(t, sink)?;
                let root = root.unwrap_or(0);
                if root >= loc.members.len() {
                    self.err(
                        sink,
                        K::RootOutsideGroup {
                            root,
                            size: loc.members.len(),
                        },
                    );
                    return None;
                }
                vec![access(t, root != loc.group_rank)]
            }
            OpKind::AllGather { input, out, .. }
            | OpKind::ReduceScatter { input, out, .. }
            | OpKind::AllToAll { input, out, .. } => {
                let (i, o) = (self.live(input, sink), self.live(out, sink));
                let (i, o) = (i?, o?);
                let name = kind.name();
                if !self.same_type(name, input, out, sink)
                    || (matches!(kind, OpKind::ReduceScatter { .. })
                        && !self.reducible(name, input, sink))
                {
                    return None;
                }
                let (op, ok, detail) = match kind {
                    OpKind::AllGather { .. } => (
                        "all_gather",
                        i.checked_mul(gs) == Some(o),
                        format!("out has {o} elements, in {i} x group size {gs}"),
                    ),
                    OpKind::ReduceScatter { .. } => (
                        "reduce_scatter",
                        o.checked_mul(gs) == Some(i),
                        format!("in has {i} elements, out {o} x group size {gs}"),
                    ),
                    _ => (
                        "all_to_all",
                        i == o && i % gs == 0,
                        format!(
                            "in {i} and out {o} elements must be equal and divisible by group size {gs}"
                        ),
                    ),
                };
                if !ok {
                    self.err(sink, K::SizeMismatch { op, detail });
                    return None;
                }
                vec![access(input, false), access(out, true)]
            }
            _ => Vec::new(),
        };
        Some(accesses)
    }

    fn p2p_access(&self, m: &BatchMember, sink: &mut Sink) -> Option<Access> {
        self.live(m.tensor(), sink)?;
        let (a, b) = (self.rank.min(m.peer()), self.rank.max(m.peer()));
        Some(Access {
            tensor: m.tensor().to_owned(),
            write: !m.is_send(),
            key: CommKey::Pair(a, b),
        })
    }

    fn comm(&mut self, kind: &OpKind, sink: &mut Sink) {
        let Some(accesses) = self.comm_accesses(kind, sink) else {
            return;
        };
        for a in &accesses {
            let n = self.tensors.get(&a.tensor).map_or(0, |t| t.elems);
            if !a.write {
                self.require_init(&a.tensor, 0, n, sink);
            }
            self.check_pending(&a.tensor, a.write, Some(&a.key), sink);
        }
        for a in accesses.iter().filter(|a| a.write) {
            let n = self.tensors.get(&a.tensor).map_or(0, |t| t.elems);
            self.define(&a.tensor, 0, n);
        }
        if let Some((true, Some(work))) = kind.async_work() {
            if self.works.get(work) == Some(&true) {
                self.err(sink, K::WorkReused(work.to_owned()));
            }
            self.works.insert(work.to_owned(), true);
            self.pending.extend(accesses.into_iter().map(|a| Pending {
                tensor: a.tensor,
                write: a.write,
                key: a.key,
                work: work.to_owned(),
            }));
        }
    }
}
