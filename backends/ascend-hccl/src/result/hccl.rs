//! HCCL's entry points, one thin function each: plain Rust arguments in, the `sys`
//! function pointer called, the status mapped to a `Result`.
//!
//! Every function returns the bare status as [`HcclError`]: the communicator names each
//! call in its errors itself (the barrier fallback's all_reduce is "HcclAllReduce
//! (barrier)"), and it acts on some codes (`HCCL_E_AGAIN` from a destroy, `HCCL_E_NOT_SUPPORT`
//! from the optional calls). Communicator and stream handles passed in are live (the
//! communicator and stream layers own them), which is what each `SAFETY` comment relies on;
//! device addresses are checked by HCCL.

use memreuse_core::DevicePtr;

use super::HcclError;
use crate::conversions::device_ptr;
use crate::loader::Api;
use crate::sys::{self, HcclRootInfo};

/// The status as a `Result`.
fn status(code: sys::HcclResult) -> Result<(), HcclError> {
    if code == sys::HCCL_SUCCESS {
        Ok(())
    } else {
        Err(HcclError(code))
    }
}

/// `HcclGetRootInfo(&info)` on the bound device.
pub(crate) fn get_root_info(api: &Api) -> Result<HcclRootInfo, HcclError> {
    let mut info = HcclRootInfo::zeroed();
    // SAFETY: `info` is a valid, writable HcclRootInfo (4108 bytes).
    status(unsafe { (api.HcclGetRootInfo)(&raw mut info) })?;
    Ok(info)
}

/// `HcclCommInitRootInfo(size, root, rank, &comm)`: blocks until every rank joined.
pub(crate) fn comm_init_root_info(
    api: &Api,
    size: u32,
    root: &HcclRootInfo,
    rank: u32,
) -> Result<sys::HcclComm, HcclError> {
    let mut raw: sys::HcclComm = std::ptr::null_mut();
    // SAFETY: `root` points to 4108 readable bytes; `raw` is a valid out-pointer.
    status(unsafe { (api.HcclCommInitRootInfo)(size, root, rank, &raw mut raw) })?;
    Ok(raw)
}

/// `HcclCommDestroy(comm)`.
pub(crate) fn comm_destroy(api: &Api, comm: sys::HcclComm) -> Result<(), HcclError> {
    // SAFETY: the handle came from `comm_init_root_info` and the caller destroys it once
    // (the communicator marks it destroyed only after a success, under its lock).
    status(unsafe { (api.HcclCommDestroy)(comm) })
}

/// `HcclAllReduce(buf, buf, count, dtype, op, comm, s)`, in place.
pub(crate) fn all_reduce(
    api: &Api,
    buf: DevicePtr,
    count: u64,
    dtype: sys::HcclDataType,
    op: sys::HcclReduceOp,
    comm: sys::HcclComm,
    stream: sys::aclrtStream,
) -> Result<(), HcclError> {
    let p = device_ptr(buf);
    // SAFETY: device addresses are checked by HCCL; live comm and stream handles.
    status(unsafe { (api.HcclAllReduce)(p, p, count, dtype, op, comm, stream) })
}

/// `HcclReduceScatter(input, output, count, dtype, op, comm, s)`.
#[expect(
    clippy::too_many_arguments,
    reason = "one argument per C parameter, plus the loaded library"
)]
pub(crate) fn reduce_scatter(
    api: &Api,
    input: DevicePtr,
    output: DevicePtr,
    count: u64,
    dtype: sys::HcclDataType,
    op: sys::HcclReduceOp,
    comm: sys::HcclComm,
    stream: sys::aclrtStream,
) -> Result<(), HcclError> {
    // SAFETY: device addresses are checked by HCCL; live comm and stream handles.
    status(unsafe {
        (api.HcclReduceScatter)(
            device_ptr(input),
            device_ptr(output),
            count,
            dtype,
            op,
            comm,
            stream,
        )
    })
}

