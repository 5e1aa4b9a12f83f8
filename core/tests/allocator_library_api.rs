//! The configuration and snapshot surface a library program uses (issue 30 item 4):
//! `AllocatorConfig: FromStr`, the one call that reads the user's configuration from the
//! environment for a backend, a snapshot's `Display` summary, and the layering that keeps
//! the allocator below `observe`.

mod common;

use std::path::Path;
use std::process::Command;

use common::{MIB, setup_with};
use memreuse_core::AllocatorConfig;
use memreuse_core::allocator::ConfigError;

#[test]
fn allocator_config_parses_with_from_str() {
    let c: AllocatorConfig = "expandable_segments:True,max_split_size_mb:64"
        .parse()
        .unwrap();
    assert!(c.expandable_segments);
    assert_eq!(c.max_split_size, 64 * MIB);
    assert_eq!(
        c,
        AllocatorConfig::parse("expandable_segments:True,max_split_size_mb:64").unwrap()
    );
    let err = "bogus:1".parse::<AllocatorConfig>().unwrap_err();
    assert!(matches!(err, ConfigError::UnknownKey { .. }), "{err}");
}

const CHILD: &str = "MEMREUSE_LIBRARY_API_TEST_CHILD";

/// Runs this test binary's `name` in a child with `env` set (the parent's environment
/// stays untouched: setting variables in a threaded test process is unsound).
fn child(name: &str, env: &[(&str, &str)]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--test-threads=1"])
        .env(CHILD, "1");
    for v in [
        "MEMREUSE_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_NPU_ALLOC_CONF",
    ] {
        cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    assert!(cmd.status().unwrap().success(), "child {name} with {env:?}");
}

#[test]
fn from_env_for_backend_reads_the_users_variables_for_that_backend() {
    if std::env::var_os(CHILD).is_some() {
        let cuda = AllocatorConfig::from_env_for_backend("cuda").unwrap();
        let mock = AllocatorConfig::from_env_for_backend("mock").unwrap();
        let npu = AllocatorConfig::from_env_for_backend("ascend").unwrap();
        let want = std::env::var("EXPECT").unwrap();
        let got = format!(
            "{} {} {}",
            cuda.max_split_size >> 20,
            mock.max_split_size >> 20,
            npu.max_split_size >> 20
        );
        assert_eq!(got, want);
        return;
    }
    let name = "from_env_for_backend_reads_the_users_variables_for_that_backend";
    let unset = (u64::MAX >> 20).to_string();
    // PyTorch's CUDA variable applies to CUDA only.
    child(
        name,
        &[
            ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:30"),
            ("EXPECT", &format!("30 {unset} {unset}")),
        ],
    );
    // MEMREUSE_ALLOC_CONF wins over every PyTorch name, for every backend.
    child(
        name,
        &[
            ("MEMREUSE_ALLOC_CONF", "max_split_size_mb:40"),
            ("PYTORCH_ALLOC_CONF", "max_split_size_mb:50"),
            ("PYTORCH_NPU_ALLOC_CONF", "max_split_size_mb:60"),
            ("EXPECT", "40 40 40"),
        ],
    );
}

#[test]
fn a_snapshot_prints_a_summary() {
    let (backend, alloc, [s0, s1, _]) = setup_with(1 << 30, "");
    let a = alloc.allocate(12 * MIB, &s0).unwrap();
    let small = alloc.allocate(4096, &s0).unwrap();
    let p = alloc.allocate(3 * MIB, &s0).unwrap();
    alloc.record_stream(&p, &s1);
    backend.enqueue_work(&s1).unwrap();
    drop(p);
    let text = alloc.snapshot().to_string();
    assert_eq!(
        text,
        "snapshot: 3 segments, 34.00 MiB reserved (small pool 2.00 MiB, large pool 32.00 MiB)\n\
         \x20 allocated     12.00 MiB in 2 blocks (requested 12.00 MiB)\n\
         \x20 pending free  3.00 MiB in 1 block\n\
         \x20 free          19.00 MiB in 2 blocks, largest 17.00 MiB\n\
         \x20 trace         0 entries",
    );
    drop((a, small));
}

/// Every `crate::observe` path in the allocator's sources, outside comments.
fn observe_imports(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            observe_imports(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if code.contains("crate::observe") {
                    out.push(format!("{}:{}: {line}", path.display(), n + 1));
                }
            }
        }
    }
}

#[test]
fn the_allocator_never_imports_observe() {
    let mut found = Vec::new();
    observe_imports(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/allocator"),
        &mut found,
    );
    assert!(
        found.is_empty(),
        "observe is built on the allocator: {found:#?}"
    );
}

#[test]
fn the_readme_calls_compile_as_written() {
    use memreuse_core::observe::ViewerSnapshot;
    let (_b, alloc, [s0, _, _]) = setup_with(1 << 30, "");
    let config =
        AllocatorConfig::default().with_trace_capacity(memreuse_core::DEFAULT_TRACE_CAPACITY);
    assert_eq!(config.trace_capacity, 16384);
    let _t = alloc.allocate(MIB, &s0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A `&str`, a `String` or a `PathBuf` is a path, and the allocator gives the device.
    let file = dir.path().join("snap.pickle");
    ViewerSnapshot::from_allocator(&alloc)
        .unwrap()
        .write_pickle(file.to_str().unwrap())
        .unwrap();
    ViewerSnapshot::from_allocator(&alloc)
        .unwrap()
        .write_json(dir.path().join("snap.json"))
        .unwrap();
    assert!(file.exists());
}
