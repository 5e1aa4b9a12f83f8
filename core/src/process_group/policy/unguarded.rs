//! The negative control: no `record_stream`, no shelf. Compiled only with the
//! `negative-control` feature, for the conformance runner to prove its race detector
//! catches what the real policies prevent. Never offered as a mode by the public API.

use super::{Held, PolicyContext, ReusePolicy, WorkTensors};
use crate::allocator::Storage;
use crate::backend::Backend;
use crate::ids::WorkId;
use crate::process_group::kind::CommKind;

/// Protects nothing: a tensor freed before `wait()` goes straight back to its pool.
pub(crate) struct Unguarded;

impl<B: Backend> ReusePolicy<B> for Unguarded {
    fn name(&self) -> &'static str {
        "unsafe"
    }

    fn on_collective_start(
        &self,
        _cx: &PolicyContext<'_, B>,
        _work: WorkId,
        _held: &Held<B>,
        _tensors: &WorkTensors<'_, B>,
        _kind: CommKind,
    ) {
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
