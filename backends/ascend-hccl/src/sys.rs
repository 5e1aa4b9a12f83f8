//! Layer 1: the C declarations of the ACL runtime and HCCL, exactly as CANN's public headers
//! give them (`acl_rt.h`, `acl_base.h`, `rt_error_codes.h`, `hccl.h`, `hccl_types.h`, as
//! vendored by Ascend/pytorch and in the newest runtime; `aclInit` / `aclFinalize` from
//! `acl.h`). Which symbols are required and which optional, and the usage rules the
//! runtime documents: `backends/ascend-hccl/docs/usage-rules.md`.
//!
//! Types are the C types: `aclError` is `int` (`i32`), `size_t` is `usize`, enums are passed
//! as their C integer values, handles are `void*`. The function-pointer types below are what
//! [`crate::loader`] resolves with libloading; nothing here is called directly.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

/// `aclError`: `int`, 0 on success.
pub type aclError = c_int;
/// `aclrtStream`: an opaque stream handle (`void*`; null is the device's default stream).
pub type aclrtStream = *mut c_void;
/// `aclrtEvent`: an opaque event handle.
pub type aclrtEvent = *mut c_void;
/// `aclrtContext`: an opaque context handle.
pub type aclrtContext = *mut c_void;
/// `aclrtMemMallocPolicy` (C enum).
pub type aclrtMemMallocPolicy = c_int;
/// `aclrtMemAttr` (C enum).
pub type aclrtMemAttr = c_int;
/// `aclrtMemcpyKind` (C enum).
pub type aclrtMemcpyKind = c_int;
/// `aclrtEventRecordedStatus` (C enum; NOT_READY = 0, COMPLETE = 1).
pub type aclrtEventRecordedStatus = c_int;
/// `aclrtEventStatus` (C enum of the deprecated query; COMPLETE = 0, NOT_READY = 1).
pub type aclrtEventStatus = c_int;

/// `HcclResult` (C enum).
pub type HcclResult = c_int;
/// `HcclComm`: an opaque communicator handle.
pub type HcclComm = *mut c_void;
/// `HcclDataType` (C enum).
pub type HcclDataType = c_int;
/// `HcclReduceOp` (C enum).
pub type HcclReduceOp = c_int;

/// `HCCL_ROOT_INFO_BYTES`.
pub const HCCL_ROOT_INFO_BYTES: usize = 4108;

/// `typedef struct { char internal[HCCL_ROOT_INFO_BYTES]; } HcclRootInfo;`
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclRootInfo {
    /// Opaque bytes, published by rank 0 and read by every rank.
    pub internal: [c_char; HCCL_ROOT_INFO_BYTES],
}

impl HcclRootInfo {
    /// All zero (what `HcclGetRootInfo` overwrites).
    pub const fn zeroed() -> HcclRootInfo {
        HcclRootInfo {
            internal: [0; HCCL_ROOT_INFO_BYTES],
        }
    }

    /// The bytes, for publishing through a store.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.internal.iter().map(|&c| c as u8).collect()
    }

    /// Rebuilds root info from published bytes; `None` unless exactly
    /// [`HCCL_ROOT_INFO_BYTES`] long.
    pub fn from_bytes(bytes: &[u8]) -> Option<HcclRootInfo> {
        if bytes.len() != HCCL_ROOT_INFO_BYTES {
            return None;
        }
        let mut info = HcclRootInfo::zeroed();
        for (dst, &src) in info.internal.iter_mut().zip(bytes) {
            *dst = src as c_char;
        }
        Some(info)
    }
}

impl std::fmt::Debug for HcclRootInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HcclRootInfo({HCCL_ROOT_INFO_BYTES} bytes)")
    }
}

// ---- ACL constants ----

