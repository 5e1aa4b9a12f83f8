//! Mode 2 (AVOID_RECORD_STREAM): stash strong handles on the work's shelf instead of
//! recording streams; release them after the current stream waited for the work.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{HandOver, Held, PolicyContext, ReusePolicy, WorkTensors};
use crate::allocator::Storage;
use crate::backend::Backend;
use crate::ids::WorkId;
use crate::process_group::kind::CommKind;

/// Mode 2. Collectives create no reuse event at all. Point-to-point falls back to
/// `record_stream` (warning once), because nothing obliges a user to wait on an `isend`.
pub(crate) struct Stash;

static P2P_WARNED: AtomicBool = AtomicBool::new(false);

impl<B: Backend> ReusePolicy<B> for Stash {
    fn name(&self) -> &'static str {
        "2"
    }

    fn on_collective_start(
        &self,
        cx: &PolicyContext<'_, B>,
        work: WorkId,
        held: &Held<B>,
        tensors: &WorkTensors<'_, B>,
        kind: CommKind,
    ) {
        match kind {
            CommKind::Collective => {
                for t in tensors.distinct() {
                    held.shelf.stash(t.clone());
                    cx.counters.shelf_stashes.fetch_add(1, Ordering::Relaxed);
                }
            }
            CommKind::PointToPoint => {
                if !P2P_WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "MULTI_STREAM_MEMORY_REUSE=2: point-to-point operations fall back to record_stream \
                         (a send may never be waited on, so its tensors cannot be stashed safely)"
                    );
                }
                cx.counters
                    .p2p_record_stream_fallbacks
                    .fetch_add(1, Ordering::Relaxed);
                for t in tensors.distinct() {
                    cx.allocator.record_stream_for_work(t, cx.comm_stream, work);
                }
            }
        }
    }

    fn on_wait(
        &self,
        cx: &PolicyContext<'_, B>,
        work: WorkId,
        held: &Held<B>,
        current: &B::Stream,
    ) -> Vec<Storage<B>> {
        let released = held.shelf.unstash();
        let current_id = cx.allocator.backend().stream_id(current);
        for s in &released {
            // The hole PyTorch and torch_npu leave open: a tensor allocated on another
            // stream would go back to *that* stream's pool, which is not ordered after the
            // collective. Recording the current stream (which already waits on the work)
            // makes its block wait for an event there before it can be reused.
            if s.stream_id() != current_id {
                cx.allocator.record_stream_for_work(s, current, work);
            }
        }
        released
    }

    fn on_completion(&self, held: &Held<B>, hand_over: HandOver<'_, B>) -> bool {
        // The device finished the work and the host observed it: nothing can race any
        // more, whatever stream the tensors were allocated on. The draining thread
        // re-observes completion itself before it drops them.
        hand_over(&held.shelf)
    }
}
