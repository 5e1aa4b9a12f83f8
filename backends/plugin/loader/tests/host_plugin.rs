//! The reference C plugin through the loader passes the device and communicator contract
//! kits, and runs a process group in every reuse mode.

mod common;

use std::sync::Arc;
use std::time::Duration;

use memreuse_core::testing::comm_contract::{CommContractOptions, Rank, check_communicator};
use memreuse_core::testing::contract::{ContractOptions, check_backend};
use memreuse_core::{
    AllocatorConfig, Backend, BackendError, BackendOptions, CachingAllocator, Communicator,
    ProcessGroup, ReduceOp, ReuseMode,
};
use memreuse_plugin::{Plugin, PluginDevice, load, open_plugin_world};

fn plugin() -> Arc<Plugin> {
    Arc::new(load(&common::host_plugin()).expect("the reference plugin loads"))
}

#[test]
fn the_table_is_read_with_its_name_and_version() {
    let p = plugin();
    assert_eq!(p.name, "host");
    assert_eq!(p.version, memreuse_plugin::HOST_ABI);
    assert!(p.summary.contains("reference C plugin"), "{}", p.summary);
}

#[test]
fn the_device_contract_holds_through_the_loader() {
    let p = plugin();
    let options = BackendOptions {
        memory_capacity: Some(1 << 30),
        ..BackendOptions::default()
    };
    let device = Arc::new(PluginDevice::open(&p, &options).expect("device 0 opens"));
    let report = check_backend(
        &device,
        &ContractOptions {
            checks_addresses: true,
            ..ContractOptions::default()
        },
    );
    report.assert_passed();
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
}

#[test]
fn the_communicator_contract_holds_through_the_loader() {
    let p = plugin();
    let open = |n: usize, timeout: Duration| -> Result<Vec<Rank<PluginDevice>>, BackendError> {
        Ok(
            open_plugin_world(&p, n, &BackendOptions::default(), timeout)?
                .into_iter()
                .map(|(d, c)| (d, Box::new(c) as Box<dyn Communicator<PluginDevice>>))
                .collect(),
        )
    };
    let report = check_communicator(
        &open,
        &CommContractOptions {
            timeout: Duration::from_millis(500),
            ..CommContractOptions::default()
        },
    );
    report.assert_passed();
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
}

#[test]
fn a_process_group_all_reduces_in_every_mode() {
    let p = plugin();
    for mode in ReuseMode::ALL {
        let ranks = open_plugin_world(&p, 2, &BackendOptions::default(), Duration::from_secs(5))
            .expect("a world of 2 opens");
        let sums: Vec<Vec<u8>> = std::thread::scope(|scope| {
            let threads: Vec<_> = ranks
                .into_iter()
                .map(|(device, comm)| {
                    scope.spawn(move || {
                        let allocator = CachingAllocator::new(
                            Arc::new(device.clone()),
                            AllocatorConfig::default(),
                        );
                        let pg = ProcessGroup::builder(Arc::clone(&allocator), Box::new(comm))
                            .mode(mode)
                            .build()
                            .expect("the group builds");
                        let current = device.default_stream();
                        let t = allocator.allocate(16, &current).expect("allocate");
                        let rank = pg.rank() as f32 + 1.0;
                        let bytes: Vec<u8> =
                            [rank; 4].iter().flat_map(|v| v.to_le_bytes()).collect();
                        device
                            .copy_host_to_device(t.ptr(), &bytes, &current)
                            .expect("upload");
                        pg.all_reduce(&t, ReduceOp::Sum, &current, true)
                            .expect("enqueue")
                            .wait(&current)
                            .expect("wait");
                        let mut out = vec![0u8; 16];
                        device
                            .copy_device_to_host(&mut out, t.ptr(), &current)
                            .expect("download");
                        out
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("rank thread"))
                .collect()
        });
        let three: Vec<u8> = [3.0f32; 4].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(sums, vec![three.clone(), three], "mode {mode}");
    }
}
