//! The execution loop shared by the deadlock check and the reference results: every rank
//! runs its ops in program order and blocks at each communication op until all its
//! participants have reached it (the strictest execution of docs/schedules.md). Data moves at
//! the moment both sides of a send/recv have arrived, so a recv sees the sender's tensor as
//! it was at the send; a collective takes effect once all members have arrived.

use std::collections::{HashMap, HashSet};

use super::CheckResult;
use super::collective::{self, Memory, Tensor};
use super::typed;
use crate::schedule::{OpKind, Phase, Schedule, Step};
use crate::validate::kind::ValidationErrorKind as K;
use crate::validate::plan::{CommPlan, Event, EventKind};
use crate::validate::sink::Sink;

pub(super) struct Engine<'a> {
    plan: &'a CommPlan,
    programs: Vec<Vec<Step<'a>>>,
    cursor: Vec<usize>,
    next_event: Vec<usize>,
    arrived: Vec<bool>,
    /// Collective instances already executed.
    executed: HashSet<usize>,
    /// Ops already reported beyond the exactness bound: one error per op, not per iteration.
    overflowed: HashSet<(Phase, usize)>,
    memory: Memory,
    checks: Vec<Vec<CheckResult>>,
}

impl<'a> Engine<'a> {
    pub(super) fn new(s: &'a Schedule, plan: &'a CommPlan) -> Self {
        let n = s.world_size;
        Self {
            plan,
            programs: (0..n).map(|r| s.rank_steps(r).collect()).collect(),
            cursor: vec![0; n],
            next_event: vec![0; n],
            arrived: vec![false; n],
            executed: HashSet::new(),
            overflowed: HashSet::new(),
            memory: vec![HashMap::new(); n],
            checks: vec![Vec::new(); n],
        }
    }

