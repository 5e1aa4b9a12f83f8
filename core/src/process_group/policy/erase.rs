//! Modes 1 and 3: `record_stream`, then erase this work's use at `wait()`. One policy; the
//! modes differ only in what happens to a tensor already dropped at `wait()`.

use super::{Held, PolicyContext, ReusePolicy, Tracked, WorkTensors};
use crate::allocator::Storage;
use crate::backend::Backend;
use crate::ids::WorkId;
use crate::process_group::kind::CommKind;

/// Modes 1 and 3. When the work starts, records a work-owned use of the comm stream on
/// every tensor and remembers a weak handle (and the generation-checked block id) of each.
/// At `wait()`, for each tracked tensor still alive, erases this work's use of the comm
/// stream (honoured only when the block's allocation stream is the current stream).
///
/// - Mode 1 (ERASE_RECORD_STREAM, `by_block: false`): a tensor already dropped keeps its
///   pending-free event and returns when that event completes.
/// - Mode 3 (ERASE_RECORD_STREAM_WITH_OPTIMIZE, `by_block: true`): a tensor already
///   dropped is erased by generation-checked block id, so its block returns at `wait()`
///   instead of when the pending-free event is next processed. A stale id (block merged,
///   split or handed out again since) is a no-op.
pub(crate) struct Erase {
    /// Also erase the uses of tensors already dropped, by block id (mode 3).
    pub(crate) by_block: bool,
}

impl<B: Backend> ReusePolicy<B> for Erase {
    fn name(&self) -> &'static str {
        if self.by_block { "3" } else { "1" }
    }

    fn on_collective_start(
        &self,
        cx: &PolicyContext<'_, B>,
        work: WorkId,
        held: &Held<B>,
        tensors: &WorkTensors<'_, B>,
        _kind: CommKind,
    ) {
        let mut tracked = held.tracked.lock();
        for t in tensors.distinct() {
            cx.allocator.record_stream_for_work(t, cx.comm_stream, work);
            tracked.push(Tracked {
                weak: t.downgrade(),
                block: t.block_ref(),
            });
        }
    }

    /// Returns the upgraded handles (dropping them only drops these extra references; the
    /// user still holds the tensors).
    fn on_wait(
        &self,
        cx: &PolicyContext<'_, B>,
        work: WorkId,
        held: &Held<B>,
        current: &B::Stream,
    ) -> Vec<Storage<B>> {
        let tracked = std::mem::take(&mut *held.tracked.lock());
        let mut alive = Vec::with_capacity(tracked.len());
        for t in tracked {
            if let Some(s) = t.weak.upgrade() {
                cx.allocator.erase_stream(&s, cx.comm_stream, work, current);
                alive.push(s);
            } else if self.by_block {
                cx.allocator
                    .erase_stream_by_block(t.block, work, cx.comm_stream, current);
            }
        }
        alive
    }
}