/// `ACL_SUCCESS`.
pub const ACL_SUCCESS: aclError = 0;
/// `ACL_ERROR_REPEAT_INITIALIZE` (older runtimes refuse a second `aclInit`).
pub const ACL_ERROR_REPEAT_INITIALIZE: aclError = 100_002;
/// `ACL_EVENT_SYNC`.
pub const ACL_EVENT_SYNC: u32 = 0x1;
/// `ACL_EVENT_CAPTURE_STREAM_PROGRESS` (what torch_npu's allocator events use).
pub const ACL_EVENT_CAPTURE_STREAM_PROGRESS: u32 = 0x2;
/// `ACL_EVENT_TIME_LINE`.
pub const ACL_EVENT_TIME_LINE: u32 = 0x8;
/// `ACL_EVENT_DEVICE_USE_ONLY`.
pub const ACL_EVENT_DEVICE_USE_ONLY: u32 = 0x10;
/// `ACL_EVENT_EXTERNAL`.
pub const ACL_EVENT_EXTERNAL: u32 = 0x20;
/// `ACL_EVENT_IPC`.
pub const ACL_EVENT_IPC: u32 = 0x40;
/// `ACL_EVENT_RECORDED_STATUS_NOT_READY`.
pub const ACL_EVENT_RECORDED_STATUS_NOT_READY: aclrtEventRecordedStatus = 0;
/// `ACL_EVENT_RECORDED_STATUS_COMPLETE`.
pub const ACL_EVENT_RECORDED_STATUS_COMPLETE: aclrtEventRecordedStatus = 1;
/// `ACL_EVENT_STATUS_COMPLETE` (deprecated query).
pub const ACL_EVENT_STATUS_COMPLETE: aclrtEventStatus = 0;
/// `ACL_EVENT_STATUS_NOT_READY` (deprecated query).
pub const ACL_EVENT_STATUS_NOT_READY: aclrtEventStatus = 1;
/// `ACL_MEM_MALLOC_HUGE_FIRST`.
pub const ACL_MEM_MALLOC_HUGE_FIRST: aclrtMemMallocPolicy = 0;
/// `ACL_MEM_MALLOC_HUGE_ONLY`.
pub const ACL_MEM_MALLOC_HUGE_ONLY: aclrtMemMallocPolicy = 1;
/// `ACL_MEM_MALLOC_NORMAL_ONLY`.
pub const ACL_MEM_MALLOC_NORMAL_ONLY: aclrtMemMallocPolicy = 2;
/// `ACL_DDR_MEM`.
pub const ACL_DDR_MEM: aclrtMemAttr = 0;
/// `ACL_HBM_MEM`.
pub const ACL_HBM_MEM: aclrtMemAttr = 1;
/// `ACL_MEMCPY_HOST_TO_HOST`.
pub const ACL_MEMCPY_HOST_TO_HOST: aclrtMemcpyKind = 0;
/// `ACL_MEMCPY_HOST_TO_DEVICE`.
pub const ACL_MEMCPY_HOST_TO_DEVICE: aclrtMemcpyKind = 1;
/// `ACL_MEMCPY_DEVICE_TO_HOST`.
pub const ACL_MEMCPY_DEVICE_TO_HOST: aclrtMemcpyKind = 2;
/// `ACL_MEMCPY_DEVICE_TO_DEVICE`.
pub const ACL_MEMCPY_DEVICE_TO_DEVICE: aclrtMemcpyKind = 3;

// ---- HCCL constants ----

