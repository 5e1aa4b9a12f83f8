//! `libhcomm.so` of the stand-in's CANN 8.5 variant (feature `cann85`): exports
//! `HcclGroupStart` / `HcclGroupEnd`, as CANN 8.5+ installs do, and forwards them to the
//! stand-in `libhccl.so`, which links this library (so a lookup through `libhccl.so` finds
//! them too, as in a real install) and registers its implementations when it loads.
//! Built by the stand-in's `build.rs` with plain `rustc`.

use std::sync::atomic::{AtomicUsize, Ordering};

/// `HcclResult HcclGroupStart(void)`, `HcclGroupEnd(void)`.
type GroupFn = unsafe extern "C" fn() -> i32;

/// `HCCL_E_INTERNAL`: called before the stand-in registered itself.
const E_INTERNAL: i32 = 4;

static START: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);

/// Called by the stand-in `libhccl.so` when it loads.
#[no_mangle]
pub extern "C" fn memreuse_hcomm_register(start: GroupFn, end: GroupFn) {
    START.store(start as usize, Ordering::Release);
    END.store(end as usize, Ordering::Release);
}

fn forward(slot: &AtomicUsize) -> i32 {
    match slot.load(Ordering::Acquire) {
        0 => E_INTERNAL,
        // SAFETY: a non-zero value was stored from a `GroupFn` by `memreuse_hcomm_register`;
        // the stand-in catches its own panics.
        f => unsafe { std::mem::transmute::<usize, GroupFn>(f)() },
    }
}

/// `HcclResult HcclGroupStart(void)`.
#[no_mangle]
pub extern "C" fn HcclGroupStart() -> i32 {
    forward(&START)
}

/// `HcclResult HcclGroupEnd(void)`.
#[no_mangle]
pub extern "C" fn HcclGroupEnd() -> i32 {
    forward(&END)
}