    fn current_event(&self, rank: usize) -> Option<&'a Event> {
        let e = self.plan.events.get(rank)?.get(self.next_event[rank])?;
        (e.step == self.cursor[rank]).then_some(e)
    }

    /// Whether `rank` has reached (arrived at, or passed) its event `event`.
    fn reached(&self, rank: usize, event: usize) -> bool {
        self.next_event[rank] > event || (self.next_event[rank] == event && self.arrived[rank])
    }

    /// Runs to completion; `None` (with a deadlock error per blocked rank) if stuck.
    pub(super) fn run(mut self, sink: &mut Sink) -> Option<Vec<Vec<CheckResult>>> {
        let n = self.programs.len();
        loop {
            let mut progressed = false;
            for r in 0..n {
                while self.cursor[r] < self.programs[r].len() {
                    if self.current_event(r).is_some() {
                        if !self.arrived[r] {
                            self.arrived[r] = true;
                            self.on_arrive(r);
                            progressed = true;
                        }
                        break;
                    }
                    let step = self.programs[r][self.cursor[r]];
                    self.local(r, &step);
                    self.cursor[r] += 1;
                    progressed = true;
                }
            }
            for r in 0..n {
                if self.arrived[r] && self.try_complete(r, sink) {
                    self.arrived[r] = false;
                    self.cursor[r] += 1;
                    self.next_event[r] += 1;
                    progressed = true;
                }
            }
            if !progressed {
                break;
            }
        }
        let mut stuck = false;
        for r in 0..n {
            if let Some(step) = self.programs[r].get(self.cursor[r]) {
                stuck = true;
                sink.push(
                    Some(step.phase),
                    Some(step.op_index),
                    Some(r),
                    K::Deadlock {
                        op: step.op.kind.name(),
                        iter: step.iter,
                    },
                );
            }
        }
        (!stuck).then_some(self.checks)
    }

    /// Moves data for every send/recv pair whose other side is already waiting.
    fn on_arrive(&mut self, rank: usize) {
        let Some(Event {
            kind: EventKind::P2p(members),
            ..
        }) = self.current_event(rank)
        else {
            return;
        };
        for m in members {
            let Some((q, f, qm)) = m.partner else {
                continue;
            };
            if self.next_event[q] != f || !self.arrived[q] {
                continue;
            }
            let Some(Event {
                kind: EventKind::P2p(theirs),
                ..
            }) = self.plan.events[q].get(f)
            else {
                continue;
            };
            let Some(other) = theirs.get(qm) else {
                continue;
            };
            let ((src_rank, src), (dst_rank, dst)) = if m.send {
                ((rank, &m.tensor), (q, &other.tensor))
            } else {
                ((q, &other.tensor), (rank, &m.tensor))
            };
            if let Some(data) = self.memory[src_rank].get(src).cloned() {
                self.memory[dst_rank].insert(dst.clone(), data);
            }
        }
    }

    fn try_complete(&mut self, rank: usize, sink: &mut Sink) -> bool {
        let Some(event) = self.current_event(rank) else {
            return false;
        };
        match &event.kind {
            EventKind::P2p(members) => members
                .iter()
                .all(|m| m.partner.is_some_and(|(q, f, _)| self.reached(q, f))),
            EventKind::Collective { instance, .. } => {
                let Some(inst) = instance.and_then(|i| self.plan.instances.get(i).map(|x| (i, x)))
                else {
                    return false;
                };
                if !inst.1.members.iter().all(|&(q, f)| self.reached(q, f)) {
                    return false;
                }
                if self.executed.insert(inst.0) {
                    let ops: Vec<(usize, &OpKind)> = inst
                        .1
                        .members
                        .iter()
                        .filter_map(|&(q, f)| {
                            let step = self.plan.events[q].get(f)?.step;
                            Some((q, &self.programs[q].get(step)?.op.kind))
                        })
                        .collect();
                    if let Some(bad) = collective::execute(&ops, &mut self.memory) {
                        let (q, f) = inst.1.members[bad.member];
                        let e = &self.plan.events[q][f];
                        if self.overflowed.insert((e.phase, e.op_index)) {
                            sink.push(
                                Some(e.phase),
                                Some(e.op_index),
                                Some(q),
                                super::excess_kind(bad.tensor, bad.dtype, bad.reached, e.iter),
                            );
                        }
                    }
                }
                true
            }
        }
    }

    fn local(&mut self, rank: usize, step: &Step<'_>) {
        let mem = &mut self.memory[rank];
        match &step.op.kind {
            OpKind::Alloc {
                t, elems, dtype, ..
            } => {
                // Contents are undefined; the validator guarantees they are never read.
                let dtype = crate::schedule::elem_type(*dtype);
                let n = usize::try_from(*elems).unwrap_or(0);
                let bytes = vec![0; n.saturating_mul(typed::size(dtype))];
                mem.insert(t.clone(), Tensor { dtype, bytes });
            }
            OpKind::Upload { t, seed } => {
                if let Some(x) = mem.get_mut(t) {
                    x.bytes = super::upload_bytes(x.dtype, *seed, rank, step.iter, x.bytes.len());
                }
            }
            OpKind::Zero { t } => {
                // +0 is all-zero bytes in every type.
                if let Some(x) = mem.get_mut(t) {
                    x.bytes.fill(0);
                }
            }
            OpKind::Copy {
                src,
                dst,
                src_offset,
                dst_offset,
                elems,
            } => {
                let Some(data) = mem.get(src) else { return };
                // Equal types on both sides (validated): offsets scale by one size.
                let sz = typed::size(data.dtype);
                let so = src_offset.unwrap_or(0) as usize * sz;
                let n = elems.map_or(data.bytes.len(), |e| e as usize * sz);
                let Some(chunk) = data.bytes.get(so..so.saturating_add(n)).map(<[u8]>::to_vec)
                else {
                    return;
                };
                let d = dst_offset.unwrap_or(0) as usize * sz;
                if let Some(target) = mem
                    .get_mut(dst)
                    .and_then(|x| x.bytes.get_mut(d..d.saturating_add(n)))
                {
                    target.copy_from_slice(&chunk);
                }
            }
            OpKind::Check { t } => {
                let (dtype, bytes) = mem
                    .get(t)
                    .map_or((crate::schedule::elem_type(None), Vec::new()), |x| {
                        (x.dtype, x.bytes.clone())
                    });
                self.checks[rank].push(CheckResult {
                    phase: step.phase,
                    iter: step.iter,
                    op_index: step.op_index,
                    tensor: t.clone(),
                    dtype,
                    bytes,
                });
            }
            OpKind::Free { t } => {
                mem.remove(t);
            }
            _ => {}
        }
    }
}