/// `HCCL_SUCCESS`.
pub const HCCL_SUCCESS: HcclResult = 0;
/// `HCCL_E_NOT_SUPPORT`: the part or version does not support the call.
pub const HCCL_E_NOT_SUPPORT: HcclResult = 5;
/// `HCCL_E_TIMEOUT`.
pub const HCCL_E_TIMEOUT: HcclResult = 9;
/// `HCCL_E_AGAIN`: the communicator is busy (`HcclCommDestroy` on a busy communicator).
pub const HCCL_E_AGAIN: HcclResult = 20;
/// `HCCL_E_OOM`: out of device memory.
pub const HCCL_E_OOM: HcclResult = 24;
/// `HCCL_E_IN_STATUS` (newest HCCL).
pub const HCCL_E_IN_STATUS: HcclResult = 1041;
/// `HCCL_DATA_TYPE_INT8`.
pub const HCCL_DATA_TYPE_INT8: HcclDataType = 0;
/// `HCCL_DATA_TYPE_INT16`.
pub const HCCL_DATA_TYPE_INT16: HcclDataType = 1;
/// `HCCL_DATA_TYPE_INT32`.
pub const HCCL_DATA_TYPE_INT32: HcclDataType = 2;
/// `HCCL_DATA_TYPE_FP16`.
pub const HCCL_DATA_TYPE_FP16: HcclDataType = 3;
/// `HCCL_DATA_TYPE_FP32`.
pub const HCCL_DATA_TYPE_FP32: HcclDataType = 4;
/// `HCCL_DATA_TYPE_INT64`.
pub const HCCL_DATA_TYPE_INT64: HcclDataType = 5;
/// `HCCL_DATA_TYPE_UINT64`.
pub const HCCL_DATA_TYPE_UINT64: HcclDataType = 6;
/// `HCCL_DATA_TYPE_UINT8`.
pub const HCCL_DATA_TYPE_UINT8: HcclDataType = 7;
/// `HCCL_DATA_TYPE_UINT16`.
pub const HCCL_DATA_TYPE_UINT16: HcclDataType = 8;
/// `HCCL_DATA_TYPE_UINT32`.
pub const HCCL_DATA_TYPE_UINT32: HcclDataType = 9;
/// `HCCL_DATA_TYPE_FP64`.
pub const HCCL_DATA_TYPE_FP64: HcclDataType = 10;
/// `HCCL_DATA_TYPE_BFP16`.
pub const HCCL_DATA_TYPE_BFP16: HcclDataType = 11;
/// `HCCL_DATA_TYPE_INT128`.
pub const HCCL_DATA_TYPE_INT128: HcclDataType = 12;
/// `HCCL_DATA_TYPE_HIF8`.
pub const HCCL_DATA_TYPE_HIF8: HcclDataType = 14;
/// `HCCL_DATA_TYPE_FP8E4M3`.
pub const HCCL_DATA_TYPE_FP8E4M3: HcclDataType = 15;
/// `HCCL_DATA_TYPE_FP8E5M2`.
pub const HCCL_DATA_TYPE_FP8E5M2: HcclDataType = 16;
/// `HCCL_DATA_TYPE_FP8E8M0`.
pub const HCCL_DATA_TYPE_FP8E8M0: HcclDataType = 17;
/// `HCCL_REDUCE_SUM`.
pub const HCCL_REDUCE_SUM: HcclReduceOp = 0;
/// `HCCL_REDUCE_PROD`.
pub const HCCL_REDUCE_PROD: HcclReduceOp = 1;
/// `HCCL_REDUCE_MAX`.
pub const HCCL_REDUCE_MAX: HcclReduceOp = 2;
/// `HCCL_REDUCE_MIN`.
pub const HCCL_REDUCE_MIN: HcclReduceOp = 3;

// ---- Function-pointer types (one per bound symbol) ----

/// `aclError aclInit(const char *configPath)` (acl.h).
pub type aclInit = unsafe extern "C" fn(config_path: *const c_char) -> aclError;
/// `aclError aclFinalize(void)` (acl.h).
pub type aclFinalize = unsafe extern "C" fn() -> aclError;
/// `aclError aclrtSetDevice(int32_t deviceId)`.
pub type aclrtSetDevice = unsafe extern "C" fn(device_id: i32) -> aclError;
/// `aclError aclrtResetDevice(int32_t deviceId)`.
pub type aclrtResetDevice = unsafe extern "C" fn(device_id: i32) -> aclError;
/// `aclError aclrtGetDeviceCount(uint32_t *count)`.
pub type aclrtGetDeviceCount = unsafe extern "C" fn(count: *mut u32) -> aclError;
/// `aclError aclrtMallocHost(void **hostPtr, size_t size)`.
pub type aclrtMallocHost =
    unsafe extern "C" fn(host_ptr: *mut *mut c_void, size: usize) -> aclError;
/// `aclError aclrtFreeHost(void *hostPtr)`.
pub type aclrtFreeHost = unsafe extern "C" fn(host_ptr: *mut c_void) -> aclError;
/// `aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)`; also
/// the type of the optional `aclrtMallocAlign32`.
pub type aclrtMalloc = unsafe extern "C" fn(
    dev_ptr: *mut *mut c_void,
    size: usize,
    policy: aclrtMemMallocPolicy,
) -> aclError;
/// `aclError aclrtFree(void *devPtr)`.
pub type aclrtFree = unsafe extern "C" fn(dev_ptr: *mut c_void) -> aclError;
/// `aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total)`.
pub type aclrtGetMemInfo =
    unsafe extern "C" fn(attr: aclrtMemAttr, free: *mut usize, total: *mut usize) -> aclError;
