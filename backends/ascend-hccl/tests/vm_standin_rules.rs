//! The stand-in's virtual-memory symbols alone, called through the raw function pointers:
//! each documented rule of the runtime is refused with its status code, and a refused call
//! changes nothing (the proper call afterwards succeeds).

mod common;

use std::ffi::c_void;
use std::ptr::{null_mut, without_provenance_mut};

use common::{configure, serial, standin};
use memreuse_ascend::sys::{self, aclrtPhysicalMemProp};
use memreuse_ascend::{Api, AscendDevice};

const G: usize = 2 << 20;
/// `ACL_ERROR_INVALID_PARAM`: an argument value the runtime documents as invalid.
const INVALID_PARAM: i32 = 100_000;
/// `ACL_ERROR_RT_PARAM_INVALID`: a handle or address in the wrong state.
const RT_PARAM_INVALID: i32 = 107_000;
/// `ACL_ERROR_RT_MEMORY_ALLOCATION`: out of device memory.
const RT_MEMORY_ALLOCATION: i32 = 207_001;

/// The stand-in with one device of `capacity` bytes, bound to this thread.
fn setup(capacity: u64) -> &'static Api {
    configure(1, capacity, 0);
    let api = standin(&[]);
    // Binds device 0 to this thread, as every ACL caller must first.
    std::mem::forget(AscendDevice::open(api, 0).unwrap());
    api
}

fn reserve(
    api: &Api,
    size: usize,
    alignment: usize,
    expect: *mut c_void,
    flags: u64,
) -> (i32, usize) {
    let mut p = null_mut();
    // SAFETY: `p` is a valid out-pointer; the stand-in checks every other argument.
    let code =
        unsafe { api.aclrtReserveMemAddress.unwrap()(&raw mut p, size, alignment, expect, flags) };
    (code, p as usize)
}

fn malloc_physical(
    api: &Api,
    size: usize,
    prop: &aclrtPhysicalMemProp,
    flags: u64,
) -> (i32, usize) {
    let mut h = null_mut();
    // SAFETY: `h` is a valid out-pointer, `prop` lives for the call.
    let code = unsafe { api.aclrtMallocPhysical.unwrap()(&raw mut h, size, prop, flags) };
    (code, h as usize)
}

fn map(api: &Api, at: usize, size: usize, offset: usize, h: usize, flags: u64) -> i32 {
    // SAFETY: plain values; the stand-in looks addresses and handles up in its tables.
    unsafe {
        api.aclrtMapMem.unwrap()(
            without_provenance_mut(at),
            size,
            offset,
            without_provenance_mut(h),
            flags,
        )
    }
}

fn unmap(api: &Api, at: usize) -> i32 {
    // SAFETY: as above.
    unsafe { api.aclrtUnmapMem.unwrap()(without_provenance_mut(at)) }
}

fn free_physical(api: &Api, h: usize) -> i32 {
    // SAFETY: as above.
    unsafe { api.aclrtFreePhysical.unwrap()(without_provenance_mut(h)) }
}

fn release(api: &Api, at: usize) -> i32 {
    // SAFETY: as above.
    unsafe { api.aclrtReleaseMemAddress.unwrap()(without_provenance_mut(at)) }
}

#[test]
fn reserve_takes_alignment_0_no_expected_address_flags_0_or_1_and_whole_pages() {
    let _g = serial();
    let api = setup(16 << 20);
    let mut somewhere = 0u8;
    let expect: *mut c_void = (&raw mut somewhere).cast();
    for (rule, (code, _)) in [
        ("alignment 0", reserve(api, 4 * G, G, null_mut(), 0)),
        ("expectPtr NULL", reserve(api, 4 * G, 0, expect, 0)),
        ("flags 0 or 1", reserve(api, 4 * G, 0, null_mut(), 2)),
        (
            "size a multiple of the granularity",
            reserve(api, 4 * G + 32, 0, null_mut(), 0),
        ),
        ("size not zero", reserve(api, 0, 0, null_mut(), 0)),
    ] {
        assert_eq!(code, INVALID_PARAM, "{rule}");
    }
    // SAFETY: a null out-pointer, which the stand-in refuses.
    let null_out =
        unsafe { api.aclrtReserveMemAddress.unwrap()(null_mut(), 4 * G, 0, null_mut(), 0) };
    assert_eq!(null_out, INVALID_PARAM, "out-pointer not null");
    // torch_npu's flags = 1 is accepted, as is the documented 0.
    for flags in [0, 1] {
        let (code, base) = reserve(api, 4 * G, 0, null_mut(), flags);
        assert_eq!(code, 0, "flags {flags}");
        assert_eq!(base % G, 0, "reserved ranges start on a page");
        assert_eq!(
            release(api, base + G),
            RT_PARAM_INVALID,
            "release needs the base"
        );
        assert_eq!(release(api, base), 0);
        assert_eq!(release(api, base), RT_PARAM_INVALID, "released once");
    }
}

