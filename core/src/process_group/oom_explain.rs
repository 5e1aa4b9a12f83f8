//! What a process group adds to an `OutOfMemory` message: the operation of each work its
//! pending-free bytes wait for, and the shelves of works never waited (mode 2).

use super::shared::PgShared;
use crate::allocator::{OomCulprits, ShelfHold, Storage};
use crate::backend::Backend;

impl<B: Backend> PgShared<B> {
    /// The group's explainer (registered with the allocator at build, removed at drop).
    /// Runs without the allocator lock; takes only the in-flight list and shelf locks.
    pub(super) fn explain_oom(&self, culprits: &mut OomCulprits) {
        for w in self.inflight.lock().iter() {
            culprits.name_work(w.id, w.op);
            if w.held.shelf.is_waited() {
                continue;
            }
            let (bytes, storages) = w.held.shelf.with_items(|items| {
                (
                    items.iter().map(Storage::size).sum::<u64>(),
                    items.len() as u64,
                )
            });
            if storages > 0 {
                culprits.shelved.push(ShelfHold {
                    work: w.id,
                    op: w.op,
                    bytes,
                    storages,
                });
            }
        }
    }
}