/// `aclError aclrtCreateStream(aclrtStream *stream)`.
pub type aclrtCreateStream = unsafe extern "C" fn(stream: *mut aclrtStream) -> aclError;
/// `aclError aclrtDestroyStream(aclrtStream stream)`.
pub type aclrtDestroyStream = unsafe extern "C" fn(stream: aclrtStream) -> aclError;
/// `aclError aclrtSynchronizeStream(aclrtStream stream)`.
pub type aclrtSynchronizeStream = unsafe extern "C" fn(stream: aclrtStream) -> aclError;
/// `aclError aclrtDestroyStreamForce(aclrtStream stream)`: destroys a stream whose work
/// has not finished (abort paths).
pub type aclrtDestroyStreamForce = aclrtDestroyStream;
/// `aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout)`
/// (milliseconds; -1 waits without limit). Times out with 507046.
pub type aclrtSynchronizeStreamWithTimeout =
    unsafe extern "C" fn(stream: aclrtStream, timeout_ms: i32) -> aclError;
/// `aclError aclrtSynchronizeDevice(void)`.
pub type aclrtSynchronizeDevice = unsafe extern "C" fn() -> aclError;
/// `aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag)`; also the type of
/// the optional `aclrtCreateEventExWithFlag`.
pub type aclrtCreateEventWithFlag =
    unsafe extern "C" fn(event: *mut aclrtEvent, flag: u32) -> aclError;
/// `aclError aclrtDestroyEvent(aclrtEvent event)`.
pub type aclrtDestroyEvent = unsafe extern "C" fn(event: aclrtEvent) -> aclError;
/// `aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)`.
pub type aclrtRecordEvent =
    unsafe extern "C" fn(event: aclrtEvent, stream: aclrtStream) -> aclError;
/// `aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream)`: makes an event from
/// `aclrtCreateEventWithFlag` recordable again.
pub type aclrtResetEvent = aclrtRecordEvent;
/// `aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status)`.
pub type aclrtQueryEventStatus =
    unsafe extern "C" fn(event: aclrtEvent, status: *mut aclrtEventRecordedStatus) -> aclError;
/// `aclError aclrtSynchronizeEvent(aclrtEvent event)`.
pub type aclrtSynchronizeEvent = unsafe extern "C" fn(event: aclrtEvent) -> aclError;
/// `aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event)`.
pub type aclrtStreamWaitEvent =
    unsafe extern "C" fn(stream: aclrtStream, event: aclrtEvent) -> aclError;
