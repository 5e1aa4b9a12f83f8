//! The mock through the plugin ABI behaves as the mock linked directly: the same contract
//! kit results, the same process-group outcome in every mode, the same race reports.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use memreuse_core::testing::comm_contract::{CommContractOptions, Rank, check_communicator};
use memreuse_core::testing::contract::{ContractOptions, check_backend};
use memreuse_core::{
    AllocatorConfig, Backend, BackendError, BackendOptions, CachingAllocator, Communicator,
    ProcessGroup, ReduceOp, ReuseMode,
};
use memreuse_mock::{MockConfig, MockDevice, open_mock_world};
use memreuse_plugin::{Plugin, PluginDevice, load, open_plugin_world};

/// The cdylib cargo built next to this test (target/<profile>/deps).
fn plugin_path() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("deps dir");
    for dir in [deps, deps.parent().expect("profile dir")] {
        let p = dir.join("libmemreuse_mock_plugin.so");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "libmemreuse_mock_plugin.so not found next to {}",
        exe.display()
    );
}

fn plugin() -> Arc<Plugin> {
    Arc::new(load(&plugin_path()).expect("the mock plugin loads"))
}

const CAPACITY: u64 = 64 << 20;

fn mock_ranks(n: usize, timeout: Duration) -> Vec<Rank<MockDevice>> {
    let config = MockConfig {
        joint_timeout: timeout,
        ..MockConfig::with_capacity(CAPACITY)
    };
    open_mock_world(n, config)
        .expect("mock world")
        .into_iter()
        .map(|(d, c)| (d, Box::new(c) as Box<dyn Communicator<MockDevice>>))
        .collect()
}

fn plugin_ranks(p: &Arc<Plugin>, n: usize, timeout: Duration) -> Vec<Rank<PluginDevice>> {
    let options = BackendOptions {
        memory_capacity: Some(CAPACITY),
        ..BackendOptions::default()
    };
    open_plugin_world(p, n, &options, timeout)
        .expect("plugin world")
        .into_iter()
        .map(|(d, c)| (d, Box::new(c) as Box<dyn Communicator<PluginDevice>>))
        .collect()
}

