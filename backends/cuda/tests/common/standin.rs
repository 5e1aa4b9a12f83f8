//! The child-process harness of `tests/standin.rs`: an install directory holding
//! `libcuda.so`, `libcuda.so.1`, `libnccl.so` and `libnccl.so.2` (links to the stand-in as
//! built, or to a copy with one export renamed), a child run of the test with it on
//! `LD_LIBRARY_PATH` (the loader reads the variable once, at process start), and typed
//! wrappers of the stand-in's `memreuse_standin_*` hooks.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use memreuse_core::store::LaunchEnv;
use memreuse_cuda::{device_count, open_rank};

const CHILD: &str = "MEMREUSE_CUDA_STANDIN_CHILD";
const STANDIN_FILE: &str = "libmemreuse_cuda_standin.so";

/// The built stand-in next to this test binary (`deps/`, where cargo builds it as a
/// dev-dependency), if any.
fn standin_so() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .map(|d| d.join(STANDIN_FILE))
        .find(|p| p.exists())
}

/// Which library the install directory holds.
pub enum Install {
    /// The stand-in as built.
    Default,
    /// A copy in which the exported name `from` is renamed `to` (same length).
    Renamed(&'static str, &'static str),
}

fn install_dir(test: &str, install: &Install) -> Option<PathBuf> {
    let so = standin_so()?;
    let dir = std::env::temp_dir().join(format!(
        "memreuse-cuda-standin-{test}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let lib = match install {
        Install::Default => so,
        Install::Renamed(from, to) => {
            assert_eq!(from.len(), to.len());
            let mut bytes = std::fs::read(&so).expect("read the stand-in");
            let (from, to) = (format!("{from}\0"), format!("{to}\0"));
            let mut n = 0;
            let mut i = 0;
            while let Some(at) = bytes[i..]
                .windows(from.len())
                .position(|w| w == from.as_bytes())
            {
                bytes[i + at..i + at + to.len()].copy_from_slice(to.as_bytes());
                i += at + to.len();
                n += 1;
            }
            assert!(n > 0, "{from} not found in the stand-in");
            let copy = dir.join("libmemreuse_cuda_standin_renamed.so");
            std::fs::write(&copy, bytes).expect("write the copy");
            copy
        }
    };
    for name in ["libcuda.so", "libcuda.so.1", "libnccl.so", "libnccl.so.2"] {
        std::os::unix::fs::symlink(&lib, dir.join(name)).expect("symlink");
    }
    Some(dir)
}

/// In the parent: runs `test` in a child with the install on `LD_LIBRARY_PATH` and checks
/// it passed; returns true (the caller returns). In the child: returns false (the caller
/// runs the body).
pub fn parent(test: &str, install: &Install, env: &[(&str, &str)]) -> bool {
    if std::env::var(CHILD).as_deref() == Ok(test) {
        return false;
    }
    let Some(dir) = install_dir(test, install) else {
        println!("skipped: {STANDIN_FILE} is not built next to this test binary");
        return true;
    };
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        .env("LD_LIBRARY_PATH", &dir)
        .env("MEMREUSE_REQUIRE_DEVICE", "1")
        .envs(env.iter().copied())
        .output()
        .expect("run the child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{test} in the child failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "{test} did not run in the child:\n{text}"
    );
    true
}

/// The stand-in hook `name`, looked up where cudarc loaded the driver.
pub fn hook<F: Copy>(name: &str) -> F {
    // SAFETY: the stand-in is loaded (a device was counted first); `F` is the hook's type.
    unsafe {
        *memreuse_cuda::cudarc::driver::sys::culib()
            .get::<F>(name.as_bytes())
            .expect("stand-in hook")
    }
}

/// `memreuse_standin_configure(devices, capacity, deterministic, seed, timeout_ms)`.
pub fn configure(devices: u32, timeout_ms: u64) {
    device_count().expect("the stand-in loads");
    let f: unsafe extern "C" fn(u32, u64, i32, u64, u64) -> u32 =
        hook("memreuse_standin_configure");
    // SAFETY: plain integers; no handle is in use.
    assert_eq!(unsafe { f(devices, 1 << 30, 0, 0, timeout_ms) }, 0);
}

/// `memreuse_standin_inject_call_failure(name, nth, code)`: the `nth` next call of `name`
/// answers `code`.
pub fn inject_call_failure(name: &std::ffi::CStr, nth: u64, code: i64) {
    let f: unsafe extern "C" fn(*const std::ffi::c_char, u64, i64) -> u32 =
        hook("memreuse_standin_inject_call_failure");
    // SAFETY: a NUL-terminated name and plain integers.
    assert_eq!(unsafe { f(name.as_ptr(), nth, code) }, 0);
}

/// `memreuse_standin_pending_failures()` and `memreuse_standin_live_allocations()`.
pub fn pending_and_live() -> (u64, u64) {
    let pending: unsafe extern "C" fn() -> u64 = hook("memreuse_standin_pending_failures");
    let live: unsafe extern "C" fn() -> u64 = hook("memreuse_standin_live_allocations");
    // SAFETY: no arguments.
    unsafe { (pending(), live()) }
}

/// `memreuse_standin_calls(name)`: how often the stand-in's export `name` was called.
pub fn calls(name: &std::ffi::CStr) -> u64 {
    let f: unsafe extern "C" fn(*const std::ffi::c_char) -> u64 = hook("memreuse_standin_calls");
    // SAFETY: a NUL-terminated name.
    unsafe { f(name.as_ptr()) }
}

/// Opens a one-rank world through `open_rank` (torchrun's variables, the TCP store), runs
/// a collective and closes it.
pub fn launch_one_rank() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let vars = [
        ("RANK", "0".to_owned()),
        ("WORLD_SIZE", "1".to_owned()),
        ("LOCAL_RANK", "0".to_owned()),
        ("MASTER_ADDR", "127.0.0.1".to_owned()),
        ("MASTER_PORT", port.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let env = LaunchEnv::from_map(&vars).expect("variables");
    let rank = open_rank(env, Duration::from_secs(20)).expect("launch");
    assert_eq!(rank.endpoint.communicator.size(), 1);
    drop(rank);
}
