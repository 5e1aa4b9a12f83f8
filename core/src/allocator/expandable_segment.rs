//! One expandable segment as the device layer holds it: its reserved range's stream, pool,
//! page size and the physical handle behind each mapped page (the blocks that tile it are
//! the index's). A type of its own, below both the state that holds the segments and the
//! growth and release code in `expandable.rs`.

use std::collections::BTreeMap;

use crate::ids::StreamId;
use crate::virtual_memory::PhysicalHandle;

use super::sizes::PoolKind;

/// One expandable segment: its reserved range, its stream and its mapped pages.
pub(crate) struct ExpandableSegment<S> {
    pub stream_id: StreamId,
    pub pool: PoolKind,
    /// Memory-pool lane (0: ordinary allocations; a pool without a segment source has
    /// expandable segments of its own).
    pub lane: u32,
    /// Synchronized before pages are unmapped.
    pub stream: S,
    /// Bytes per page.
    pub page: u64,
    /// The physical handle behind each mapped page, by page address.
    pub pages: BTreeMap<u64, PhysicalHandle>,
}
