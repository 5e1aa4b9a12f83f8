//! Snapshot export: PyTorch's viewer rules on a snapshot with allocated, pending-free and
//! inactive blocks, and the OOM snapshot (by API and by `MEMREUSE_OOM_SNAPSHOT`).

mod observe_support;

use std::path::Path;
use std::sync::Arc;

use memreuse_core::Backend;
use memreuse_core::allocator::{
    AllocError, AllocatorConfig, BlockState, CachingAllocator, DEFAULT_TRACE_CAPACITY,
};
use memreuse_core::observe::{OOM_SNAPSHOT_ENV, ViewerSnapshot};
use memreuse_core::testing::{ManualBackend, ManualStream};
use observe_support::{check_pickles, temp_dir};

const MIB: u64 = 1 << 20;

type Alloc = Arc<CachingAllocator<ManualBackend>>;

fn traced(capacity: u64) -> (Arc<ManualBackend>, Alloc, ManualStream, ManualStream) {
    let backend = Arc::new(ManualBackend::new(capacity));
    let config = AllocatorConfig::default().with_trace_capacity(DEFAULT_TRACE_CAPACITY);
    let alloc = CachingAllocator::new(Arc::clone(&backend), config);
    let s0 = backend.default_stream();
    let s1 = backend.create_stream().unwrap();
    (backend, alloc, s0, s1)
}

/// Last action of each non-empty device trace, read back from the pickle in Rust.
fn last_actions(path: &Path) -> Vec<String> {
    use serde_pickle::{HashableValue, Value};
    let bytes = std::fs::read(path).unwrap();
    let v = serde_pickle::value_from_slice(&bytes, serde_pickle::DeOptions::new()).unwrap();
    let Value::Dict(top) = v else {
        panic!("not a dict")
    };
    let Some(Value::List(traces)) = top.get(&HashableValue::String("device_traces".into())) else {
        panic!("no device_traces")
    };
    traces
        .iter()
        .filter_map(|t| match t {
            Value::List(entries) => entries.last().map(|e| match e {
                Value::Dict(d) => match d.get(&HashableValue::String("action".into())) {
                    Some(Value::String(s)) => s.clone(),
                    other => format!("{other:?}"),
                },
                other => format!("{other:?}"),
            }),
            _ => None,
        })
        .collect()
}

#[test]
fn mid_run_snapshot_with_pending_frees_follows_the_viewer_rules() {
    let (backend, alloc, s0, s1) = traced(1 << 40);
    let small = alloc.allocate(1000, &s0).unwrap();
    let used_by_s1 = alloc.allocate(3000, &s0).unwrap();
    let freed_small = alloc.allocate(5000, &s0).unwrap();
    let large = alloc.allocate(30 * MIB, &s1).unwrap();
    let large_freed = alloc.allocate(3 * MIB, &s1).unwrap();
    let large_pending = alloc.allocate(4 * MIB, &s1).unwrap();
    backend.enqueue_work(&s1).unwrap();
    alloc.record_stream(&used_by_s1, &s1);
    drop(used_by_s1);
    backend.enqueue_work(&s0).unwrap();
    alloc.record_stream(&large_pending, &s0);
    drop(large_pending);
    drop(freed_small);
    drop(large_freed);

    let snap = alloc.snapshot();
    let pending = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActivePendingFree)
        .count();
    assert_eq!(pending, 2, "two pending-free blocks: {snap:#?}");
    let v = ViewerSnapshot::from_snapshot(0, &snap).unwrap();
    for seg in &v.segments {
        let mut addr = seg.address;
        for b in &seg.blocks {
            assert_eq!(b.address, addr, "blocks tile in address order");
            addr += b.size;
        }
        assert_eq!(addr, seg.address + seg.total_size);
    }
    assert_eq!(v.device_traces.len(), 1);
    assert!(
        v.device_traces[0]
            .iter()
            .any(|e| e.action == "free_requested")
    );

    let json: serde_json::Value = serde_json::from_str(&v.to_json().unwrap()).unwrap();
    let seg0 = &json["segments"][0];
    for key in [
        "device",
        "address",
        "total_size",
        "stream",
        "blocks",
        "segment_type",
    ] {
        assert!(seg0.get(key).is_some(), "segment key {key}");
    }
    assert!(json["device_traces"][0][0].get("category").is_none());

    let dir = temp_dir("snapshot");
    let path = dir.join("mid.pickle");
    v.write_pickle(&path).unwrap();
    let out = check_pickles(&[path], &["--require-pending"]);
    eprintln!("{out}");
    drop((small, large));
    backend.advance_all();
}

