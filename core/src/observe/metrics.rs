//! Prometheus text exposition (OpenMetrics, via `prometheus-client`) of the allocator's and
//! the process groups' statistics.
//!
//! Every name is in the `memreuse_` namespace, byte figures are in bytes (`_bytes`), and
//! counters end in `_total`. Labels: `backend` and `device` on everything, `pool`
//! (`all`, `small`, `large`) on per-pool figures, `group` on process-group counters.
//!
//! | metric | type | source |
//! |---|---|---|
//! | `memreuse_{allocated,reserved,active,requested,inactive_split}_bytes{pool}` | gauge | `AllocatorStats` `*_bytes.current` |
//! | `memreuse_{allocated,reserved}_peak_bytes{pool}` | gauge | `*_bytes.peak` |
//! | `memreuse_allocations{pool}`, `memreuse_segments{pool}` | gauge | `allocation`, `segment` |
//! | `memreuse_pending_free_bytes`, `memreuse_cached_free_bytes` | gauge | stats |
//! | `memreuse_fragmentation_ratio{pool}`, `memreuse_largest_free_block_bytes{pool}` | gauge | [`AllocatorStats::fragmentation`] |
//! | `memreuse_device_total_bytes`, `memreuse_device_free_bytes`, `memreuse_device_used_outside_allocator_bytes` | gauge | backend `memory_info` |
//! | `memreuse_{alloc_retries,ooms,sync_all_streams,device_allocs,device_frees,reuse_events_created,record_stream_calls,erase_stream_calls}_total` | counter | stats |
//! | `memreuse_early_warnings_total` | counter | [`super::EarlyWarning::warnings`] |
//! | `memreuse_pg_*_total{group}` | counter | `PgStats` |

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::fragmentation::memory_outside_allocator;
use crate::allocator::{AllocatorStats, CachingAllocator, StatArray};
use crate::backend::Backend;
use crate::ids::MemoryInfo;
use crate::process_group::{PgStats, ProcessGroup};

/// What one device's allocator reports.
#[derive(Clone, Debug, Default)]
pub struct DeviceMetrics {
    /// Backend name (`mock`, `cuda`, ...).
    pub backend: String,
    /// Device index.
    pub device: usize,
    /// Allocator statistics.
    pub stats: AllocatorStats,
    /// The device's free and total memory, if it could say.
    pub memory: Option<MemoryInfo>,
    /// Early warnings fired for this device, if a watcher runs.
    pub early_warnings: Option<u64>,
}

impl DeviceMetrics {
    /// Reads `allocator`'s stats (fragmentation included) and the device's memory info.
    pub fn collect<B: Backend>(allocator: &CachingAllocator<B>) -> Self {
        let backend = allocator.backend();
        DeviceMetrics {
            backend: backend.name().to_owned(),
            device: backend.device_index(),
            stats: allocator.stats(),
            memory: backend.memory_info().ok(),
            early_warnings: None,
        }
    }
}

/// What one process group reports.
#[derive(Clone, Debug, Default)]
pub struct GroupMetrics {
    /// Backend name.
    pub backend: String,
    /// Device index.
    pub device: usize,
    /// The group's name in this process (`world`, `tp0`, ...).
    pub group: String,
    /// Its counters.
    pub stats: PgStats,
}

impl GroupMetrics {
    /// Reads `group`'s counters, labelled `name`.
    pub fn collect<B: Backend>(group: &ProcessGroup<B>, name: &str) -> Self {
        let backend = group.allocator().backend();
        GroupMetrics {
            backend: backend.name().to_owned(),
            device: backend.device_index(),
            group: name.to_owned(),
            stats: group.stats(),
        }
    }
}

/// Everything one exposition shows.
#[derive(Clone, Debug, Default)]
pub struct MetricsReport {
    /// One entry per device allocator.
    pub devices: Vec<DeviceMetrics>,
    /// One entry per process group.
    pub groups: Vec<GroupMetrics>,
}

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// `help` as the registry wants it: prometheus-client ends every HELP line with a period
/// itself, so a sentence's own final period would be doubled.
fn help_text(help: &str) -> &str {
    help.strip_suffix('.').unwrap_or(help)
}

