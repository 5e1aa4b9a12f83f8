//! Observability and OOM diagnosis, built on the allocator's public API
//! ([`crate::CachingAllocator::snapshot`], [`crate::CachingAllocator::stats`],
//! [`crate::CachingAllocator::add_oom_observer`]) and the process group's work spans.
//!
//! - [`viewer`]: snapshots in the shape of `torch.cuda.memory._snapshot()`, as JSON or as a
//!   pickle that `python -m torch.cuda._memory_viz trace_plot FILE -o out.html` and
//!   pytorch.org/memory_viz open.
//! - [`timeline`]: a Chrome-trace / Perfetto JSON timeline of one run.
//! - [`metrics`] and [`http`]: Prometheus text exposition and an opt-in `/metrics` endpoint.
//! - [`early_warning`]: projected time to the memory limit from the recent growth rate.
//! - [`fragmentation`](mod@fragmentation): fragmentation per pool and device memory used outside the allocator.
//! - [`oom`]: the snapshot the allocator writes at the moment of out-of-memory
//!   (`MEMREUSE_OOM_SNAPSHOT`), named in the `OutOfMemory` message.

pub mod early_warning;
pub mod fragmentation;
pub mod http;
pub mod metrics;
pub mod oom;
pub mod timeline;
pub mod viewer;

pub use early_warning::{EarlyWarning, EarlyWarningConfig, GrowthWarning, WatcherThread};
pub use fragmentation::{
    Fragmentation, PoolFragmentation, fragmentation, memory_outside_allocator,
};
pub use http::MetricsServer;
pub use metrics::{DeviceMetrics, GroupMetrics, MetricsReport, render_metrics};
pub use oom::{OOM_SNAPSHOT_ENV, oom_snapshot, oom_snapshot_path, write_oom_snapshot};
pub use timeline::{MemorySample, Timeline};
pub use viewer::{ExportError, ViewerSnapshot};
