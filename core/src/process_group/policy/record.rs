//! Mode 0 (CLOSE): `record_stream` on every tensor; memory returns through the allocator's
//! pending-free events.

use super::{Held, PolicyContext, ReusePolicy, WorkTensors};
use crate::allocator::Storage;
use crate::backend::Backend;
use crate::ids::WorkId;
use crate::process_group::kind::CommKind;

/// Mode 0: each tensor gets a use of the comm stream owned by the work. Nothing is erased:
/// a freed tensor returns to its pool when the event recorded at free time completes.
pub(crate) struct RecordStream;

impl<B: Backend> ReusePolicy<B> for RecordStream {
    fn name(&self) -> &'static str {
        "0"
    }

    fn on_collective_start(
        &self,
        cx: &PolicyContext<'_, B>,
        work: WorkId,
        _held: &Held<B>,
        tensors: &WorkTensors<'_, B>,
        _kind: CommKind,
    ) {
        for t in tensors.distinct() {
            cx.allocator.record_stream_for_work(t, cx.comm_stream, work);
        }
    }

    fn on_wait(
        &self,
        _cx: &PolicyContext<'_, B>,
        _work: WorkId,
        _held: &Held<B>,
        _current: &B::Stream,
    ) -> Vec<Storage<B>> {
        Vec::new()
    }
}
