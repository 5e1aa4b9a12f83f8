//! Finding the libraries: absent libraries, missing required symbols, missing optional
//! symbols (the fallback path really runs through the stand-in).

mod common;

use common::{calls, lib_dir, libc_path, load_dir, serial, standin, standin_so, temp_dir};
use memreuse_ascend::AscendDevice;
use memreuse_ascend::loader::{DEFAULT_CANN_LIB_DIR, LoadError, load_from};
use memreuse_core::{Backend, BackendError, find_backend};

#[test]
fn absent_libraries_are_a_typed_error_listing_every_path_tried() {
    let empty = temp_dir("empty");
    let missing = empty.join("nowhere");
    let err = load_from(&[Some(empty.clone()), Some(missing.clone())], &[]).unwrap_err();
    let LoadError::NotFound { tried } = &err else {
        panic!("expected NotFound, got {err:?}");
    };
    assert_eq!(tried.len(), 2, "{tried:?}");
    assert!(tried[0].starts_with(&empty.join("libascendcl.so").display().to_string()));
    assert!(tried[1].starts_with(&missing.join("libascendcl.so").display().to_string()));
    let shown = err.to_string();
    assert!(shown.contains("libascendcl.so + libhccl.so"), "{shown}");
}

#[test]
fn registration_without_libraries_is_unavailable_and_never_panics() {
    let reg = find_backend("ascend").expect("registered");
    // This binary never sets MEMREUSE_ASCEND_LIB_DIR: unless CANN is installed here, the
    // search fails and says where it looked.
    match (reg.device_count)() {
        Err(BackendError::Unavailable { backend, reason }) => {
            assert_eq!(backend, "ascend");
            assert!(reason.contains(DEFAULT_CANN_LIB_DIR), "{reason}");
            assert!(reason.contains("system search path"), "{reason}");
            let opened = (reg.open)(&memreuse_core::BackendOptions::default());
            assert!(matches!(opened, Err(BackendError::Unavailable { .. })));
            let world = memreuse_core::find_world("ascend").expect("world registered");
            let options = memreuse_core::WorldOptions {
                world_size: 2,
                backend: memreuse_core::BackendOptions::default(),
                timeout: std::time::Duration::from_secs(1),
            };
            assert!(matches!(
                (world.open_world)(&options),
                Err(BackendError::Unavailable { .. })
            ));
        }
        Ok(n) => eprintln!("Ascend libraries present on this machine ({n} devices): skipped"),
        Err(e) => panic!("expected Unavailable, got {e}"),
    }
}

#[test]
fn a_missing_required_symbol_is_named() {
    let so = standin_so();
    let libc = libc_path();
    let Err(err) = load_dir(&lib_dir(&libc, &so), &[]) else {
        panic!("libc as libascendcl.so must not load");
    };
    assert!(
        matches!(
            &err,
            LoadError::MissingSymbol {
                library: "libascendcl.so",
                symbol: "aclInit",
                ..
            }
        ),
        "{err:?}"
    );
    let Err(err) = load_dir(&lib_dir(&so, &libc), &[]) else {
        panic!("libc as libhccl.so must not load");
    };
    assert!(
        matches!(
            &err,
            LoadError::MissingSymbol {
                library: "libhccl.so",
                symbol: "HcclGetRootInfo",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("lacks required symbol `HcclGetRootInfo`")
    );
}

#[test]
fn optional_symbols_are_used_when_present_and_fall_back_when_absent() {
    let _g = serial();
    common::configure(2, 1 << 20, 0);
    let full = standin(&[]);
    assert!(full.aclrtMallocAlign32.is_some() && full.aclrtCreateEventExWithFlag.is_some());
    let dev = AscendDevice::open(full, 0).unwrap();
    let (align32, malloc) = (calls("aclrtMallocAlign32"), calls("aclrtMalloc"));
    let before = dev.memory_info().unwrap().free;
    let p = dev.malloc(1000).unwrap();
    // aclrtMallocAlign32 rounds to 32 bytes without padding.
    assert_eq!(before - dev.memory_info().unwrap().free, 1024);
    assert_eq!(
        (calls("aclrtMallocAlign32"), calls("aclrtMalloc")),
        (align32 + 1, malloc)
    );
    dev.free(p).unwrap();
    let ex = calls("aclrtCreateEventExWithFlag");
    drop(dev.create_event().unwrap());
    assert_eq!(calls("aclrtCreateEventExWithFlag"), ex + 1);

    let old = standin(&["aclrtMallocAlign32", "aclrtCreateEventExWithFlag"]);
    assert!(old.aclrtMallocAlign32.is_none() && old.aclrtCreateEventExWithFlag.is_none());
    let dev = AscendDevice::open(old, 1).unwrap();
    let (align32, malloc) = (calls("aclrtMallocAlign32"), calls("aclrtMalloc"));
    let before = dev.memory_info().unwrap().free;
    let p = dev.malloc(1000).unwrap();
    // aclrtMalloc rounds to 32 bytes and pads 32 more.
    assert_eq!(before - dev.memory_info().unwrap().free, 1024 + 32);
    assert_eq!(
        (calls("aclrtMallocAlign32"), calls("aclrtMalloc")),
        (align32, malloc + 1)
    );
    dev.free(p).unwrap();
    let plain = calls("aclrtCreateEventWithFlag");
    let e = dev.create_event().unwrap();
    assert_eq!(calls("aclrtCreateEventWithFlag"), plain + 1);
    // The backend still works end to end on the fallback path.
    let s = dev.create_stream().unwrap();
    let p = dev.malloc(64).unwrap();
    dev.copy_host_to_device(p, &[7u8; 64], &s).unwrap();
    dev.record_event(&e, &s).unwrap();
    dev.synchronize_event(&e).unwrap();
    assert!(dev.query_event(&e).unwrap());
    let mut out = [0u8; 64];
    dev.copy_device_to_host(&mut out, p, &s).unwrap();
    assert_eq!(out, [7u8; 64]);
    dev.free(p).unwrap();
}
