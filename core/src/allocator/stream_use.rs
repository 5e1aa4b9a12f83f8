//! Stream uses: what the device-facing layer keeps per block beside the index, the streams
//! that used it (device handles, each with its owner) and the events recorded on them at
//! free time. [`super::pending::PendingFrees`] holds one [`DeviceSlot`] per slot.
//!
//! Slots keep their vectors (cleared, not dropped) when reused, so the steady state
//! allocates no memory for them.

use crate::backend::Backend;
use crate::ids::{StreamId, WorkId};

/// Who holds a stream use of a block.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum UseOwner {
    /// `record_stream` by the user: only freeing the block ends it.
    User,
    /// A use recorded on behalf of one process-group work, erased by that work.
    Work(WorkId),
}

/// One use of a block by a stream other than its allocation stream.
pub(crate) struct StreamUse<S> {
    pub stream: S,
    pub id: StreamId,
    pub owner: UseOwner,
}

/// The device handles of one slot.
pub(crate) struct DeviceSlot<B: Backend> {
    /// Other streams that used the block, each with its owner.
    pub uses: Vec<StreamUse<B::Stream>>,
    /// Events recorded at free time on the streams in `uses`, at most one per stream.
    pub events: Vec<(StreamId, B::Event)>,
    /// The block's position in the pending list while it is pending-free, so removing it
    /// (an erase that frees it) is O(1), not a search of every pending block.
    pub pending_at: Option<usize>,
}

impl<B: Backend> Default for DeviceSlot<B> {
    fn default() -> Self {
        DeviceSlot {
            uses: Vec::new(),
            events: Vec::new(),
            pending_at: None,
        }
    }
}

impl<B: Backend> DeviceSlot<B> {
    /// True when some owner still holds a use of stream `id`.
    pub fn has_use_of(&self, id: StreamId) -> bool {
        self.uses.iter().any(|u| u.id == id)
    }
}