/// `aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
/// aclrtMemcpyKind kind, aclrtStream stream)`.
pub type aclrtMemcpyAsync = unsafe extern "C" fn(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> aclError;
/// `aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count,
/// aclrtStream stream)`.
pub type aclrtMemsetAsync = unsafe extern "C" fn(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
    stream: aclrtStream,
) -> aclError;

/// `HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo)`.
pub type HcclGetRootInfo = unsafe extern "C" fn(root_info: *mut HcclRootInfo) -> HcclResult;
/// `HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo,
/// uint32_t rank, HcclComm *comm)`.
pub type HcclCommInitRootInfo = unsafe extern "C" fn(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclResult;
/// `HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType
/// dataType, HcclReduceOp op, HcclComm comm, aclrtStream stream)`.
pub type HcclAllReduce = unsafe extern "C" fn(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult;
/// `HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t
/// root, HcclComm comm, aclrtStream stream)`.
pub type HcclBroadcast = unsafe extern "C" fn(
    buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult;
/// `HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount,
/// HcclDataType dataType, HcclReduceOp op, HcclComm comm, aclrtStream stream)`.
pub type HcclReduceScatter = HcclAllReduce;
/// `HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount, HcclDataType
/// dataType, HcclComm comm, aclrtStream stream)`.
pub type HcclAllGather = unsafe extern "C" fn(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    send_count: u64,
    data_type: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult;
/// `HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType, uint32_t
/// destRank, HcclComm comm, aclrtStream stream)`; `HcclRecv` has the same shape.
pub type HcclSend = unsafe extern "C" fn(
    buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    peer: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult;
/// `HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType, uint32_t
/// srcRank, HcclComm comm, aclrtStream stream)`.
pub type HcclRecv = HcclSend;
/// `HcclResult HcclAlltoAll(const void *sendBuf, uint64_t sendCount, HcclDataType sendType,
/// const void *recvBuf, uint64_t recvCount, HcclDataType recvType, HcclComm comm,
/// aclrtStream stream)`.
pub type HcclAlltoAll = unsafe extern "C" fn(
    send_buf: *const c_void,
    send_count: u64,
    send_type: HcclDataType,
    recv_buf: *const c_void,
    recv_count: u64,
    recv_type: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult;
/// `HcclResult HcclBarrier(HcclComm comm, aclrtStream stream)`.
pub type HcclBarrier = unsafe extern "C" fn(comm: HcclComm, stream: aclrtStream) -> HcclResult;
/// `HcclResult HcclCommDestroy(HcclComm comm)`.
pub type HcclCommDestroy = unsafe extern "C" fn(comm: HcclComm) -> HcclResult;
/// `HcclResult HcclGroupStart(void)` / `HcclGroupEnd(void)`.
pub type HcclGroupStart = unsafe extern "C" fn() -> HcclResult;
/// `HcclResult HcclGroupEnd(void)`.
pub type HcclGroupEnd = HcclGroupStart;
/// `HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult *asyncError)`.
pub type HcclGetCommAsyncError =
    unsafe extern "C" fn(comm: HcclComm, async_error: *mut HcclResult) -> HcclResult;

// ---- Virtual memory (expandable segments), `acl_rt.h` ----

/// `aclrtDrvMemHandle`: an opaque physical memory handle (`void*`).
pub type aclrtDrvMemHandle = *mut c_void;
/// `aclrtMemHandleType` (C enum).
pub type aclrtMemHandleType = c_int;
/// `aclrtMemAllocationType` (C enum).
pub type aclrtMemAllocationType = c_int;
/// `aclrtMemLocationType` (C enum).
pub type aclrtMemLocationType = c_int;
/// `aclrtMemGranularityOptions` (C enum).
pub type aclrtMemGranularityOptions = c_int;

/// `ACL_MEM_HANDLE_TYPE_NONE`.
pub const ACL_MEM_HANDLE_TYPE_NONE: aclrtMemHandleType = 0;
/// `ACL_MEM_ALLOCATION_TYPE_PINNED`.
pub const ACL_MEM_ALLOCATION_TYPE_PINNED: aclrtMemAllocationType = 0;
/// `ACL_HBM_MEM_HUGE`: device memory in 2 MB pages (what torch_npu maps by default).
pub const ACL_HBM_MEM_HUGE: aclrtMemAttr = 4;
/// `ACL_HBM_MEM_HUGE1G`: device memory in 1 GB pages (torch_npu's `page_size:1g`).
pub const ACL_HBM_MEM_HUGE1G: aclrtMemAttr = 10;
/// `ACL_MEM_LOCATION_TYPE_DEVICE`.
pub const ACL_MEM_LOCATION_TYPE_DEVICE: aclrtMemLocationType = 1;
/// `ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM`.
pub const ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM: aclrtMemGranularityOptions = 0;
/// `ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED` (newest runtime only).
pub const ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED: aclrtMemGranularityOptions = 1;

/// `typedef struct { uint32_t id; aclrtMemLocationType type; } aclrtMemLocation;` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct aclrtMemLocation {
    /// The device id (for `ACL_MEM_LOCATION_TYPE_DEVICE`).
    pub id: u32,
    /// `ACL_MEM_LOCATION_TYPE_DEVICE` = 1.
    pub r#type: aclrtMemLocationType,
}

/// `aclrtPhysicalMemProp` (32 bytes, alignment 8): what `aclrtMallocPhysical` and
/// `aclrtMemGetAllocationGranularity` read.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct aclrtPhysicalMemProp {
    /// `ACL_MEM_HANDLE_TYPE_NONE` = 0.
    pub handleType: aclrtMemHandleType,
    /// `ACL_MEM_ALLOCATION_TYPE_PINNED` = 0.
    pub allocationType: aclrtMemAllocationType,
    /// `ACL_HBM_MEM_HUGE` = 4 (2 MB pages) or `ACL_HBM_MEM_HUGE1G` = 10.
    pub memAttr: aclrtMemAttr,
    /// `{ device, ACL_MEM_LOCATION_TYPE_DEVICE }`.
    pub location: aclrtMemLocation,
    /// Must be 0.
    pub reserve: u64,
}

impl aclrtPhysicalMemProp {
    /// Pinned device memory of `device` in 2 MB pages, as torch_npu's expandable segments
    /// ask for it.
    pub const fn device_huge(device: u32) -> aclrtPhysicalMemProp {
        aclrtPhysicalMemProp {
            handleType: ACL_MEM_HANDLE_TYPE_NONE,
            allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
            memAttr: ACL_HBM_MEM_HUGE,
            location: aclrtMemLocation {
                id: device,
                r#type: ACL_MEM_LOCATION_TYPE_DEVICE,
            },
            reserve: 0,
        }
    }
}

// The layout the header gives (a mismatch would be a silent ABI break).
const _: () = {
    assert!(std::mem::size_of::<aclrtMemLocation>() == 8);
    assert!(std::mem::size_of::<aclrtPhysicalMemProp>() == 32);
    assert!(std::mem::align_of::<aclrtPhysicalMemProp>() == 8);
    assert!(std::mem::offset_of!(aclrtPhysicalMemProp, memAttr) == 8);
    assert!(std::mem::offset_of!(aclrtPhysicalMemProp, location) == 12);
    assert!(std::mem::offset_of!(aclrtPhysicalMemProp, reserve) == 24);
};

/// `aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void
/// *expectPtr, uint64_t flags)`.
pub type aclrtReserveMemAddress = unsafe extern "C" fn(
    vir_ptr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    expect_ptr: *mut c_void,
    flags: u64,
) -> aclError;
/// `aclError aclrtReleaseMemAddress(void *virPtr)`.
pub type aclrtReleaseMemAddress = unsafe extern "C" fn(vir_ptr: *mut c_void) -> aclError;
/// `aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size, const
/// aclrtPhysicalMemProp *prop, uint64_t flags)`.
pub type aclrtMallocPhysical = unsafe extern "C" fn(
    handle: *mut aclrtDrvMemHandle,
    size: usize,
    prop: *const aclrtPhysicalMemProp,
    flags: u64,
) -> aclError;
/// `aclError aclrtFreePhysical(aclrtDrvMemHandle handle)`.
pub type aclrtFreePhysical = unsafe extern "C" fn(handle: aclrtDrvMemHandle) -> aclError;
/// `aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle
/// handle, uint64_t flags)`.
pub type aclrtMapMem = unsafe extern "C" fn(
    vir_ptr: *mut c_void,
    size: usize,
    offset: usize,
    handle: aclrtDrvMemHandle,
    flags: u64,
) -> aclError;
/// `aclError aclrtUnmapMem(void *virPtr)`.
pub type aclrtUnmapMem = unsafe extern "C" fn(vir_ptr: *mut c_void) -> aclError;
/// `aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop,
/// aclrtMemGranularityOptions option, size_t *granularity)`.
pub type aclrtMemGetAllocationGranularity = unsafe extern "C" fn(
    prop: *mut aclrtPhysicalMemProp,
    option: aclrtMemGranularityOptions,
    granularity: *mut usize,
) -> aclError;

// ---- Stand-in harness hooks (exported only by the stand-in library, never by CANN) ----

/// `int32_t memreuse_standin_configure(uint32_t devices, uint64_t capacity, int32_t
/// deterministic, uint64_t seed, uint64_t timeout_ms)`.
pub type memreuse_standin_configure = unsafe extern "C" fn(
    devices: u32,
    capacity: u64,
    deterministic: i32,
    seed: u64,
    timeout_ms: u64,
) -> i32;
/// `int32_t memreuse_standin_set_race_detection(int32_t enabled)`: whether the next
/// configure gives the devices a race detector; returns the previous setting.
pub type memreuse_standin_set_race_detection = unsafe extern "C" fn(enabled: i32) -> i32;
/// `int32_t memreuse_standin_annotate(int32_t device, uint64_t ptr, uint64_t bytes,
/// uint64_t id)`.
pub type memreuse_standin_annotate =
    unsafe extern "C" fn(device: i32, ptr: u64, bytes: u64, id: u64) -> i32;
/// `int32_t memreuse_standin_set_op_label(int32_t device, const char *label, size_t len)`.
pub type memreuse_standin_set_op_label =
    unsafe extern "C" fn(device: i32, label: *const c_char, len: usize) -> i32;
/// `int32_t memreuse_standin_delay(aclrtStream stream, uint64_t micros)`.
pub type memreuse_standin_delay = unsafe extern "C" fn(stream: aclrtStream, micros: u64) -> i32;
/// `int64_t memreuse_standin_race_reports(int32_t device, char *buf, size_t cap)`: writes
/// the device's race reports as text lines and returns the bytes needed.
pub type memreuse_standin_race_reports =
    unsafe extern "C" fn(device: i32, buf: *mut c_char, cap: usize) -> i64;

/// An untyped pointer, as the C signatures use.
pub type VoidPtr = *mut c_void;
