//! What a reuse policy holds for one work: the shelf (mode 2) and the tracked tensors
//! (modes 1 and 3). The work owns it; the policy fills and empties it.

use parking_lot::Mutex;

use crate::allocator::{BlockRef, Storage, WeakStorage};
use crate::backend::Backend;
use crate::process_group::shelf::TensorShelf;

/// A tensor a mode-1/3 work tracks without keeping it alive.
pub(crate) struct Tracked<B: Backend> {
    pub(crate) weak: WeakStorage<B>,
    pub(crate) block: BlockRef,
}

/// What the policy holds for one work until it is waited or seen complete.
pub(crate) struct Held<B: Backend> {
    /// Mode 2: strong handles until wait / completion. Its waited flag is the work's, in
    /// every mode: the first `wait()` to set it runs the policy's release step.
    pub(crate) shelf: TensorShelf<B>,
    /// Modes 1 and 3: weak handles to erase at wait.
    pub(crate) tracked: Mutex<Vec<Tracked<B>>>,
}

impl<B: Backend> Default for Held<B> {
    fn default() -> Self {
        Held {
            shelf: TensorShelf::default(),
            tracked: Mutex::new(Vec::new()),
        }
    }
}

impl<B: Backend> Held<B> {
    /// Bytes still held without the work having been waited: the shelf, and the live
    /// tensors carrying the work's stream uses.
    pub(crate) fn unwaited_bytes(&self) -> u64 {
        if self.shelf.is_waited() {
            return 0;
        }
        let shelf: u64 = self
            .shelf
            .with_items(|items| items.iter().map(Storage::size).sum());
        let tracked: u64 = self
            .tracked
            .lock()
            .iter()
            .filter_map(|t| t.weak.upgrade())
            .map(|s| s.size())
            .sum();
        shelf + tracked
    }
}
