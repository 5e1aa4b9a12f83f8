//! The backend contract kit (`testing::contract`) on the manual backend, and the kit itself
//! catching backends that break the contract.

use std::sync::Arc;

use memreuse_core::Backend;
use memreuse_core::testing::ManualBackend;
use memreuse_core::testing::contract::{ContractOptions, check_backend};

fn manual_options() -> ContractOptions {
    ContractOptions {
        moves_data: false,
        oom_request: Some(2 << 30),
        checks_addresses: true,
        ..ContractOptions::default()
    }
}

#[test]
fn the_manual_backend_keeps_the_contract_it_can() {
    let backend = Arc::new(ManualBackend::new(1 << 30));
    let report = check_backend(&backend, &manual_options());
    report.assert_passed();
    for check in [
        "identity",
        "event_query_and_sync",
        "out_of_memory_is_typed",
        "unknown_address_refused",
        "virtual_memory",
        "caching_allocator_runs",
    ] {
        assert!(report.passed.contains(&check), "{check} ran: {report:?}");
    }
    assert!(
        report
            .skipped
            .iter()
            .any(|(c, why)| *c == "copies_round_trip" && *why == "moves_data = false")
    );
}

#[test]
fn the_manual_backend_with_virtual_memory_keeps_the_contract() {
    let backend = Arc::new(ManualBackend::new(1 << 30));
    assert!(backend.capabilities().virtual_memory);
    let report = check_backend(&backend, &manual_options());
    report.assert_passed();
    assert!(report.passed.contains(&"virtual_memory"), "{report:?}");
}

#[test]
fn a_device_that_never_runs_out_of_memory_is_reported_not_panicked() {
    // The manual device has 1 GiB; asking the kit to expect OOM at 512 MiB makes the
    // device break the (declared) rule: the report says so, with the check's name.
    let backend = Arc::new(ManualBackend::new(1 << 30));
    let options = ContractOptions {
        oom_request: Some(512 << 20),
        ..manual_options()
    };
    let report = check_backend(&backend, &options);
    assert_eq!(report.violations.len(), 1, "{report:?}");
    let v = &report.violations[0];
    assert_eq!(v.check, "out_of_memory_is_typed");
    assert!(v.what.contains("succeeded; expected OutOfMemory"), "{v}");
    let panic = std::panic::catch_unwind(|| report.assert_passed()).unwrap_err();
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("out_of_memory_is_typed"), "{msg}");
    // Nothing leaked on the device after the failed check.
    assert_eq!(backend.raw_bytes_in_use(), 0);
}

#[test]
fn a_backend_without_virtual_memory_refuses_every_vm_call_naming_itself() {
    use memreuse_core::{AnyBackend, Backend, BackendError, DevicePtr, PhysicalHandle};
    let manual = ManualBackend::new(1 << 30).without_virtual_memory();
    assert!(!manual.capabilities().virtual_memory);
    // Through the type-erased handle too: the conformance runner opens backends by name.
    let b = AnyBackend::new(manual);
    let results = [
        ("vm_granularity", b.vm_granularity().map(|_| ())),
        ("vm_reserve", b.vm_reserve(1 << 21).map(|_| ())),
        ("vm_release", b.vm_release(DevicePtr(1 << 21))),
        (
            "vm_create_physical",
            b.vm_create_physical(1 << 21).map(|_| ()),
        ),
        (
            "vm_release_physical",
            b.vm_release_physical(PhysicalHandle(1)),
        ),
        ("vm_map", b.vm_map(DevicePtr(1 << 21), PhysicalHandle(1))),
        ("vm_unmap", b.vm_unmap(DevicePtr(1 << 21), 1 << 21)),
    ];
    for (name, r) in results {
        match r {
            Err(BackendError::Unsupported {
                backend,
                call,
                reason,
            }) => {
                assert_eq!(call, name);
                assert_eq!(backend, b.name());
                assert!(reason.contains("virtual_memory"), "{reason}");
            }
            other => panic!("{name}: {other:?}, expected Unsupported"),
        }
    }
}
