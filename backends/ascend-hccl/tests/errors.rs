//! Error mapping: each failure the stand-in produces arrives as the right typed error, and
//! 207001 drives the caching allocator's retry chain before `OutOfMemory`.

mod common;

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use common::{configure, hook, serial, standin};
use memreuse_ascend::registry::open_world_with;
use memreuse_ascend::result::{AclError, HcclError};
use memreuse_ascend::{AscendDevice, sys};
use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp};
use memreuse_core::{
    AllocError, AllocatorConfig, Backend, BackendError, BackendOptions, CachingAllocator,
    DevicePtr, WorldOptions,
};

fn device_error(e: &BackendError) -> (i64, String) {
    match e {
        BackendError::Device {
            code, code_name, ..
        } => (*code, code_name.clone()),
        other => panic!("expected a Device error, got {other:?}"),
    }
}

#[test]
fn acl_failures_arrive_as_named_device_errors() {
    let _g = serial();
    configure(2, 1 << 20, 0);
    let api = standin(&[]);
    let dev = AscendDevice::open(api, 0).unwrap();
    // Unknown device pointer.
    let e = dev.free(DevicePtr(0x1234_5600)).unwrap_err();
    assert_eq!(
        device_error(&e),
        (107_000, "ACL_ERROR_RT_PARAM_INVALID".into())
    );
    // Range outside any allocation.
    let s = dev.create_stream().unwrap();
    let e = dev.memset_zero(DevicePtr(0x40), 64, &s).unwrap_err();
    assert_eq!(device_error(&e).1, "ACL_ERROR_RT_PARAM_INVALID");
    // Misaligned device-to-device copies are refused before the call...
    let p = dev.malloc(4096).unwrap();
    let e = dev
        .copy_device_to_device(p.offset(64), p.offset(8), 8, &s)
        .unwrap_err();
    assert!(matches!(e, BackendError::InvalidArgument { .. }), "{e:?}");
    // ...and by the runtime when called directly; so are count > destMax, null pointers,
    // unknown handles and bad device ids.
    // SAFETY: the stand-in checks every argument; no host memory is touched.
    unsafe {
        let mk = sys::ACL_MEMCPY_DEVICE_TO_DEVICE;
        let dst = p.offset(8).addr() as usize as *mut c_void;
        let src = p.addr() as usize as *const c_void;
        assert_eq!(
            (api.aclrtMemcpyAsync)(dst, 8, src, 8, mk, std::ptr::null_mut()),
            107_000
        );
        let dst = p.offset(64).addr() as usize as *mut c_void;
        assert_eq!(
            (api.aclrtMemcpyAsync)(dst, 8, src, 16, mk, std::ptr::null_mut()),
            100_000
        );
        assert_eq!((api.aclrtCreateStream)(std::ptr::null_mut()), 100_000);
        assert_eq!(
            (api.aclrtSynchronizeStream)(0xdead_0000 as *mut c_void),
            107_000
        );
        assert_eq!((api.aclrtDestroyEvent)(0xdead_0000 as *mut c_void), 107_000);
        assert_eq!((api.aclrtSetDevice)(999), 200_002);
        assert_eq!((api.aclrtMalloc)(std::ptr::null_mut(), 8, 0), 100_000);
    }
    assert_eq!(AclError(200_002).name(), "ACL_ERROR_INVALID_DEVICE");
    assert_eq!(AclError(1).name(), "ACL_ERROR_UNKNOWN");
    // Device out of memory is OutOfMemory, naming the code.
    let e = dev.malloc(2 << 20).unwrap_err();
    assert!(e.is_out_of_memory(), "{e:?}");
    assert!(
        e.to_string()
            .contains("ACL_ERROR_RT_MEMORY_ALLOCATION (207001)"),
        "{e}"
    );
    dev.free(p).unwrap();
}

#[test]
fn the_allocator_retries_on_207001_then_reports_out_of_memory() {
    let _g = serial();
    configure(1, 64 << 20, 0);
    let dev = Arc::new(AscendDevice::open(standin(&[]), 0).unwrap());
    let alloc = CachingAllocator::new(Arc::clone(&dev), AllocatorConfig::default());
    let s = dev.default_stream();
    // A cached 40 MiB segment blocks a fresh 48 MiB one: the device answers 207001, the
    // allocator releases its cache and retries.
    drop(alloc.allocate(40 << 20, &s).unwrap());
    let held = alloc.allocate(48 << 20, &s).unwrap();
    assert!(alloc.stats().num_alloc_retries >= 1, "{:?}", alloc.stats());
    // An injected 207001 on the next device malloc is retried the same way.
    drop(held);
    let inject: unsafe extern "C" fn(i32, u64) -> i32 = hook("memreuse_standin_inject_malloc_oom");
    // SAFETY: plain integers.
    assert_eq!(unsafe { inject(0, 1) }, 0);
    let retries = alloc.stats().num_alloc_retries;
    let again = alloc.allocate(50 << 20, &s).unwrap();
    assert!(alloc.stats().num_alloc_retries > retries);
    drop(again);
    // More than the device has: the chain ends in OutOfMemory.
    let Err(AllocError::OutOfMemory(oom)) = alloc.allocate(80 << 20, &s) else {
        panic!("expected OutOfMemory");
    };
    assert_eq!(oom.device_total, 64 << 20);
    assert!(alloc.stats().num_ooms >= 1);
}

