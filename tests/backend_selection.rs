//! Opening a backend by name: the mock is linked by default, known-but-absent backends
//! name their cargo feature, unknown names list what is available.

use memreuse::{Backend, BackendOptions, OpenError, open_backend, registered_backends};

#[test]
fn mock_is_registered_and_opens_by_name() {
    let names: Vec<_> = registered_backends().iter().map(|r| r.name).collect();
    assert!(names.contains(&"mock"), "registered: {names:?}");
    let b = open_backend(
        "mock",
        &BackendOptions {
            memory_capacity: Some(1 << 20),
            ..BackendOptions::default()
        },
    )
    .expect("mock opens");
    assert_eq!(b.name(), "mock");
    assert_eq!(b.memory_info().unwrap().total, 1 << 20);
}

#[test]
fn known_backend_not_compiled_in_names_the_feature() {
    match open_backend("ascend", &BackendOptions::default()) {
        Err(OpenError::NotCompiled {
            name,
            feature,
            available,
        }) => {
            assert_eq!(name, "ascend");
            assert_eq!(feature, "ascend");
            assert!(available.contains(&"mock".to_owned()));
        }
        Err(other) => panic!("expected NotCompiled, got {other}"),
        Ok(_) => panic!("ascend is not compiled into the default build"),
    }
}

#[test]
fn unknown_backend_lists_what_is_available() {
    let err = open_backend("vulkan-ish", &BackendOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, OpenError::Unknown { .. }), "{msg}");
    assert!(msg.contains("vulkan-ish") && msg.contains("mock"), "{msg}");
}
