//! Reuse policies: one small type per mode behind one trait, so the process group never
//! branches on the mode (docs/design.md §4).
//!
//! The lowest layer of the process group: a policy sees a work only as its id and what it
//! holds for it ([`Held`]), so it names neither the work's state, the shared state nor the
//! group.
//!
//! Hooks, in the order the process group calls them:
//! 1. [`ReusePolicy::on_collective_start`] — after the comm stream waited on the current
//!    stream, before the operation is enqueued; sees every tensor the work touches.
//! 2. [`ReusePolicy::on_wait`] — after the current stream waited on the work's end event.
//! 3. [`ReusePolicy::on_completion`] — when the work is observed complete without a wait
//!    (watchdog, main-thread poll, OOM callback); hands what it holds to the hand-off list.

mod erase;
mod held;
mod record;
mod stash;
#[cfg(feature = "negative-control")]
mod unguarded;

pub(crate) use erase::Erase;
pub(crate) use held::{Held, Tracked};
pub(crate) use record::RecordStream;
pub(crate) use stash::Stash;
#[cfg(feature = "negative-control")]
pub(crate) use unguarded::Unguarded;

use std::sync::Arc;

use super::counters::PgCounters;
use super::kind::CommKind;
use super::shelf::TensorShelf;
use crate::allocator::{CachingAllocator, Storage};
use crate::backend::Backend;
use crate::ids::WorkId;

/// What a policy may touch: the allocator, the group's comm stream, its counters.
pub(crate) struct PolicyContext<'a, B: Backend> {
    pub(crate) allocator: &'a Arc<CachingAllocator<B>>,
    pub(crate) comm_stream: &'a B::Stream,
    pub(crate) counters: &'a PgCounters,
}

/// The tensors one work touches. A tensor both read and written (in-place all_reduce)
/// appears in both lists; policies deduplicate by block where it matters.
pub(crate) struct WorkTensors<'a, B: Backend> {
    pub(crate) inputs: &'a [&'a Storage<B>],
    pub(crate) outputs: &'a [&'a Storage<B>],
}

impl<B: Backend> WorkTensors<'_, B> {
    /// Every distinct storage (by block), inputs first.
    pub(crate) fn distinct(&self) -> Vec<&Storage<B>> {
        let mut seen: Vec<&Storage<B>> = Vec::with_capacity(self.inputs.len() + self.outputs.len());
        for s in self.inputs.iter().chain(self.outputs.iter()) {
            if !seen.iter().any(|t| t.ptr() == s.ptr()) {
                seen.push(s);
            }
        }
        seen
    }
}

/// The watchdog side of the hand-off (`HandoffList::hand_over` for this work): moves what
/// a shelf holds to the hand-off list unless `wait()` released it; true if anything moved.
pub(crate) type HandOver<'a, B> = &'a dyn Fn(&TensorShelf<B>) -> bool;

/// A multi-stream memory reuse policy.
pub(crate) trait ReusePolicy<B: Backend>: Send + Sync + 'static {
    /// The mode's name in reports (`0`..`3`, `unsafe`).
    fn name(&self) -> &'static str;

    /// Protects the tensors of work `work` about to be enqueued on the comm stream.
    fn on_collective_start(
        &self,
        cx: &PolicyContext<'_, B>,
        work: WorkId,
        held: &Held<B>,
        tensors: &WorkTensors<'_, B>,
        kind: CommKind,
    );

    /// Release step of `wait()`; `current` already waits on the work's end event.
    /// Returns storages to drop (the caller drops them outside every lock).
    fn on_wait(
        &self,
        cx: &PolicyContext<'_, B>,
        work: WorkId,
        held: &Held<B>,
        current: &B::Stream,
    ) -> Vec<Storage<B>>;

    /// The work was observed complete on the device before any `wait()`: hand what the
    /// policy still holds over through `hand_over` (the watchdog never drops storages
    /// itself). Returns whether anything was handed over.
    fn on_completion(&self, held: &Held<B>, hand_over: HandOver<'_, B>) -> bool {
        let _ = (held, hand_over);
        false
    }
}