#[test]
fn physical_memory_takes_the_documented_properties_and_capacity_limits_it() {
    let _g = serial();
    let api = setup(8 << 20);
    let good = aclrtPhysicalMemProp::device_huge(0);
    let cases = [
        (
            "handle type NONE",
            aclrtPhysicalMemProp {
                handleType: 1,
                ..good
            },
        ),
        (
            "allocation type PINNED",
            aclrtPhysicalMemProp {
                allocationType: 1,
                ..good
            },
        ),
        (
            "HBM huge-page attribute",
            aclrtPhysicalMemProp {
                memAttr: sys::ACL_HBM_MEM,
                ..good
            },
        ),
        ("reserve 0", aclrtPhysicalMemProp { reserve: 1, ..good }),
        (
            "a device location",
            aclrtPhysicalMemProp {
                location: sys::aclrtMemLocation { id: 0, r#type: 0 },
                ..good
            },
        ),
        (
            "a device that exists",
            aclrtPhysicalMemProp {
                location: sys::aclrtMemLocation { id: 7, r#type: 1 },
                ..good
            },
        ),
    ];
    for (rule, prop) in cases {
        assert_eq!(malloc_physical(api, G, &prop, 0).0, INVALID_PARAM, "{rule}");
    }
    assert_eq!(
        malloc_physical(api, G, &good, 1).0,
        INVALID_PARAM,
        "flags 0"
    );
    assert_eq!(
        malloc_physical(api, G + 32, &good, 0).0,
        INVALID_PARAM,
        "whole pages"
    );
    let huge1g = aclrtPhysicalMemProp {
        memAttr: sys::ACL_HBM_MEM_HUGE1G,
        ..good
    };
    assert_eq!(
        malloc_physical(api, G, &huge1g, 0).0,
        INVALID_PARAM,
        "1 GB pages are 1 GB"
    );
    // Capacity: 8 MiB of physical memory, whatever the addresses.
    let (code, a) = malloc_physical(api, 4 * G, &good, 0);
    assert_eq!(code, 0);
    assert_eq!(malloc_physical(api, G, &good, 0).0, RT_MEMORY_ALLOCATION);
    assert_eq!(free_physical(api, a), 0);
    assert_eq!(free_physical(api, a), RT_PARAM_INVALID, "freed once");
    let (code, b) = malloc_physical(api, 4 * G, &good, 0);
    assert_eq!(code, 0, "freed bytes are available again");
    assert_eq!(free_physical(api, b), 0);
}

#[test]
fn the_granularity_query_answers_per_page_size() {
    let _g = serial();
    let api = setup(8 << 20);
    let f = api.aclrtMemGetAllocationGranularity.unwrap();
    for (attr, option, expected) in [
        (
            sys::ACL_HBM_MEM_HUGE,
            sys::ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
            Ok(G),
        ),
        (
            sys::ACL_HBM_MEM_HUGE,
            sys::ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            Ok(G),
        ),
        (
            sys::ACL_HBM_MEM_HUGE1G,
            sys::ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
            Ok(1 << 30),
        ),
        (
            sys::ACL_HBM_MEM,
            sys::ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
            Err(INVALID_PARAM),
        ),
        (sys::ACL_HBM_MEM_HUGE, 2, Err(INVALID_PARAM)),
    ] {
        let mut prop = aclrtPhysicalMemProp {
            memAttr: attr,
            ..aclrtPhysicalMemProp::device_huge(0)
        };
        let mut g = 0usize;
        // SAFETY: both pointers are valid for the call.
        let code = unsafe { f(&raw mut prop, option, &raw mut g) };
        match expected {
            Ok(want) => assert_eq!((code, g), (0, want), "attr {attr} option {option}"),
            Err(want) => assert_eq!(code, want, "attr {attr} option {option}"),
        }
    }
}

#[test]
fn map_and_unmap_keep_every_documented_rule() {
    let _g = serial();
    let api = setup(16 << 20);
    let prop = aclrtPhysicalMemProp::device_huge(0);
    let (_, base) = reserve(api, 4 * G, 0, null_mut(), 0);
    let (_, h) = malloc_physical(api, 2 * G, &prop, 0);
    let (_, k) = malloc_physical(api, G, &prop, 0);
    assert_eq!(map(api, base, 2 * G, G, h, 0), INVALID_PARAM, "offset 0");
    assert_eq!(map(api, base, 2 * G, 0, h, 1), INVALID_PARAM, "flags 0");
    assert_eq!(
        map(api, base, G, 0, h, 0),
        INVALID_PARAM,
        "size equal to the handle's"
    );
    assert_eq!(
        map(api, 0, 2 * G, 0, h, 0),
        INVALID_PARAM,
        "address not null"
    );
    assert_eq!(
        map(api, base, 2 * G, 0, 0x1234, 0),
        RT_PARAM_INVALID,
        "a live handle"
    );
    assert_eq!(
        map(api, base + 3 * G, 2 * G, 0, h, 0),
        RT_PARAM_INVALID,
        "inside the reserved range"
    );
    assert_eq!(
        map(api, base + 8 * G, 2 * G, 0, h, 0),
        RT_PARAM_INVALID,
        "inside a reserved range"
    );
    assert_eq!(unmap(api, base), RT_PARAM_INVALID, "unmap only a mapping");
    assert_eq!(map(api, base, 2 * G, 0, h, 0), 0);
    assert_eq!(
        map(api, base + 2 * G, 2 * G, 0, h, 0),
        RT_PARAM_INVALID,
        "no double map"
    );
    assert_eq!(
        map(api, base + G, G, 0, k, 0),
        RT_PARAM_INVALID,
        "not over a mapping"
    );
    assert_eq!(
        unmap(api, base + G),
        RT_PARAM_INVALID,
        "unmap takes the mapping's address"
    );
    assert_eq!(
        free_physical(api, h),
        RT_PARAM_INVALID,
        "free only when unmapped"
    );
    assert_eq!(
        release(api, base),
        RT_PARAM_INVALID,
        "release only when nothing is mapped"
    );
    // Nothing refused changed anything: the proper order works.
    assert_eq!(map(api, base + 2 * G, G, 0, k, 0), 0);
    assert_eq!(unmap(api, base), 0);
    assert_eq!(unmap(api, base), RT_PARAM_INVALID, "unmapped once");
    assert_eq!(unmap(api, base + 2 * G), 0);
    assert_eq!(free_physical(api, h), 0);
    assert_eq!(free_physical(api, k), 0);
    assert_eq!(release(api, base), 0);
}

#[test]
fn a_null_address_or_handle_is_invalid_param_on_every_call() {
    // The ACL layer checks every pointer and handle for null before the driver looks
    // anything up, so a null is 100000 (an argument value), never 107000 (a state).
    let _g = serial();
    let api = setup(16 << 20);
    let prop = aclrtPhysicalMemProp::device_huge(0);
    let (_, base) = reserve(api, 4 * G, 0, null_mut(), 0);
    let (_, h) = malloc_physical(api, 2 * G, &prop, 0);
    for (call, code) in [
        ("aclrtReleaseMemAddress(NULL)", release(api, 0)),
        ("aclrtFreePhysical(NULL)", free_physical(api, 0)),
        ("aclrtUnmapMem(NULL)", unmap(api, 0)),
        (
            "aclrtMapMem(.., handle NULL, ..)",
            map(api, base, 2 * G, 0, 0, 0),
        ),
    ] {
        assert_eq!(code, INVALID_PARAM, "{call}");
    }
    let mut out = null_mut();
    // SAFETY: a valid out-pointer and a null prop, which the stand-in refuses unread.
    let no_prop =
        unsafe { api.aclrtMallocPhysical.unwrap()(&raw mut out, 2 * G, std::ptr::null(), 0) };
    assert_eq!(
        no_prop, INVALID_PARAM,
        "aclrtMallocPhysical(.., prop NULL, ..)"
    );
    // Nothing refused changed anything.
    assert_eq!(map(api, base, 2 * G, 0, h, 0), 0);
    assert_eq!(unmap(api, base), 0);
    assert_eq!(free_physical(api, h), 0);
    assert_eq!(release(api, base), 0);
}
