//! The mock is registered as backend `mock` and opens by name.

use memreuse_core::{Backend, BackendOptions, find_backend, open_backend};
use memreuse_mock::MockDevice;

#[test]
fn opens_by_name_with_options() {
    let reg = find_backend("mock").expect("registered");
    assert!((reg.device_count)().unwrap() >= 8);
    let dev = open_backend(
        "mock",
        &BackendOptions {
            device: 3,
            memory_capacity: Some(4096),
            deterministic_seed: Some(9),
            ..BackendOptions::default()
        },
    )
    .unwrap();
    assert_eq!(dev.name(), "mock");
    assert_eq!(dev.device_index(), 3);
    assert_eq!(dev.memory_info().unwrap().total, 4096);
    assert!(dev.malloc(8192).unwrap_err().is_out_of_memory());
    let mock = dev.downcast_ref::<MockDevice>().expect("a MockDevice");
    assert_eq!(mock.config().deterministic_seed, Some(9));
    // The erased layer works end to end.
    let s = dev.default_stream();
    let p = dev.malloc(16).unwrap();
    dev.copy_host_to_device(p, &[8; 16], &s).unwrap();
    let mut out = [0u8; 16];
    dev.copy_device_to_host(&mut out, p, &s).unwrap();
    assert_eq!(out, [8; 16]);
    assert_eq!(dev.race_reports(), Some(vec![]));
}
