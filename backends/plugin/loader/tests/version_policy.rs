//! The version policy and bad input, on plugins built from C in the test: variants of the
//! reference plugin (an older minor, a newer minor, a wrong major, a missing required
//! entry, a success with a NULL handle, garbage sizes) and files that are no plugin at all.

mod common;

use std::sync::Arc;

use memreuse_core::{Backend, BackendError, BackendOptions};
use memreuse_plugin::{AbiVersion, HOST_ABI, PluginDevice, PluginError, load};

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temp dir")
}

#[test]
fn an_older_minor_loads_and_its_missing_tail_reads_as_absent() {
    let d = dir();
    let so = common::variant(
        d.path(),
        "older",
        "memreuse_backend_v1",
        "t.abi_minor = 0; t.struct_size = MR_API_SIZE_V1_0; t.extensions = (void *)1;",
    );
    let p = Arc::new(load(&so).expect("an ABI 1.0 plugin loads on a 1.1 host"));
    assert_eq!(p.version, AbiVersion { major: 1, minor: 0 });
    let dev = PluginDevice::open(&p, &BackendOptions::default()).expect("opens");
    // The 1.1 tail (race entries) is past its struct_size: read as NULL, not as garbage.
    assert_eq!(dev.race_reports(), None);
    let ptr = dev.malloc(256).expect("malloc works");
    dev.free(ptr).expect("free works");
}

#[test]
fn a_newer_minor_loads_and_its_tail_is_ignored() {
    let d = dir();
    let so = common::variant(
        d.path(),
        "newer",
        "memreuse_backend_v1",
        "t.abi_minor = 9; t.struct_size = sizeof(struct Bigger); big.future[0] = (void *)1;",
    );
    let p = Arc::new(load(&so).expect("a 1.9 plugin loads on a 1.1 host"));
    assert_eq!(p.version, AbiVersion { major: 1, minor: 9 });
    let dev = PluginDevice::open(&p, &BackendOptions::default()).expect("opens");
    dev.synchronize_device().expect("works");
}

