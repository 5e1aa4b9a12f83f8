//! Prometheus exposition: it parses, its values equal the stats, names follow the
//! conventions, and the loopback endpoint serves it.

mod observe_support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::Arc;

use memreuse_core::Backend;
use memreuse_core::allocator::{AllocatorConfig, CachingAllocator};
use memreuse_core::observe::metrics::CONTENT_TYPE;
use memreuse_core::observe::{
    DeviceMetrics, GroupMetrics, MetricsReport, MetricsServer, fragmentation, render_metrics,
};
use memreuse_core::process_group::PgStats;
use memreuse_core::testing::ManualBackend;

const MIB: u64 = 1 << 20;

/// A sample: metric name and sorted labels.
type Key = (String, Vec<(String, String)>);

/// A minimal parser of the text exposition format: `# TYPE`/`# HELP`/`# UNIT` comments,
/// `name{k="v",...} value` samples, `# EOF`. Panics on anything else.
fn parse(text: &str) -> (HashMap<Key, String>, HashMap<String, String>) {
    let mut samples = HashMap::new();
    let mut types = HashMap::new();
    let mut saw_eof = false;
    for line in text.lines() {
        assert!(!saw_eof, "nothing after # EOF");
        if line == "# EOF" {
            saw_eof = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect("TYPE name type");
            types.insert(name.to_owned(), ty.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (_, help) = rest.split_once(' ').expect("HELP name text");
            assert!(
                help.ends_with('.') && !help.ends_with(".."),
                "one final period: {line:?}"
            );
            continue;
        }
        if line.starts_with("# UNIT ") {
            continue;
        }
        assert!(
            !line.starts_with('#') && !line.is_empty(),
            "unexpected line {line:?}"
        );
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        assert!(value.parse::<f64>().is_ok(), "numeric value in {line:?}");
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => {
                let body = l.strip_suffix('}').expect("closing brace");
                let mut labels: Vec<(String, String)> = body
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (k, v) = p.split_once('=').expect("k=v");
                        let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
                        (k.to_owned(), v.expect("quoted value").to_owned())
                    })
                    .collect();
                labels.sort();
                (n.to_owned(), labels)
            }
            None => (series.to_owned(), Vec::new()),
        };
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "metric name {name}"
        );
        samples.insert((name, labels), value.to_owned());
    }
    assert!(saw_eof, "ends with # EOF");
    (samples, types)
}

fn key(name: &str, labels: &[(&str, &str)]) -> Key {
    let mut l: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    l.sort();
    (name.to_owned(), l)
}

#[test]
fn exposition_parses_and_equals_the_stats() {
    let backend = Arc::new(ManualBackend::new(1 << 30));
    let alloc = CachingAllocator::new(Arc::clone(&backend), AllocatorConfig::default());
    let s0 = backend.default_stream();
    let small = alloc.allocate(1000, &s0).unwrap();
    let big = alloc.allocate(30 * MIB, &s0).unwrap();
    let freed = alloc.allocate(2 * MIB, &s0).unwrap();
    let kept = alloc.allocate(5 * MIB, &s0).unwrap();
    drop(freed);
    let mut device = DeviceMetrics::collect(alloc.as_ref());
    device.early_warnings = Some(2);
    let stats = alloc.stats();
    let frag = fragmentation(&alloc.snapshot());
    assert_eq!(
        stats.fragmentation, frag,
        "live and snapshot fragmentation agree"
    );
    let pg = PgStats {
        works_issued: 7,
        shelf_stashes: 3,
        ..PgStats::default()
    };
    let report = MetricsReport {
        devices: vec![device],
        groups: vec![GroupMetrics {
            backend: "manual".into(),
            device: 0,
            group: "world".into(),
            stats: pg,
        }],
    };
    let text = render_metrics(&report);
    let (samples, types) = parse(&text);
    let be = backend.name().to_owned();
    let l = |pool: &str| key("", &[("backend", &be), ("device", "0"), ("pool", pool)]).1;
    let raw = |name: &str, labels: &Vec<(String, String)>| {
        samples
            .get(&(name.to_owned(), labels.clone()))
            .unwrap_or_else(|| panic!("{name} {labels:?} missing in\n{text}"))
            .clone()
    };
    // Integer samples compare exactly; the ratio is a float.
    let get = |name: &str, labels: Vec<(String, String)>| -> u64 {
        raw(name, &labels).parse().expect("integer sample")
    };
    let ratio = |name: &str, labels: Vec<(String, String)>| -> f64 {
        raw(name, &labels).parse().expect("float sample")
    };
    let dev = key("", &[("backend", &be), ("device", "0")]).1;
    assert_eq!(
        get("memreuse_allocated_bytes", l("all")),
        stats.allocated_bytes.current
    );
    assert_eq!(
        get("memreuse_allocated_bytes", l("small")),
        stats.allocated_bytes.small_pool.current
    );
    assert_eq!(
        get("memreuse_reserved_bytes", l("large")),
        stats.reserved_bytes.large_pool.current
    );
    assert_eq!(
        get("memreuse_reserved_peak_bytes", l("all")),
        stats.reserved_bytes.peak
    );
    assert_eq!(get("memreuse_segments", l("all")), stats.segment.current);
    assert_eq!(
        get("memreuse_cached_free_bytes", dev.clone()),
        stats.cached_free_bytes
    );
    assert_eq!(
        get("memreuse_device_allocs_total", dev.clone()),
        stats.num_device_alloc
    );
    assert_eq!(get("memreuse_ooms_total", dev.clone()), 0);
    assert_eq!(get("memreuse_early_warnings_total", dev.clone()), 2);
    let info = backend.memory_info().unwrap();
    assert_eq!(get("memreuse_device_total_bytes", dev.clone()), info.total);
    assert_eq!(
        get("memreuse_device_used_outside_allocator_bytes", dev.clone()),
        info.total - info.free - stats.reserved_bytes.current
    );
    assert!((ratio("memreuse_fragmentation_ratio", l("large")) - frag.large.ratio()).abs() < 1e-9);
    assert_eq!(
        get("memreuse_largest_free_block_bytes", l("all")),
        frag.all.largest_free
    );
    let g = key(
        "",
        &[("backend", "manual"), ("device", "0"), ("group", "world")],
    )
    .1;
    assert_eq!(get("memreuse_pg_works_issued_total", g.clone()), 7);
    assert_eq!(get("memreuse_pg_shelf_stashes_total", g), 3);
    // Conventions: namespace, counters end in _total, byte gauges in _bytes.
    for (name, _) in samples.keys() {
        assert!(name.starts_with("memreuse_"), "{name}");
    }
    for (family, ty) in &types {
        if ty == "counter" {
            assert!(
                samples.keys().any(|(n, _)| *n == format!("{family}_total")),
                "{family}"
            );
        }
    }
    assert_eq!(
        types.get("memreuse_allocated_bytes").map(String::as_str),
        Some("gauge")
    );
    drop((small, big, kept));
}

#[test]
fn loopback_endpoint_serves_metrics_and_stops_on_drop() {
    let server =
        MetricsServer::loopback(0, Arc::new(|| "memreuse_up 1\n# EOF\n".to_owned())).unwrap();
    let addr = server.local_addr();
    assert!(addr.ip().is_loopback());
    let get = |path: &str| {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let ok = get("/metrics");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains(CONTENT_TYPE));
    assert!(ok.ends_with("memreuse_up 1\n# EOF\n"));
    assert!(get("/other").starts_with("HTTP/1.1 404"));
    drop(server);
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "nothing listens after drop"
    );
}
