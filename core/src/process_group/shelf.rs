//! TensorShelf: strong storage handles kept alive until a work is known to be done.

use super::handoff::Shelf;
use crate::allocator::Storage;

/// A locked list of strong storage handles (mode 2's replacement for `record_stream`):
/// `stash`, `unstash`, `is_empty`. The hand-off protocol around it is in
/// [`super::handoff`].
pub type TensorShelf<B> = Shelf<Storage<B>>;