/// A small training-like step per rank: all_reduce, all_gather, a side stream with
/// record_stream, frees and reuse. Returns what every rank saw, as text.
fn program<B: Backend + Clone>(ranks: Vec<Rank<B>>, mode: ReuseMode) -> Vec<String> {
    std::thread::scope(|scope| {
        let threads: Vec<_> = ranks
            .into_iter()
            .map(|(device, comm)| {
                scope.spawn(move || {
                    let allocator =
                        CachingAllocator::new(Arc::new(device.clone()), AllocatorConfig::default());
                    let pg = ProcessGroup::builder(Arc::clone(&allocator), comm)
                        .mode(mode)
                        .build()
                        .expect("group");
                    let current = device.default_stream();
                    let side = device.create_stream().expect("side stream");
                    let mut seen = Vec::new();
                    for step in 0..4usize {
                        let n = 256 << step;
                        let t = allocator
                            .allocate(4 * n as u64, &current)
                            .expect("allocate");
                        let v = (pg.rank() + step) as f32;
                        let bytes: Vec<u8> =
                            (0..n).flat_map(|i| (v + i as f32).to_le_bytes()).collect();
                        device
                            .copy_host_to_device(t.ptr(), &bytes, &current)
                            .expect("upload");
                        pg.all_reduce(&t, ReduceOp::Sum, &current, true)
                            .expect("all_reduce")
                            .wait(&current)
                            .expect("wait");
                        let out = allocator
                            .allocate(4 * (n * pg.size()) as u64, &side)
                            .expect("out");
                        allocator.record_stream(&t, &side);
                        device.synchronize_device().expect("sync");
                        pg.all_gather(&t, &out, &current, false)
                            .expect("all_gather");
                        device.synchronize_device().expect("sync");
                        let mut back = vec![0u8; 4 * n * pg.size()];
                        device
                            .copy_device_to_host(&mut back, out.ptr(), &current)
                            .expect("download");
                        let sum: f64 = back
                            .chunks_exact(4)
                            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                            .sum();
                        seen.push(format!("step {step}: sum {sum}"));
                    }
                    device.synchronize_device().expect("sync");
                    allocator.process_events().expect("events");
                    let s = allocator.stats();
                    seen.push(format!(
                        "device allocs {} frees {} record_stream {} works {}",
                        s.num_device_alloc,
                        s.num_device_free,
                        s.record_stream_calls,
                        pg.stats().works_issued
                    ));
                    seen.join("; ")
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("rank"))
            .collect()
    })
}

#[test]
fn a_process_group_run_is_the_same_through_the_plugin_in_every_mode() {
    let p = plugin();
    for mode in ReuseMode::ALL {
        let timeout = Duration::from_secs(10);
        let direct = program(mock_ranks(4, timeout), mode);
        let through = program(plugin_ranks(&p, 4, timeout), mode);
        assert_eq!(direct, through, "mode {mode}");
    }
}

#[test]
fn the_contract_kits_give_the_same_reports() {
    let p = plugin();
    let direct = check_backend(
        &Arc::new(MockDevice::new(MockConfig::with_capacity(CAPACITY)).expect("mock")),
        &ContractOptions::default(),
    );
    let options = BackendOptions {
        memory_capacity: Some(CAPACITY),
        ..BackendOptions::default()
    };
    let through = check_backend(
        &Arc::new(PluginDevice::open(&p, &options).expect("plugin device")),
        &ContractOptions::default(),
    );
    through.assert_passed();
    assert_eq!(direct.passed, through.passed);
    assert_eq!(direct.skipped, through.skipped);

    let comm_options = CommContractOptions {
        timeout: Duration::from_millis(500),
        ..CommContractOptions::default()
    };
    let open_direct = |n, t| -> Result<_, BackendError> { Ok(mock_ranks(n, t)) };
    let open_plugin = |n, t| -> Result<_, BackendError> { Ok(plugin_ranks(&p, n, t)) };
    let direct = check_communicator(&open_direct, &comm_options);
    let through = check_communicator(&open_plugin, &comm_options);
    through.assert_passed();
    assert_eq!(direct.passed, through.passed);
}

/// Writes on one stream, reads on another with no event between: the mock's detector
/// reports it; through the plugin the same report arrives, field for field.
fn racy<B: Backend>(device: &B) -> Vec<String> {
    let a = device.default_stream();
    let b = device.create_stream().expect("stream");
    let x = device.malloc(4096).expect("x");
    let y = device.malloc(4096).expect("y");
    device.set_op_label("the racy pair");
    device.memset_zero(x, 4096, &a).expect("write on a");
    device
        .copy_device_to_device(y, x, 4096, &b)
        .expect("read on b");
    device.synchronize_device().expect("sync");
    let races = device.race_reports().expect("a native detector");
    device.free(x).expect("free");
    device.free(y).expect("free");
    races.iter().map(ToString::to_string).collect()
}

#[test]
fn races_cross_the_boundary_unchanged() {
    let p = plugin();
    let direct = racy(&MockDevice::new(MockConfig::with_capacity(CAPACITY)).expect("mock"));
    let through = racy(
        &PluginDevice::open(
            &p,
            &BackendOptions {
                memory_capacity: Some(CAPACITY),
                ..BackendOptions::default()
            },
        )
        .expect("plugin device"),
    );
    assert!(!direct.is_empty(), "the mock reports the race");
    assert_eq!(direct, through);
    assert!(
        PluginDevice::open(&p, &BackendOptions::default())
            .expect("device")
            .capabilities()
            .native_race_detection
    );
}

#[test]
fn switching_the_native_detector_off_crosses_too() {
    let p = plugin();
    let dev = PluginDevice::open(
        &p,
        &BackendOptions {
            disable_native_race_detection: true,
            ..BackendOptions::default()
        },
    )
    .expect("device");
    let direct = MockDevice::new(MockConfig {
        race_detection: false,
        ..MockConfig::default()
    })
    .expect("mock");
    assert_eq!(dev.capabilities(), direct.capabilities());
    assert_eq!(dev.race_reports(), direct.race_reports());
}
