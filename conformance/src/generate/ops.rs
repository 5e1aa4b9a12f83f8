//! Terse constructors for the ops generators emit.

use crate::schedule::{BatchMember, Op, OpKind, ReduceOp};

pub(crate) fn alloc(t: &str, elems: u64) -> Op {
    Op::all(OpKind::Alloc {
        t: t.to_owned(),
        elems,
        dtype: None,
        stream: None,
    })
}
pub(crate) fn upload(t: &str, seed: u32) -> Op {
    Op::all(OpKind::Upload {
        t: t.to_owned(),
        seed,
    })
}
pub(crate) fn zero(t: &str) -> Op {
    Op::all(OpKind::Zero { t: t.to_owned() })
}
pub(crate) fn free(t: &str) -> Op {
    Op::all(OpKind::Free { t: t.to_owned() })
}
pub(crate) fn check(t: &str) -> Op {
    Op::all(OpKind::Check { t: t.to_owned() })
}
pub(crate) fn wait(work: &str) -> Op {
    Op::all(OpKind::Wait {
        work: work.to_owned(),
    })
}
pub(crate) fn drop_work(work: &str) -> Op {
    Op::all(OpKind::DropWork {
        work: work.to_owned(),
    })
}
pub(crate) fn sync() -> Op {
    Op::all(OpKind::Sync)
}
/// A device-side busy period of `us` microseconds on the current stream.
pub(crate) fn delay(us: u64) -> Op {
    Op::all(OpKind::Delay { us, stream: None })
}
/// Whole-tensor copy.
pub(crate) fn copy(src: &str, dst: &str) -> Op {
    Op::all(OpKind::Copy {
        src: src.to_owned(),
        dst: dst.to_owned(),
        src_offset: None,
        dst_offset: None,
        elems: None,
    })
}
/// Copy of `elems` elements (offsets and length multiples of 16).
pub(crate) fn copy_range(src: &str, src_offset: u64, dst: &str, dst_offset: u64, elems: u64) -> Op {
    Op::all(OpKind::Copy {
        src: src.to_owned(),
        dst: dst.to_owned(),
        src_offset: Some(src_offset),
        dst_offset: Some(dst_offset),
        elems: Some(elems),
    })
}

fn group(g: &str) -> Option<String> {
    (g != crate::schedule::WORLD).then(|| g.to_owned())
}
fn work(w: Option<&str>) -> (bool, Option<String>) {
    (w.is_some(), w.map(str::to_owned))
}

/// `all_reduce`; `w`: asynchronous with that work.
pub(crate) fn all_reduce(t: &str, g: &str, reduce: ReduceOp, w: Option<&str>) -> Op {
    let (is_async, work) = work(w);
    let reduce = (reduce != ReduceOp::Sum).then_some(reduce);
    Op::all(OpKind::AllReduce {
        t: t.to_owned(),
        reduce,
        group: group(g),
        is_async,
        work,
    })
}
pub(crate) fn all_gather(input: &str, out: &str, g: &str, w: Option<&str>) -> Op {
    let (is_async, work) = work(w);
    Op::all(OpKind::AllGather {
        input: input.to_owned(),
        out: out.to_owned(),
        group: group(g),
        is_async,
        work,
    })
}
pub(crate) fn reduce_scatter(input: &str, out: &str, g: &str, w: Option<&str>) -> Op {
    let (is_async, work) = work(w);
    Op::all(OpKind::ReduceScatter {
        input: input.to_owned(),
        out: out.to_owned(),
        reduce: None,
        group: group(g),
        is_async,
        work,
    })
}
pub(crate) fn all_to_all(input: &str, out: &str, g: &str, w: Option<&str>) -> Op {
    let (is_async, work) = work(w);
    Op::all(OpKind::AllToAll {
        input: input.to_owned(),
        out: out.to_owned(),
        group: group(g),
        is_async,
        work,
    })
}
pub(crate) fn send(t: &str, peer: usize, w: Option<&str>, rank: usize) -> Op {
    let (is_async, work) = work(w);
    Op::on(
        OpKind::Send {
            t: t.to_owned(),
            peer,
            is_async,
            work,
        },
        vec![rank],
    )
}
pub(crate) fn recv(t: &str, peer: usize, w: Option<&str>, rank: usize) -> Op {
    let (is_async, work) = work(w);
    Op::on(
        OpKind::Recv {
            t: t.to_owned(),
            peer,
            is_async,
            work,
        },
        vec![rank],
    )
}
pub(crate) fn batch(members: Vec<BatchMember>, w: Option<&str>, rank: usize) -> Op {
    let (is_async, work) = work(w);
    Op::on(
        OpKind::Batch {
            ops: members,
            is_async,
            work,
        },
        vec![rank],
    )
}
/// `op` restricted to `ranks`.
pub(crate) fn on(mut op: Op, ranks: Vec<usize>) -> Op {
    op.ranks = Some(ranks);
    op
}
