//! The stand-in's own hooks, and the per-symbol probes of optional entry points.
//!
//! `memreuse-cuda-standin` (CI's `libcuda.so.1` + `libnccl.so.2`) exports a few
//! `memreuse_standin_*` symbols a real driver never has: configure a fresh cluster
//! (devices, capacity, seed, timeout), switch its race detector, feed it allocation
//! annotations and op labels, enqueue exact delays, read its race reports. The backend
//! looks them up by name in the driver library cudarc loaded, exactly as the Ascend backend
//! does with its stand-in; on a real driver every lookup fails and nothing changes.
//!
//! Optional driver and NCCL entry points are probed by name here too, before their first
//! use: cudarc panics at the first call of a symbol the library lacks, and a library's
//! version or attributes do not prove a symbol is there.

use std::ffi::{c_char, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use memreuse_core::RaceReport;

type Configure = unsafe extern "C" fn(u32, u64, i32, u64, u64) -> u32;
type SetRaceDetection = unsafe extern "C" fn(i32) -> i32;
type Annotate = unsafe extern "C" fn(i32, u64, u64, u64) -> u32;
type SetOpLabel = unsafe extern "C" fn(i32, *const c_char, usize) -> u32;
type Delay = unsafe extern "C" fn(*mut c_void, u64) -> u32;
type RaceReports = unsafe extern "C" fn(i32, *mut c_char, usize) -> i64;

/// The hooks found in the loaded driver library (all `None` on a real driver).
pub(crate) struct Hooks {
    pub configure: Option<Configure>,
    pub set_race_detection: Option<SetRaceDetection>,
    pub annotate: Option<Annotate>,
    pub set_op_label: Option<SetOpLabel>,
    pub delay: Option<Delay>,
    pub race_reports: Option<RaceReports>,
}

impl Hooks {
    /// True on the stand-in.
    pub fn is_standin(&self) -> bool {
        self.configure.is_some()
    }
}

/// Whether the stand-in's devices were last configured with their race detector.
pub(crate) static RACE_DETECTION: AtomicBool = AtomicBool::new(true);

/// Looks `name` up in the driver library.
///
/// # Safety
/// The driver library is loadable (`error::probe_driver` succeeded) and `F` is the
/// symbol's type.
unsafe fn driver_symbol<F: Copy>(name: &str) -> Option<F> {
    // SAFETY: the library loads (caller); a lookup has no other effect; `F` per caller.
    unsafe {
        cudarc::driver::sys::culib()
            .get::<F>(name.as_bytes())
            .ok()
            .map(|s| *s)
    }
}

/// The hooks; `None` until the driver library could be loaded.
pub(crate) fn hooks() -> Option<&'static Hooks> {
    static HOOKS: OnceLock<Hooks> = OnceLock::new();
    if let Some(h) = HOOKS.get() {
        return Some(h);
    }
    crate::error::probe_driver().ok()?;
    Some(HOOKS.get_or_init(|| {
        // SAFETY: the driver library loads (probed above); each type is the hook's
        // signature as the stand-in's harness module declares it.
        unsafe {
            Hooks {
                configure: driver_symbol("memreuse_standin_configure"),
                set_race_detection: driver_symbol("memreuse_standin_set_race_detection"),
                annotate: driver_symbol("memreuse_standin_annotate"),
                set_op_label: driver_symbol("memreuse_standin_set_op_label"),
                delay: driver_symbol("memreuse_standin_delay"),
                race_reports: driver_symbol("memreuse_standin_race_reports"),
            }
        }
    }))
}

/// True when the loaded driver library exports `name` (false when it cannot be loaded).
pub(crate) fn driver_has(name: &str) -> bool {
    crate::error::probe_driver().is_ok()
        // SAFETY: the library loads (probed); the symbol is only looked up, never called.
        && unsafe { driver_symbol::<*const c_void>(name) }.is_some()
}

/// True when the loaded NCCL library exports `name` (false when it cannot be loaded).
pub(crate) fn nccl_has(name: &str) -> bool {
    crate::error::probe_nccl().is_ok()
        // SAFETY: the library loads (probed); the symbol is only looked up, never called.
        && unsafe {
            cudarc::nccl::sys::culib()
                .get::<*const c_void>(name.as_bytes())
                .is_ok()
        }
}

/// Gives the stand-in a fresh cluster (no-op on a real driver): at least `devices`
/// devices of `capacity` bytes, deterministic from `seed` when given, `timeout` for joint
/// operations, race detector as asked.
pub(crate) fn configure(
    devices: usize,
    capacity: u64,
    seed: Option<u64>,
    timeout_ms: u64,
    race_detection: bool,
) -> Result<(), memreuse_core::BackendError> {
    let Some(h) = hooks() else { return Ok(()) };
    let Some(configure) = h.configure else {
        return Ok(());
    };
    if let Some(set) = h.set_race_detection {
        // SAFETY: a plain integer argument.
        unsafe { set(i32::from(race_detection)) };
    }
    RACE_DETECTION.store(race_detection, Ordering::Release);
    // SAFETY: plain integers; called while no handle of the old cluster is in use (worlds
    // are opened one after another).
    let code = unsafe {
        configure(
            u32::try_from(devices).unwrap_or(u32::MAX),
            capacity,
            i32::from(seed.is_some()),
            seed.unwrap_or(0),
            timeout_ms,
        )
    };
    if code == 0 {
        Ok(())
    } else {
        Err(memreuse_core::BackendError::Device {
            backend: crate::error::BACKEND_NAME.to_owned(),
            call: "memreuse_standin_configure",
            code: i64::from(code),
            code_name: format!("CUresult {code}"),
            message: "the stand-in refused the configuration".to_owned(),
        })
    }
}

/// Race reports of `device` from the stand-in (`None` without its detector).
pub(crate) fn race_reports(device: i32) -> Option<Vec<RaceReport>> {
    let h = hooks()?;
    if !RACE_DETECTION.load(Ordering::Acquire) && h.set_race_detection.is_some() {
        return None;
    }
    let f = h.race_reports?;
    // SAFETY: a null buffer asks only for the size.
    let needed = unsafe { f(device, std::ptr::null_mut(), 0) };
    let mut buf = vec![0u8; usize::try_from(needed).ok()?];
    // SAFETY: `buf` is valid for `buf.len()` bytes.
    let written = unsafe { f(device, buf.as_mut_ptr().cast(), buf.len()) };
    if written != needed {
        return None;
    }
    Some(memreuse_core::race::parse_race_lines(
        &String::from_utf8_lossy(&buf),
    ))
}