#[test]
fn a_device_with_segments_and_no_trace_gets_a_snapshot_entry() {
    let backend = Arc::new(ManualBackend::new(1 << 40));
    let untraced = AllocatorConfig::default().with_trace_capacity(0);
    let alloc = CachingAllocator::new(Arc::clone(&backend), untraced);
    let s0 = backend.default_stream();
    let _keep = alloc.allocate(4096, &s0).unwrap();
    let snap = alloc.snapshot();
    let v = ViewerSnapshot::from_snapshot(0, &snap).unwrap();
    assert_eq!(v.device_traces.len(), 1);
    assert_eq!(v.device_traces[0].len(), 1);
    assert_eq!(v.device_traces[0][0].action, "snapshot");
    let dir = temp_dir("notrace");
    let path = dir.join("s.pickle");
    v.write_pickle(&path).unwrap();
    check_pickles(&[path], &[]);
}

fn provoke_oom(alloc: &Alloc, s0: &ManualStream) -> AllocError {
    let _a = alloc.allocate(20 * MIB, s0).unwrap();
    let _b = alloc.allocate(100, s0).unwrap();
    alloc.allocate(200 * MIB, s0).unwrap_err()
}

#[test]
fn oom_snapshot_is_written_before_the_error_returns_and_ends_with_oom() {
    let (_backend, alloc, s0, _s1) = traced(64 * MIB);
    let dir = temp_dir("oom");
    alloc.set_oom_snapshot_path(Some(dir.join("oom-{device}.pickle")));
    let err = provoke_oom(&alloc, &s0);
    let file = dir.join("oom-0.pickle");
    let AllocError::OutOfMemory(oom) = &err else {
        panic!("{err}")
    };
    assert_eq!(oom.snapshot.as_deref(), Some(file.as_path()));
    let msg = err.to_string();
    assert!(msg.contains(&file.display().to_string()), "{msg}");
    assert!(msg.contains("outside memreuse"), "{msg}");
    eprintln!("{msg}");
    assert!(file.exists(), "written by the time allocate returned");
    assert_eq!(last_actions(&file), vec!["oom".to_owned()]);
    check_pickles(&[file], &["--last-action", "oom"]);
}

#[test]
fn an_unwritable_oom_snapshot_is_reported_in_the_error_and_nothing_else_changes() {
    let (_backend, alloc, s0, _s1) = traced(64 * MIB);
    let dir = temp_dir("oom-unwritable");
    // A directory that does not exist: the write fails.
    let file = dir.join("missing").join("oom.pickle");
    alloc.set_oom_snapshot_path(Some(file.clone()));
    let err = provoke_oom(&alloc, &s0);
    let AllocError::OutOfMemory(oom) = &err else {
        panic!("{err}")
    };
    assert_eq!(oom.snapshot, None);
    let (path, why) = oom.snapshot_error.clone().expect("the failure is reported");
    assert_eq!(path, file);
    assert!(!why.is_empty());
    let msg = err.to_string();
    assert!(
        msg.contains("could not be written to") && msg.contains(&file.display().to_string()),
        "{msg}"
    );
    assert!(!file.exists());
    // The allocator is still consistent and serves requests.
    let st = alloc.stats();
    assert_eq!(st.num_ooms, 1);
    assert_eq!(
        st.reserved_bytes.aggregate.current,
        st.allocated_bytes.aggregate.current + st.cached_free_bytes + st.pending_free_bytes
    );
    drop(alloc.allocate(1 << 20, &s0).expect("still serves"));
}

const CHILD: &str = "MEMREUSE_OBSERVE_TEST_CHILD";

#[test]
fn oom_snapshot_env_variable_in_a_child_process() {
    if std::env::var_os(CHILD).is_some() {
        // The child: the variable was set by the parent for this process only.
        let (_backend, alloc, s0, _s1) = traced(64 * MIB);
        assert!(
            alloc.oom_snapshot_path().is_some(),
            "read from the environment"
        );
        let msg = provoke_oom(&alloc, &s0).to_string();
        assert!(msg.contains("Memory snapshot written to"), "{msg}");
        return;
    }
    let dir = temp_dir("oomenv");
    let file = dir.join("env.pickle");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "oom_snapshot_env_variable_in_a_child_process",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env(OOM_SNAPSHOT_ENV, &file)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(file.exists(), "the child wrote {}", file.display());
    assert_eq!(last_actions(&file), vec!["oom".to_owned()]);
    check_pickles(&[file], &["--last-action", "oom"]);
}
