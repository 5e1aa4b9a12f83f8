//! What the plugin boundary costs: the same calls on the mock linked directly and on the
//! mock through `libmemreuse_mock_plugin.so`, for `valgrind --tool=callgrind` to count.
//!
//! `boundary_cost (direct|plugin) N [PLUGIN.so]` makes N `query_event` calls, N
//! `memset_zero` calls (then one synchronize) on one device, and N 1-element `all_reduce`s
//! (each waited for) on a world of 2. Run it at two N and divide the difference in
//! instructions by the difference in N: the per-call cost without the fixed setup
//! (`backends/plugin/ci/boundary-cost.sh` does that and prints the table).

use std::sync::Arc;
use std::time::Duration;

use memreuse_core::{Backend, BackendOptions, Communicator, DType, ReduceOp};
use memreuse_mock::{MockConfig, MockDevice, open_mock_world};
use memreuse_plugin::{PluginDevice, load, open_plugin_world};

fn device_calls<B: Backend>(dev: &B, n: usize, what: &str) {
    let s = dev.default_stream();
    let p = dev.malloc(256).expect("malloc");
    let e = dev.create_event().expect("event");
    match what {
        "query" => {
            for _ in 0..n {
                assert!(dev.query_event(&e).expect("query"));
            }
        }
        "memset" => {
            for _ in 0..n {
                dev.memset_zero(p, 256, &s).expect("memset");
            }
            dev.synchronize_stream(&s).expect("sync");
        }
        _ => {}
    }
    dev.free(p).expect("free");
}

fn collectives<B: Backend>(ranks: &[(B, Box<dyn Communicator<B>>)], n: usize) {
    std::thread::scope(|scope| {
        for (dev, comm) in ranks {
            scope.spawn(move || {
                let s = dev.default_stream();
                let p = dev.malloc(256).expect("malloc");
                dev.memset_zero(p, 256, &s).expect("zero");
                for _ in 0..n {
                    comm.all_reduce(p, 1, DType::F32, ReduceOp::Sum, &s)
                        .expect("all_reduce");
                    dev.synchronize_stream(&s).expect("sync");
                }
                dev.free(p).expect("free");
            });
        }
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, how, n, what, ..] = args.as_slice() else {
        eprintln!("usage: boundary_cost (direct|plugin) N (query|memset|all_reduce) [PLUGIN.so]");
        std::process::exit(2);
    };
    let (how, n, what): (&str, usize, &str) = (how, n.parse().expect("N"), what);
    let timeout = Duration::from_secs(30);
    // Deterministic mode: ops run on the waiting host thread, no worker threads, so the
    // count does not include how often a worker happened to spin or park.
    let config = MockConfig {
        joint_timeout: timeout,
        deterministic_seed: Some(1),
        ..MockConfig::with_capacity(1 << 24)
    };
    if how == "direct" {
        if what == "all_reduce" {
            let ranks = open_mock_world(2, config).expect("world");
            let ranks: Vec<_> = ranks
                .into_iter()
                .map(|(d, c)| (d, Box::new(c) as Box<dyn Communicator<MockDevice>>))
                .collect();
            collectives(&ranks, n);
        } else {
            device_calls(&MockDevice::new(config).expect("mock"), n, what);
        }
    } else {
        let path = args.get(4).expect("the plugin's path");
        let plugin = Arc::new(load(path.as_ref()).expect("plugin"));
        let options = BackendOptions {
            memory_capacity: Some(1 << 24),
            deterministic_seed: Some(1),
            ..BackendOptions::default()
        };
        if what == "all_reduce" {
            let ranks = open_plugin_world(&plugin, 2, &options, timeout).expect("world");
            let ranks: Vec<_> = ranks
                .into_iter()
                .map(|(d, c)| (d, Box::new(c) as Box<dyn Communicator<PluginDevice>>))
                .collect();
            collectives(&ranks, n);
        } else {
            device_calls(
                &PluginDevice::open(&plugin, &options).expect("device"),
                n,
                what,
            );
        }
    }
}