#[test]
fn a_wrong_major_is_a_typed_error_naming_both_versions() {
    let d = dir();
    let so = common::variant(
        d.path(),
        "major2",
        "memreuse_backend_v1",
        "t.abi_major = 2;",
    );
    let err = load(&so).expect_err("major 2 is refused");
    match &err {
        PluginError::WrongMajor {
            path, plugin, host, ..
        } => {
            assert_eq!(path, &so);
            assert_eq!(plugin.major, 2);
            assert_eq!(*host, HOST_ABI);
        }
        other => panic!("expected WrongMajor, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("ABI 2.1") && text.contains("host's ABI 1.1"),
        "{text}"
    );
}

#[test]
fn a_library_exporting_only_a_newer_major_entry_says_so() {
    let d = dir();
    let so = common::variant(
        d.path(),
        "v2only",
        "memreuse_backend_v2",
        "t.abi_major = 2;",
    );
    let err = load(&so).expect_err("no v1 entry");
    assert!(matches!(err, PluginError::WrongMajor { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("only memreuse_backend_v2 is exported"),
        "{err}"
    );
}

#[test]
fn a_missing_required_entry_is_named() {
    let d = dir();
    let so = common::variant(
        d.path(),
        "nomalloc",
        "memreuse_backend_v1",
        "t.malloc = NULL;",
    );
    let err = load(&so).expect_err("malloc is required");
    assert_eq!(
        err,
        PluginError::MissingEntry {
            path: so.clone(),
            plugin: HOST_ABI,
            host: HOST_ABI,
            field: "malloc",
        }
    );
    let so = common::variant(d.path(), "nosend", "memreuse_backend_v1", "t.send = NULL;");
    let err = load(&so).expect_err("a plugin with communicators needs send");
    assert!(
        matches!(err, PluginError::MissingEntry { field: "send", .. }),
        "{err:?}"
    );
}

#[test]
fn a_device_only_plugin_needs_no_communicator_entries() {
    let d = dir();
    let so = common::variant(
        d.path(),
        "deviceonly",
        "memreuse_backend_v1",
        "t.world_open = NULL; t.send = NULL; t.all_reduce = NULL;",
    );
    let p = Arc::new(load(&so).expect("device-only plugins load"));
    let err = memreuse_plugin::open_plugin_world(
        &p,
        2,
        &BackendOptions::default(),
        std::time::Duration::from_secs(1),
    )
    .err()
    .expect("no world");
    assert!(matches!(err, BackendError::Unavailable { .. }), "{err:?}");
}

#[test]
fn a_table_too_small_for_the_required_entries_names_the_field() {
    let d = dir();
    let so = common::variant(
        d.path(),
        "small",
        "memreuse_backend_v1",
        "t.struct_size = MR_SIZE_UPTO(MrBackendApi, device_open);",
    );
    let err = load(&so).expect_err("too small");
    assert!(
        matches!(
            err,
            PluginError::TooSmall {
                field: "device_close",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn garbage_sizes_and_null_tables_are_refused() {
    let d = dir();
    let so = common::variant(
        d.path(),
        "tiny",
        "memreuse_backend_v1",
        "t.struct_size = 3;",
    );
    let err = load(&so).expect_err("3 bytes");
    assert!(
        matches!(err, PluginError::BadSize { struct_size: 3, .. }),
        "{err:?}"
    );
    let so = common::variant(
        d.path(),
        "huge",
        "memreuse_backend_v1",
        "t.struct_size = (size_t)-1;",
    );
    assert!(matches!(load(&so), Err(PluginError::BadSize { .. })));
    let so = common::compile(
        d.path(),
        "nulltable",
        "#include \"memreuse_backend.h\"\nMR_EXPORT const MrBackendApi *memreuse_backend_v1(void) { return NULL; }\n",
    );
    assert!(matches!(load(&so), Err(PluginError::NullTable { .. })));
}

#[test]
fn success_with_a_null_handle_is_a_typed_error_naming_the_field() {
    let d = dir();
    let source = "#define memreuse_backend_v1 mr_reference_backend_v1\n\
        #include \"host.c\"\n\
        #undef memreuse_backend_v1\n\
        static MrStatus null_open(const MrOpenOptions *o, MrDevice **d) { (void)o; *d = NULL; return MR_OK; }\n\
        static MrBackendApi t;\n\
        MR_EXPORT const MrBackendApi *memreuse_backend_v1(void);\n\
        MR_EXPORT const MrBackendApi *memreuse_backend_v1(void) {\n\
            t = *mr_reference_backend_v1(); t.device_open = null_open; return &t; }\n";
    let so = common::compile(d.path(), "nullhandle", source);
    let p = Arc::new(load(&so).expect("loads: the table is fine"));
    let err = PluginDevice::open(&p, &BackendOptions::default()).expect_err("NULL device");
    let text = err.to_string();
    assert!(
        text.contains("device_open") && text.contains("NULL handle") && text.contains("nullhandle"),
        "{text}"
    );
}

#[test]
fn files_that_are_no_plugin_are_typed_errors_naming_the_file() {
    let d = dir();
    let missing = d.path().join("absent.so");
    assert!(matches!(load(&missing), Err(PluginError::Open { .. })));
    let text = d.path().join("notelf.so");
    std::fs::write(&text, "this is not a shared library\n").expect("write");
    let err = load(&text).expect_err("not ELF");
    assert!(matches!(err, PluginError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("notelf.so"), "{err}");
    let so = common::compile(
        d.path(),
        "nosymbol",
        "int memreuse_something_else(void);\nint memreuse_something_else(void) { return 1; }\n",
    );
    assert!(matches!(load(&so), Err(PluginError::NoEntry { .. })));
}

#[test]
fn a_registered_plugin_is_in_the_registry_with_its_world() {
    let p = Arc::new(load(&common::host_plugin()).expect("loads"));
    let info = memreuse_plugin::register_named("host-for-driver-test", &p.path).expect("registers");
    assert_eq!(info.backend, "host");
    let reg = memreuse_core::find_backend("host-for-driver-test").expect("in the registry");
    assert!(reg.summary.contains("ABI 1.1"), "{}", reg.summary);
    assert!(memreuse_core::find_world("host-for-driver-test").is_some());
    assert!((reg.device_count)().expect("counts") > 0);
}