#[test]
fn hccl_failures_arrive_as_typed_errors() {
    let _g = serial();
    let api = standin(&[]);
    let options = WorldOptions {
        world_size: 2,
        backend: BackendOptions::default(),
        timeout: Duration::from_secs(2),
    };
    let world = open_world_with(api, &options).unwrap();
    let (dev, comm) = &world[0];
    // SAFETY: the stand-in checks every argument.
    unsafe {
        assert_eq!((api.HcclGetRootInfo)(std::ptr::null_mut()), 2);
        let mut root = sys::HcclRootInfo::zeroed();
        assert_eq!((api.HcclGetRootInfo)(&raw mut root), 0);
        let mut c: sys::HcclComm = std::ptr::null_mut();
        assert_eq!(
            (api.HcclCommInitRootInfo)(2, &raw const root, 5, &raw mut c),
            1
        );
        assert_eq!((api.HcclCommDestroy)(0xdead_0000 as *mut c_void), 1);
        let p = dev.malloc(64).unwrap();
        let raw = p.addr() as usize as *mut c_void;
        // UINT16 is in HCCL's enum but not among the types it reduces; 13 is not in the enum.
        let uint16 = 8;
        let r = (api.HcclAllReduce)(raw, raw, 4, uint16, 0, comm.raw(), std::ptr::null_mut());
        assert_eq!(HcclError(r).name(), "HCCL_E_NOT_SUPPORT");
        let r = (api.HcclAllReduce)(raw, raw, 4, 13, 0, comm.raw(), std::ptr::null_mut());
        assert_eq!(HcclError(r).name(), "HCCL_E_PARA");
        dev.free(p).unwrap();
    }
    // A rank that never arrives: HCCL_E_TIMEOUT is a Timeout.
    let mut root = sys::HcclRootInfo::zeroed();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { (api.HcclGetRootInfo)(&raw mut root) }, 0);
    let lonely = memreuse_ascend::AscendCommunicator::init(
        dev.clone(),
        &root,
        2,
        0,
        memreuse_ascend::comm::Family::new(),
    );
    assert!(
        matches!(lonely, Err(BackendError::Timeout { .. })),
        "{lonely:?}"
    );
    // Asynchronous errors are polled and named.
    let set: unsafe extern "C" fn(*mut c_void, i32) -> i32 =
        hook("memreuse_standin_set_comm_async_error");
    // SAFETY: live comm handle.
    assert_eq!(unsafe { set(comm.raw(), 21) }, 0);
    match comm.async_error() {
        Some(CommError::Backend(e)) => assert_eq!(device_error(&e).1, "HCCL_E_REMOTE"),
        other => panic!("expected HCCL_E_REMOTE, got {other:?}"),
    }
    // An injected collective failure surfaces when the stream is synchronized.
    let fail: unsafe extern "C" fn(*mut c_void, u64) -> i32 =
        hook("memreuse_standin_inject_collective_failure");
    // SAFETY: live comm handle.
    assert_eq!(unsafe { fail(comm.raw(), 0) }, 0);
    std::thread::scope(|scope| {
        for (dev, comm) in &world {
            scope.spawn(move || {
                let s = dev.default_stream();
                let p = dev.malloc(64).unwrap();
                comm.all_reduce(p, 16, DType::F32, ReduceOp::Sum, &s)
                    .unwrap();
                let e = dev.synchronize_stream(&s).unwrap_err();
                assert_eq!(device_error(&e).1, "ACL_ERROR_RT_INTERNAL_ERROR");
            });
        }
    });
    // Invalid arguments are refused before the FFI call; an aborted member refuses work.
    let s = dev.default_stream();
    assert!(matches!(
        comm.broadcast(DevicePtr(0), 1, DType::F32, 7, &s),
        Err(CommError::InvalidArgument { .. })
    ));
    comm.abort();
    assert!(matches!(comm.barrier(&s), Err(CommError::Aborted { .. })));
}
