//! Raw memory: capacity, injected faults, range validation, data round trips.

mod common;

use memreuse_core::{Backend, BackendError, DevicePtr};
use memreuse_mock::{ALLOCATION_ALIGNMENT, FaultKind, MallocFault, MockConfig, MockDevice};

use common::{device, device_with, read};

#[test]
fn capacity_is_enforced_and_device_stays_usable() {
    let dev = device();
    let info = dev.memory_info().unwrap();
    assert_eq!((info.free, info.total), (1 << 20, 1 << 20));
    let a = dev.malloc(768 << 10).unwrap();
    let err = dev.malloc(512 << 10).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    assert_eq!(dev.memory_info().unwrap().free, 256 << 10);
    dev.free(a).unwrap();
    let b = dev.malloc(1 << 20).unwrap();
    assert_eq!(b.addr() % ALLOCATION_ALIGNMENT, 0);
    dev.free(b).unwrap();
    assert_eq!(dev.memory_info().unwrap().free, 1 << 20);
}

#[test]
fn nth_malloc_fails_with_the_chosen_error() {
    let dev = device_with(|c| {
        c.malloc_fault = Some(MallocFault {
            nth: 2,
            kind: FaultKind::OutOfMemory,
        });
    });
    let a = dev.malloc(1024).unwrap();
    let err = dev.malloc(1024).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    assert!(err.to_string().contains("injected"), "{err}");
    let b = dev.malloc(1024).unwrap();

    dev.inject_malloc_fault(MallocFault {
        nth: 1,
        kind: FaultKind::Injected,
    });
    let err = dev.malloc(1024).unwrap_err();
    assert!(matches!(err, BackendError::Injected { .. }), "{err}");
    let c = dev.malloc(1024).unwrap();
    for p in [a, b, c] {
        dev.free(p).unwrap();
    }
}

#[test]
fn invalid_pointers_and_ranges_are_typed_errors() {
    let dev = device();
    let s = dev.default_stream();
    let p = dev.malloc(256).unwrap();
    let invalid = |r: Result<(), BackendError>| {
        assert!(
            matches!(r, Err(BackendError::InvalidArgument { .. })),
            "expected InvalidArgument, got {r:?}"
        );
    };
    invalid(dev.memset_zero(p, 257, &s));
    invalid(dev.memset_zero(p.offset(255), 2, &s));
    invalid(dev.memset_zero(DevicePtr(p.addr() - 1), 1, &s));
    invalid(dev.memset_zero(DevicePtr(0), 1, &s));
    invalid(dev.memset_zero(DevicePtr(u64::MAX - 1), 16, &s));
    invalid(dev.copy_host_to_device(p.offset(200), &[0; 100], &s));
    let mut buf = [0u8; 300];
    invalid(dev.copy_device_to_host(&mut buf, p, &s));
    invalid(dev.copy_device_to_device(p.offset(10), p, 100, &s));
    invalid(dev.free(p.offset(8)));
    invalid(dev.free(DevicePtr(12345)));
    invalid(dev.malloc(0).map(|_| ()));
    // A handle from another device is refused too.
    let other = device();
    invalid(dev.memset_zero(p, 1, &other.default_stream()));
    let foreign = other.create_event().unwrap();
    assert!(dev.record_event(&foreign, &s).is_err());

    // Nothing above was enqueued or broke the device.
    dev.copy_host_to_device(p, &[7; 256], &s).unwrap();
    assert_eq!(read(&dev, p, 256, &s), vec![7; 256]);
    dev.free(p).unwrap();
    // Use after free.
    invalid(dev.memset_zero(p, 1, &s));
    invalid(dev.free(p));
    assert!(dev.race_reports().unwrap().is_empty());
}

#[test]
fn data_round_trips() {
    let dev = device();
    let s = dev.default_stream();
    let a = dev.malloc(1000).unwrap();
    let b = dev.malloc(1000).unwrap();
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
    dev.copy_host_to_device(a, &data, &s).unwrap();
    dev.copy_device_to_device(b, a, 1000, &s).unwrap();
    dev.memset_zero(b.offset(100), 50, &s).unwrap();
    // Same-allocation, non-overlapping copy.
    dev.copy_device_to_device(a.offset(500), a, 100, &s)
        .unwrap();
    let got_b = read(&dev, b, 1000, &s);
    let mut want_b = data.clone();
    want_b[100..150].fill(0);
    assert_eq!(got_b, want_b);
    let got_a = read(&dev, a, 1000, &s);
    let mut want_a = data.clone();
    want_a.copy_within(0..100, 500);
    assert_eq!(got_a, want_a);
    assert!(dev.race_reports().unwrap().is_empty());
}

#[test]
fn fresh_memory_is_not_zero() {
    let dev = device();
    let s = dev.default_stream();
    let p = dev.malloc(64).unwrap();
    assert!(read(&dev, p, 64, &s).iter().all(|&b| b != 0));
}

#[test]
fn unbacked_device_validates_but_moves_no_data() {
    let dev = MockDevice::new(MockConfig {
        capacity: 1 << 40,
        backing: false,
        ..MockConfig::default()
    })
    .unwrap();
    let s = dev.default_stream();
    let p = dev.malloc(1 << 36).unwrap();
    dev.memset_zero(p, 1 << 36, &s).unwrap();
    assert!(dev.memset_zero(p, (1 << 36) + 1, &s).is_err());
    let mut out = [9u8; 4];
    dev.copy_device_to_host(&mut out, p, &s).unwrap();
    assert_eq!(out, [9; 4], "no backing: the host buffer is left alone");
    dev.synchronize_device().unwrap();
    dev.free(p).unwrap();
}

#[test]
fn unbacked_device_still_delays() {
    let dev = MockDevice::new(MockConfig {
        backing: false,
        ..MockConfig::default()
    })
    .unwrap();
    let s = dev.default_stream();
    let t0 = std::time::Instant::now();
    dev.delay(50_000, &s).unwrap();
    dev.synchronize_stream(&s).unwrap();
    assert!(t0.elapsed() >= std::time::Duration::from_millis(50));
}
