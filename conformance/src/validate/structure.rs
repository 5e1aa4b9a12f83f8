//! Checks that need no program order: the schedule's header (world, groups, streams) and
//! each op on its own (names, ranks, peers, alignment, `async`/`work`).

use std::collections::HashSet;

use super::kind::ValidationErrorKind as K;
use super::sink::Sink;
use crate::schedule::{BatchMember, COMPUTE, MAX_WORLD_SIZE, OpKind, Phase, Schedule, WORLD};

pub(super) fn check(s: &Schedule, sink: &mut Sink) {
    check_header(s, sink);
    let streams: HashSet<&str> = s
        .streams
        .iter()
        .map(String::as_str)
        .chain([COMPUTE])
        .collect();
    for phase in Phase::ALL {
        for (i, op) in s.phase_ops(phase).iter().enumerate() {
            let mut err = |rank, kind| sink.push(Some(phase), Some(i), rank, kind);
            if let Some(ranks) = &op.ranks {
                let mut seen = HashSet::new();
                for &r in ranks {
                    if r >= s.world_size || !seen.insert(r) {
                        err(None, K::RankOutsideWorld(r));
                    }
                }
            }
            let executing: Vec<usize> = match &op.ranks {
                Some(r) => r.iter().copied().filter(|&r| r < s.world_size).collect(),
                None => (0..s.world_size.min(MAX_WORLD_SIZE)).collect(),
            };
            check_op(s, &op.kind, &streams, &executing, &mut err);
        }
    }
}

fn check_header(s: &Schedule, sink: &mut Sink) {
    let mut err = |kind| sink.push(None, None, None, kind);
    if s.world_size == 0 {
        err(K::EmptyWorld);
    }
    for (name, lists) in &s.groups {
        if name == WORLD {
            err(K::ReservedGroupName);
            continue;
        }
        if lists.is_empty() || lists.iter().any(Vec::is_empty) {
            err(K::EmptyGroupList {
                group: name.clone(),
            });
        }
        let mut seen = HashSet::new();
        for &rank in lists.iter().flatten() {
            if rank >= s.world_size {
                err(K::GroupRankOutsideWorld {
                    group: name.clone(),
                    rank,
                });
            } else if !seen.insert(rank) {
                err(K::OverlappingGroupLists {
                    group: name.clone(),
                    rank,
                });
            }
        }
    }
    let mut seen = HashSet::new();
    for stream in &s.streams {
        if stream == COMPUTE || !seen.insert(stream) {
            err(K::InvalidStreamName(stream.clone()));
        }
    }
}

fn check_op(
    s: &Schedule,
    op: &OpKind,
    streams: &HashSet<&str>,
    executing: &[usize],
    err: &mut impl FnMut(Option<usize>, K),
) {
    let stream = |name: &Option<String>, err: &mut dyn FnMut(Option<usize>, K)| {
        if let Some(name) = name
            && !streams.contains(name.as_str())
        {
            err(None, K::UndefinedStream(name.clone()));
        }
    };
    if let Some(group) = op.group()
        && group != WORLD
        && !s.groups.contains_key(group)
    {
        err(None, K::UndefinedGroup(group.to_owned()));
    }
    if let Some((is_async, work)) = op.async_work() {
        match (is_async, work) {
            (false, Some(_)) => err(None, K::WorkOnSyncOp),
            (true, None) => err(None, K::AsyncWithoutWork),
            _ => {}
        }
    }
    let peer = |p: usize, err: &mut dyn FnMut(Option<usize>, K)| {
        if p >= s.world_size {
            err(None, K::PeerOutsideWorld(p));
        } else if executing.contains(&p) {
            err(Some(p), K::SendToSelf);
        }
    };
    match op {
        // `elems` and `us` are bounded by the limits stage, before this one runs.
        OpKind::Alloc { stream: st, .. } | OpKind::Delay { stream: st, .. } => stream(st, err),
        OpKind::SetStream { stream: st } | OpKind::RecordStream { stream: st, .. } => {
            stream(&Some(st.clone()), err);
        }
        OpKind::WaitStream { stream: st, on } => {
            stream(&Some(st.clone()), err);
            stream(&Some(on.clone()), err);
        }
        OpKind::Copy {
            src,
            dst,
            src_offset,
            dst_offset,
            elems,
        } => {
            if src == dst {
                err(None, K::CopyToSelf(src.clone()));
            }
            for (field, value) in [
                ("src_offset", src_offset),
                ("dst_offset", dst_offset),
                ("elems", elems),
            ] {
                if let Some(v) = value
                    && v % 16 != 0
                {
                    err(None, K::MisalignedCopy { field, value: *v });
                }
            }
        }
        OpKind::Send { peer: p, .. } | OpKind::Recv { peer: p, .. } => peer(*p, err),
        OpKind::Batch { ops, .. } => {
            if ops.is_empty() {
                err(None, K::EmptyBatch);
            }
            for m in ops {
                peer(m.peer(), err);
            }
            // A recv that lands in a tensor another member reads or writes has no defined
            // result: the members run concurrently.
            for (i, m) in ops.iter().enumerate() {
                if let BatchMember::Recv { t, .. } = m
                    && ops
                        .iter()
                        .enumerate()
                        .any(|(j, o)| j != i && o.tensor() == t)
                {
                    err(None, K::BatchTensorConflict(t.clone()));
                }
            }
        }
        _ => {}
    }
}