/// `HcclAllGather(input, output, count, dtype, comm, s)`.
pub(crate) fn all_gather(
    api: &Api,
    input: DevicePtr,
    output: DevicePtr,
    count: u64,
    dtype: sys::HcclDataType,
    comm: sys::HcclComm,
    stream: sys::aclrtStream,
) -> Result<(), HcclError> {
    // SAFETY: device addresses are checked by HCCL; live comm and stream handles.
    status(unsafe {
        (api.HcclAllGather)(
            device_ptr(input),
            device_ptr(output),
            count,
            dtype,
            comm,
            stream,
        )
    })
}

/// `HcclAlltoAll(input, count, dtype, output, count, dtype, comm, s)`: `count` elements
/// to and from each rank.
pub(crate) fn all_to_all(
    api: &Api,
    input: DevicePtr,
    output: DevicePtr,
    count: u64,
    dtype: sys::HcclDataType,
    comm: sys::HcclComm,
    stream: sys::aclrtStream,
) -> Result<(), HcclError> {
    // SAFETY: device addresses are checked by HCCL; live comm and stream handles.
    status(unsafe {
        (api.HcclAlltoAll)(
            device_ptr(input),
            count,
            dtype,
            device_ptr(output),
            count,
            dtype,
            comm,
            stream,
        )
    })
}

/// `HcclBroadcast(buf, count, dtype, root, comm, s)`.
pub(crate) fn broadcast(
    api: &Api,
    buf: DevicePtr,
    count: u64,
    dtype: sys::HcclDataType,
    root: u32,
    comm: sys::HcclComm,
    stream: sys::aclrtStream,
) -> Result<(), HcclError> {
    // SAFETY: device addresses are checked by HCCL; live comm and stream handles.
    status(unsafe { (api.HcclBroadcast)(device_ptr(buf), count, dtype, root, comm, stream) })
}

/// `HcclSend(buf, count, dtype, peer, comm, s)`.
pub(crate) fn send(
    api: &Api,
    buf: DevicePtr,
    count: u64,
    dtype: sys::HcclDataType,
    peer: u32,
    comm: sys::HcclComm,
    stream: sys::aclrtStream,
) -> Result<(), HcclError> {
    // SAFETY: device addresses are checked by HCCL; live comm and stream handles.
    status(unsafe { (api.HcclSend)(device_ptr(buf), count, dtype, peer, comm, stream) })
}

/// `HcclRecv(buf, count, dtype, peer, comm, s)`.
pub(crate) fn recv(
    api: &Api,
    buf: DevicePtr,
    count: u64,
    dtype: sys::HcclDataType,
    peer: u32,
    comm: sys::HcclComm,
    stream: sys::aclrtStream,
) -> Result<(), HcclError> {
    // SAFETY: device addresses are checked by HCCL; live comm and stream handles.
    status(unsafe { (api.HcclRecv)(device_ptr(buf), count, dtype, peer, comm, stream) })
}

/// `HcclBarrier(comm, s)` (optional symbol, resolved as `f`).
pub(crate) fn barrier(
    f: sys::HcclBarrier,
    comm: sys::HcclComm,
    stream: sys::aclrtStream,
) -> Result<(), HcclError> {
    // SAFETY: live comm and stream handles.
    status(unsafe { f(comm, stream) })
}

/// `HcclGroupStart()` (optional symbol, resolved as `f`).
pub(crate) fn group_start(f: sys::HcclGroupStart) -> Result<(), HcclError> {
    // SAFETY: no arguments.
    status(unsafe { f() })
}

/// `HcclGroupEnd()` (optional symbol, resolved as `f`).
pub(crate) fn group_end(f: sys::HcclGroupEnd) -> Result<(), HcclError> {
    // SAFETY: no arguments.
    status(unsafe { f() })
}

/// `HcclGetCommAsyncError(comm, &code)`: the communicator's asynchronous error code
/// (`HCCL_SUCCESS` when there is none).
pub(crate) fn get_comm_async_error(
    api: &Api,
    comm: sys::HcclComm,
) -> Result<sys::HcclResult, HcclError> {
    let mut code = sys::HCCL_SUCCESS;
    // SAFETY: live comm handle, valid out-pointer.
    status(unsafe { (api.HcclGetCommAsyncError)(comm, &raw mut code) })?;
    Ok(code)
}
