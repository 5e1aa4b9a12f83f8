//! Everything about an out-of-memory, in one place:
//! - `report.rs`: [`OomInfo`] (what observers receive) and [`OutOfMemory`] (the error's
//!   numbers and PyTorch-style message);
//! - `culprits.rs`: what makes memory unusable ([`OomCulprits`]: pending-free blocks per
//!   owner and stream, shelves of works never waited) and the explainers that add to it;
//! - `rounding.rs`: when a request needed more device memory than its own size and that
//!   is why it failed ([`Rounding`]: segment sizes, expandable pages,
//!   `roundup_power2_divisions`);
//! - `format.rs`: bytes and lists as the message spells them ([`FormatSize`]);
//! - `at_failure.rs`: the end of the malloc chain (the report built under the lock, then the
//!   OOM snapshot, the observers and the explainers without it);
//! - `snapshot_writer.rs`: the extension point through which observe writes the OOM
//!   snapshot file (the allocator never imports observe).
//!
//! The malloc chain that ends here is `CachingAllocator::allocate` (`caching.rs`); the
//! explanations a process group adds live with the process group (`oom_explain.rs`).

mod at_failure;
mod culprits;
mod format;
mod report;
mod rounding;
mod snapshot_writer;

pub(crate) use at_failure::{AtMiss, OomHooks, beyond_device};
pub use at_failure::{OOM_SNAPSHOT_ENV, OomObserver};
pub use culprits::{OomCulprits, OomExplainer, PendingHold, ShelfHold, culprit_holds_visited};
pub use format::FormatSize;
pub use report::{OomInfo, OutOfMemory};
pub use rounding::{Rounding, RoundingCause};
pub(crate) use snapshot_writer::OomSnapshotWriter;
