//! Modes 1 and 3: `record_stream`, then erase this work's use at `wait()`.

use super::{PolicyContext, ReusePolicy, WorkTensors};
use crate::allocator::Storage;
use crate::backend::Backend;
use crate::process_group::work::{CommKind, Tracked, WorkState};

/// Records a work-owned use of the comm stream on every tensor and remembers a weak handle
/// (and the generation-checked block id) of each.
fn record_and_track<B: Backend>(
    cx: &PolicyContext<'_, B>,
    work: &WorkState<B>,
    tensors: &WorkTensors<'_, B>,
) {
    let mut tracked = work.tracked.lock();
    for t in tensors.distinct() {
        cx.allocator
            .record_stream_for_work(t, cx.comm_stream, work.id);
        tracked.push(Tracked {
            weak: t.downgrade(),
            block: t.block_ref(),
        });
    }
}

/// Mode 1 (ERASE_RECORD_STREAM): at `wait()`, for each tracked tensor still alive, erase
/// this work's use of the comm stream (honoured only when the block's allocation stream is
/// the current stream). A tensor already dropped keeps its pending-free event and returns
/// when that event completes.
pub(crate) struct EraseAtWait;

impl<B: Backend> ReusePolicy<B> for EraseAtWait {
    fn name(&self) -> &'static str {
        "1"
    }

    fn on_collective_start(
        &self,
        cx: &PolicyContext<'_, B>,
        work: &WorkState<B>,
        tensors: &WorkTensors<'_, B>,
        _kind: CommKind,
    ) {
        record_and_track(cx, work, tensors);
    }

    fn on_wait(
        &self,
        cx: &PolicyContext<'_, B>,
        work: &WorkState<B>,
        current: &B::Stream,
    ) -> Vec<Storage<B>> {
        erase_tracked(cx, work, current, false)
    }
}

/// Mode 3 (ERASE_RECORD_STREAM_WITH_OPTIMIZE): mode 1 for inputs and outputs, and for a
/// tensor already dropped, erase by generation-checked block id, so its block returns at
/// `wait()` instead of when the pending-free event is next processed. A stale id (block
/// merged, split or handed out again since) is a no-op.
pub(crate) struct EraseAtWaitByBlock;

impl<B: Backend> ReusePolicy<B> for EraseAtWaitByBlock {
    fn name(&self) -> &'static str {
        "3"
    }

    fn on_collective_start(
        &self,
        cx: &PolicyContext<'_, B>,
        work: &WorkState<B>,
        tensors: &WorkTensors<'_, B>,
        _kind: CommKind,
    ) {
        record_and_track(cx, work, tensors);
    }

    fn on_wait(
        &self,
        cx: &PolicyContext<'_, B>,
        work: &WorkState<B>,
        current: &B::Stream,
    ) -> Vec<Storage<B>> {
        erase_tracked(cx, work, current, true)
    }
}

/// The release step of modes 1 and 3: erase this work's use of the comm stream on every
/// tracked tensor still alive; with `by_block` (mode 3), also on the blocks of tensors
/// already dropped, through their generation-checked ids. Returns the upgraded handles
/// (dropping them only drops these extra references; the user still holds the tensors).
fn erase_tracked<B: Backend>(
    cx: &PolicyContext<'_, B>,
    work: &WorkState<B>,
    current: &B::Stream,
    by_block: bool,
) -> Vec<Storage<B>> {
    let tracked = std::mem::take(&mut *work.tracked.lock());
    let mut alive = Vec::with_capacity(tracked.len());
    for t in tracked {
        if let Some(s) = t.weak.upgrade() {
            cx.allocator
                .erase_stream(&s, cx.comm_stream, work.id, current);
            alive.push(s);
        } else if by_block {
            cx.allocator
                .erase_stream_by_block(t.block, work.id, cx.comm_stream, current);
        }
    }
    alive
}
