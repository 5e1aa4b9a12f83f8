//! The communicator contract kit on the Ascend FFI path (HCCL through the stand-in).

mod common;

use std::time::Duration;

use common::{serial, standin};
use memreuse_ascend::AscendDevice;
use memreuse_ascend::registry::open_world_with;
use memreuse_core::comm::Communicator;
use memreuse_core::testing::comm_contract::{CommContractOptions, Rank, check_communicator};
use memreuse_core::{BackendOptions, WorldOptions};

#[test]
fn hccl_through_the_stand_in_keeps_the_communicator_contract() {
    let _g = serial();
    let api = standin(&[]);
    let open = |n: usize, timeout: Duration| -> Result<Vec<Rank<AscendDevice>>, _> {
        let options = WorldOptions {
            world_size: n,
            backend: BackendOptions {
                memory_capacity: Some(64 << 20),
                ..BackendOptions::default()
            },
            timeout,
        };
        Ok(open_world_with(api, &options)?
            .into_iter()
            .map(|(d, c)| (d, Box::new(c) as Box<dyn Communicator<AscendDevice>>))
            .collect())
    };
    let options = CommContractOptions {
        world_size: 4,
        timeout: Duration::from_secs(1),
        grouping: true,
    };
    let report = check_communicator(&open, &options);
    println!("{report:#?}");
    report.assert_passed();
    assert_eq!(report.passed.len(), 9, "{report:?}");
}
