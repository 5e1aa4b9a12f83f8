//! CANN 8.5 variant: hands the group functions to `libhcomm.so` (linked) when loaded.
type GroupFn = unsafe extern "C" fn() -> i32;

#[link(name = "hcomm")]
unsafe extern "C" {
    fn memreuse_hcomm_register(start: GroupFn, end: GroupFn);
}

extern "C" fn register() {
    // SAFETY: libhcomm.so is a dependency of this library, loaded and relocated before
    // its initialisers run; both arguments are `extern "C"` functions of this library
    // that catch their own panics.
    unsafe {
        memreuse_hcomm_register(
            crate::hccl_p2p::HcclGroupStart,
            crate::hccl_p2p::HcclGroupEnd,
        );
    };
}

#[used]
#[unsafe(link_section = ".init_array")]
static REGISTER: extern "C" fn() = register;