/// Registers families on first use and sets one sample per call.
struct Exposition {
    registry: Registry,
    gauges: BTreeMap<&'static str, Family<Labels, Gauge>>,
    floats: BTreeMap<&'static str, Family<Labels, FloatGauge>>,
    counters: BTreeMap<&'static str, Family<Labels, Counter>>,
}

fn sat(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Exposition {
    fn new() -> Self {
        Exposition {
            registry: Registry::with_prefix("memreuse"),
            gauges: BTreeMap::new(),
            floats: BTreeMap::new(),
            counters: BTreeMap::new(),
        }
    }

    fn gauge(&mut self, name: &'static str, help: &str, bytes: bool, labels: &Labels, v: u64) {
        let registry = &mut self.registry;
        let family = self.gauges.entry(name).or_insert_with(|| {
            let f = Family::<Labels, Gauge>::default();
            if bytes {
                registry.register_with_unit(name, help_text(help), Unit::Bytes, f.clone());
            } else {
                registry.register(name, help_text(help), f.clone());
            }
            f
        });
        family.get_or_create(labels).set(sat(v));
    }

    fn float(&mut self, name: &'static str, help: &str, labels: &Labels, v: f64) {
        let registry = &mut self.registry;
        let family = self.floats.entry(name).or_insert_with(|| {
            let f = Family::<Labels, FloatGauge>::default();
            registry.register(name, help_text(help), f.clone());
            f
        });
        family.get_or_create(labels).set(v);
    }

    /// `name` without `_total`: the encoder appends it.
    fn counter(&mut self, name: &'static str, help: &str, labels: &Labels, v: u64) {
        let registry = &mut self.registry;
        let family = self.counters.entry(name).or_insert_with(|| {
            let f = Family::<Labels, Counter>::default();
            registry.register(name, help_text(help), f.clone());
            f
        });
        family.get_or_create(labels).inc_by(v);
    }

    fn pools(
        &mut self,
        name: &'static str,
        help: &str,
        bytes: bool,
        base: &Labels,
        s: &StatArray,
        peak: bool,
    ) {
        for (pool, stat) in [
            ("all", s.aggregate),
            ("small", s.small_pool),
            ("large", s.large_pool),
        ] {
            let v = if peak { stat.peak } else { stat.current };
            self.gauge(name, help, bytes, &with(base, "pool", pool), v);
        }
    }
}

fn with(base: &Labels, key: &str, value: &str) -> Labels {
    let mut l = base.clone();
    l.push((key.to_owned(), value.to_owned()));
    l
}

fn base_labels(backend: &str, device: usize) -> Labels {
    vec![
        ("backend".to_owned(), backend.to_owned()),
        ("device".to_owned(), device.to_string()),
    ]
}

fn device_metrics(x: &mut Exposition, d: &DeviceMetrics) {
    let l = base_labels(&d.backend, d.device);
    let s = &d.stats;
    x.pools(
        "allocated",
        "Bytes of blocks handed out and not yet freed.",
        true,
        &l,
        &s.allocated_bytes,
        false,
    );
    x.pools(
        "reserved",
        "Bytes of all segments the allocator holds.",
        true,
        &l,
        &s.reserved_bytes,
        false,
    );
    x.pools(
        "active",
        "Bytes of allocated or pending-free blocks.",
        true,
        &l,
        &s.active_bytes,
        false,
    );
    x.pools(
        "requested",
        "Bytes callers asked for, of active blocks.",
        true,
        &l,
        &s.requested_bytes,
        false,
    );
    x.pools(
        "inactive_split",
        "Bytes of free blocks inside split segments.",
        true,
        &l,
        &s.inactive_split_bytes,
        false,
    );
    x.pools(
        "allocated_peak",
        "Peak of allocated bytes since the last reset.",
        true,
        &l,
        &s.allocated_bytes,
        true,
    );
    x.pools(
        "reserved_peak",
        "Peak of reserved bytes since the last reset.",
        true,
        &l,
        &s.reserved_bytes,
        true,
    );
    x.pools(
        "allocations",
        "Blocks handed out and not yet freed.",
        false,
        &l,
        &s.allocation,
        false,
    );
    x.pools(
        "segments",
        "Segments obtained from the device.",
        false,
        &l,
        &s.segment,
        false,
    );
    x.gauge(
        "pending_free",
        "Bytes freed by the user but waiting on events.",
        true,
        &l,
        s.pending_free_bytes,
    );
    x.gauge(
        "cached_free",
        "Bytes of free blocks held in the pools.",
        true,
        &l,
        s.cached_free_bytes,
    );
    for (pool, p) in s.fragmentation.by_pool() {
        let pl = with(&l, "pool", pool);
        x.float(
            "fragmentation_ratio",
            "1 - largest free block / total free bytes, per pool.",
            &pl,
            p.ratio(),
        );
        x.gauge(
            "largest_free_block",
            "The largest free cached block, per pool.",
            true,
            &pl,
            p.largest_free,
        );
    }
    if let Some(m) = d.memory {
        x.gauge("device_total", "Device capacity.", true, &l, m.total);
        x.gauge(
            "device_free",
            "Free device memory as the device reports it.",
            true,
            &l,
            m.free,
        );
        x.gauge(
            "device_used_outside_allocator",
            "Device memory in use that the allocator does not own (total - free - reserved).",
            true,
            &l,
            memory_outside_allocator(m, s.reserved_bytes.aggregate.current),
        );
    }
    x.counter(
        "alloc_retries",
        "Mallocs that freed the cache and retried.",
        &l,
        s.num_alloc_retries,
    );
    x.counter(
        "ooms",
        "Allocations that failed with out-of-memory.",
        &l,
        s.num_ooms,
    );
    x.counter(
        "sync_all_streams",
        "Synchronizations of every pending event.",
        &l,
        s.num_sync_all_streams,
    );
    x.counter(
        "device_allocs",
        "Raw device allocations.",
        &l,
        s.num_device_alloc,
    );
    x.counter("device_frees", "Raw device frees.", &l, s.num_device_free);
    x.counter(
        "reuse_events_created",
        "Events recorded for pending frees.",
        &l,
        s.reuse_events_created,
    );
    x.counter(
        "record_stream_calls",
        "Calls to record_stream and record_stream_for_work.",
        &l,
        s.record_stream_calls,
    );
    x.counter(
        "erase_stream_calls",
        "Calls to erase_stream and erase_stream_by_block.",
        &l,
        s.erase_stream_calls,
    );
    if let Some(w) = d.early_warnings {
        x.counter(
            "early_warnings",
            "Memory-growth early warnings fired.",
            &l,
            w,
        );
    }
}

fn group_metrics(x: &mut Exposition, g: &GroupMetrics) {
    let l = with(&base_labels(&g.backend, g.device), "group", &g.group);
    let s = &g.stats;
    x.counter(
        "pg_works_issued",
        "Works issued by the process group.",
        &l,
        s.works_issued,
    );
    x.counter(
        "pg_works_failed",
        "Works that ended in an error.",
        &l,
        s.works_failed,
    );
    x.counter(
        "pg_shelf_stashes",
        "Tensors stashed on shelves (mode 2).",
        &l,
        s.shelf_stashes,
    );
    x.counter(
        "pg_shelf_unstashed_by_watchdog",
        "Shelves the watchdog handed over.",
        &l,
        s.shelf_unstashed_by_watchdog,
    );
    x.counter(
        "pg_shelf_released_by_poll",
        "Shelves released by the main thread's poll.",
        &l,
        s.shelf_released_by_poll,
    );
    x.counter(
        "pg_shelf_released_by_oom_callback",
        "Shelves released before an OOM.",
        &l,
        s.shelf_released_by_oom_callback,
    );
    x.counter(
        "pg_p2p_record_stream_fallbacks",
        "Point-to-point works that fell back to record_stream.",
        &l,
        s.p2p_record_stream_fallbacks,
    );
}

/// Renders `report` in the OpenMetrics text format (what Prometheus scrapes; ends with
/// `# EOF`).
pub fn render_metrics(report: &MetricsReport) -> String {
    let mut x = Exposition::new();
    for d in &report.devices {
        device_metrics(&mut x, d);
    }
    for g in &report.groups {
        group_metrics(&mut x, g);
    }
    let mut out = String::new();
    match encode(&mut out, &x.registry) {
        Ok(()) => out,
        // Writing to a String cannot fail; keep the exposition valid regardless.
        Err(_) => "# EOF\n".to_owned(),
    }
}

/// The content type of [`render_metrics`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
