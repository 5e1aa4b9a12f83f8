//! What must hold on every machine, CUDA or not: no panic, typed `Unavailable` errors when
//! the driver (or NCCL) is missing, `cuda` registered by name. These run in CI (no GPU).

use std::collections::HashMap;
use std::time::Duration;

use memreuse_core::store::LaunchEnv;
use memreuse_core::{BackendError, BackendOptions, OpenError, WorldOptions};
use memreuse_cuda::{CudaDevice, LaunchError, device_count, open_cuda_world, open_rank};

fn is_unavailable(e: &BackendError) -> bool {
    matches!(e, BackendError::Unavailable { backend, .. } if backend == "cuda")
}

#[test]
fn device_count_never_panics_and_is_unavailable_without_a_driver() {
    match device_count() {
        Ok(n) => println!("CUDA driver present: {n} device(s)"),
        Err(e) => {
            assert!(is_unavailable(&e), "{e:?}");
            let text = e.to_string();
            assert!(text.contains("backend `cuda` unavailable"), "{text}");
            assert!(
                text.contains("libcuda") && text.contains("LD_LIBRARY_PATH"),
                "{text}"
            );
        }
    }
}

#[test]
fn opening_a_device_that_is_not_there_is_unavailable() {
    let count = device_count().unwrap_or(0);
    let e = CudaDevice::open(count).expect_err("no such device");
    assert!(is_unavailable(&e), "{e:?}");
}

#[test]
fn the_registry_knows_cuda_and_reports_it_unavailable_without_a_driver() {
    let reg = memreuse_core::find_backend("cuda").expect("cuda is registered");
    assert!(memreuse_core::find_world("cuda").is_some());
    let Err(e) = (reg.device_count)() else {
        println!("skipped: a CUDA driver is present");
        return;
    };
    assert!(is_unavailable(&e), "{e:?}");
    match memreuse_core::open_backend("cuda", &BackendOptions::default()) {
        Err(OpenError::Backend(e)) => assert!(is_unavailable(&e), "{e:?}"),
        Err(other) => panic!("expected Unavailable, got {other:?}"),
        Ok(b) => panic!("opened {b:?} without a driver"),
    }
}

#[test]
fn worlds_and_launches_are_unavailable_without_a_driver() {
    if device_count().is_ok() {
        println!("skipped: a CUDA driver is present");
        return;
    }
    assert!(is_unavailable(&open_cuda_world(2).expect_err("no driver")));
    let world = memreuse_core::find_world("cuda").expect("registered");
    let options = WorldOptions {
        world_size: 2,
        backend: BackendOptions::default(),
        timeout: Duration::from_secs(1),
    };
    match (world.open_world)(&options) {
        Err(e) => assert!(is_unavailable(&e), "{e:?}"),
        Ok(_) => panic!("opened a world without a driver"),
    }
    let vars: HashMap<String, String> = [
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("LOCAL_RANK", "0"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let env = LaunchEnv::from_map(&vars).expect("valid variables");
    match open_rank(env, Duration::from_millis(200)) {
        Err(LaunchError::Backend(e)) => assert!(is_unavailable(&e), "{e:?}"),
        Err(other) => panic!("expected Unavailable, got {other:?}"),
        Ok(_) => panic!("joined a world without a driver"),
    }
}
