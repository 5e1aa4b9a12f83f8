//! Test harness: places the stand-in cdylib under the names `libascendcl.so` and
//! `libhccl.so` in a temporary directory and loads it from there (never through the
//! process-wide search, so nothing here depends on `MEMREUSE_ASCEND_LIB_DIR`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memreuse_ascend::loader::{Api, LoadError, load_from};
use parking_lot::{Mutex, MutexGuard};

/// The stand-in file name cargo gives the cdylib.
pub const STANDIN_FILE: &str = "libmemreuse_ascend_standin.so";

/// Every test of a binary shares one stand-in instance (the loader maps the file once),
/// so tests that configure it run one at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
}

/// The built stand-in: in this test binary's `deps/` directory, where cargo builds it as a
/// dev-dependency of this crate (the copy one level up is refreshed only when the
/// stand-in itself is a selected package, so it can be stale), else one level up.
pub fn standin_so() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join(STANDIN_FILE);
        if p.exists() {
            return p;
        }
    }
    panic!(
        "{STANDIN_FILE} not found next to {}: run `cargo build -p memreuse-ascend-standin` \
         (or `cargo test --workspace`, which builds it) first",
        exe.display()
    );
}

/// A fresh temporary directory.
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "memreuse-ascend-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A directory whose `libascendcl.so` and `libhccl.so` are symlinks to `acl` and `hccl`.
pub fn lib_dir(acl: &Path, hccl: &Path) -> PathBuf {
    let d = temp_dir("libs");
    std::os::unix::fs::symlink(acl, d.join("libascendcl.so")).expect("symlink");
    std::os::unix::fs::symlink(hccl, d.join("libhccl.so")).expect("symlink");
    d
}

/// Loads from exactly `dir`, with the given optional symbols treated as absent.
pub fn load_dir(dir: &Path, disabled: &[&str]) -> Result<&'static Api, LoadError> {
    let disabled: Vec<String> = disabled.iter().map(|s| (*s).to_owned()).collect();
    load_from(&[Some(dir.to_path_buf())], &disabled).map(|api| &*Box::leak(Box::new(api)))
}

/// The stand-in, loaded under both names.
pub fn standin(disabled: &[&str]) -> &'static Api {
    let so = standin_so();
    load_dir(&lib_dir(&so, &so), disabled).expect("stand-in loads")
}

/// The C library this process runs with (a real shared object lacking every ACL/HCCL
/// symbol), from `/proc/self/maps`.
pub fn libc_path() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libc.so"))
        })
        .map(PathBuf::from)
        .expect("libc in /proc/self/maps")
}

/// Resolves a harness hook of the stand-in by name.
pub fn hook<T: Copy>(name: &str) -> T {
    let so = standin_so();
    // SAFETY: the stand-in's initialisers are plain Rust statics; it is already mapped.
    let lib = Box::leak(Box::new(
        unsafe { libloading::Library::new(&so) }.expect("stand-in"),
    ));
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    // SAFETY: the caller names `T` as the hook's documented signature.
    unsafe { *lib.get::<T>(&n).expect("hook exported") }
}

/// `memreuse_standin_calls(name)`.
pub fn calls(name: &str) -> u64 {
    let f: unsafe extern "C" fn(*const std::ffi::c_char) -> u64 = hook("memreuse_standin_calls");
    let c = std::ffi::CString::new(name).expect("name");
    // SAFETY: NUL-terminated string valid for the call.
    unsafe { f(c.as_ptr()) }
}

/// `memreuse_standin_configure` with `devices` devices of `capacity` bytes.
pub fn configure(devices: u32, capacity: u64, timeout_ms: u64) {
    let f: unsafe extern "C" fn(u32, u64, i32, u64, u64) -> i32 =
        hook("memreuse_standin_configure");
    // SAFETY: plain integers; tests hold `serial()`.
    assert_eq!(unsafe { f(devices, capacity, 0, 0, timeout_ms) }, 0);
}

/// `memreuse_standin_set_behaviour(bits)`; returns the previous bits.
pub fn set_behaviour(bits: u32) -> u32 {
    let f: unsafe extern "C" fn(u32) -> u32 = hook("memreuse_standin_set_behaviour");
    // SAFETY: plain integer.
    unsafe { f(bits) }
}

/// Stream handles the stand-in holds (`memreuse_standin_live_streams`).
pub fn live_streams() -> u64 {
    let f: unsafe extern "C" fn() -> u64 = hook("memreuse_standin_live_streams");
    // SAFETY: no arguments.
    unsafe { f() }
}

/// The device of the thread that made the stand-in's last root info.
pub fn last_root_info_device() -> i32 {
    let f: unsafe extern "C" fn() -> i32 = hook("memreuse_standin_last_root_info_device");
    // SAFETY: no arguments.
    unsafe { f() }
}
