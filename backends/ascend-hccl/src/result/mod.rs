//! Layer 2: every raw call of the ACL runtime, HCCL and the stand-in's hooks, and every
//! status checked and turned into a typed error.
//!
//! As cudarc's `result` module does, each vendor entry point has one thin function
//! (modules `acl`, `vm`, `hccl`, `standin`) that takes plain Rust types, calls the `sys`
//! function pointer and maps the status to a `Result`; the `unsafe` and its `SAFETY`
//! comment live there, once. Statuses are newtypes ([`AclError`], [`HcclError`]) with a
//! `.result()`-style check ([`acl_check`], [`hccl_check`]) that turns them into
//! [`BackendError`]s naming the call, the code and its symbolic name.
//! `ACL_ERROR_RT_MEMORY_ALLOCATION` (207001), `ACL_ERROR_RT_DEVICE_OOM` (207018) and
//! `HCCL_E_OOM` (24) become [`BackendError::OutOfMemory`], so the caching allocator's retry
//! chain (free cached blocks, retry, then `OutOfMemory`) applies; the synchronize and wait
//! timeouts (507046, 507047, 107019, 107020) and `HCCL_E_TIMEOUT` become
//! [`BackendError::Timeout`].

pub(crate) mod acl;
pub(crate) mod hccl;
pub(crate) mod standin;
pub(crate) mod vm;

use memreuse_core::BackendError;

use crate::sys;

/// Backend name used in every error.
pub const BACKEND: &str = "ascend";

/// `ACL_ERROR_RT_MEMORY_ALLOCATION`: the device is out of memory.
pub const ACL_ERROR_RT_MEMORY_ALLOCATION: i32 = 207_001;
/// `ACL_ERROR_RT_DEVICE_OOM`: the device is out of memory (newer runtimes).
pub const ACL_ERROR_RT_DEVICE_OOM: i32 = 207_018;
/// `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT`: `aclrtSynchronizeStreamWithTimeout` timed out.
pub const ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: i32 = 507_046;
/// `ACL_ERROR_RT_EVENT_SYNC_TIMEOUT`: an event synchronize timed out.
pub const ACL_ERROR_RT_EVENT_SYNC_TIMEOUT: i32 = 507_047;
/// `ACL_ERROR_RT_WAIT_TIMEOUT`.
pub const ACL_ERROR_RT_WAIT_TIMEOUT: i32 = 107_019;
/// `ACL_ERROR_RT_TASK_TIMEOUT`.
pub const ACL_ERROR_RT_TASK_TIMEOUT: i32 = 107_020;

/// ACL codes that mean "out of device memory".
const ACL_OOM: [i32; 2] = [ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_ERROR_RT_DEVICE_OOM];
/// ACL codes that mean "timed out".
const ACL_TIMEOUTS: [i32; 4] = [
    ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
    ACL_ERROR_RT_EVENT_SYNC_TIMEOUT,
    ACL_ERROR_RT_WAIT_TIMEOUT,
    ACL_ERROR_RT_TASK_TIMEOUT,
];

/// The ACL codes the backend names (`acl_base.h`, `rt_error_codes.h`).
pub const ACL_CODES: &[(i32, &str)] = &[
    (0, "ACL_SUCCESS"),
    (100_000, "ACL_ERROR_INVALID_PARAM"),
    (100_001, "ACL_ERROR_UNINITIALIZE"),
    (100_002, "ACL_ERROR_REPEAT_INITIALIZE"),
    (107_000, "ACL_ERROR_RT_PARAM_INVALID"),
    // rt_error_codes.h's "no current context" (no aclrtSetDevice).
    (107_002, "ACL_ERROR_RT_CONTEXT_NULL"),
    (107_019, "ACL_ERROR_RT_WAIT_TIMEOUT"),
    (107_020, "ACL_ERROR_RT_TASK_TIMEOUT"),
    (107_022, "ACL_ERROR_RT_DEVICE_TASK_ABORT"),
    (107_023, "ACL_ERROR_RT_STREAM_ABORT"),
    (200_000, "ACL_ERROR_BAD_ALLOC"),
    (200_001, "ACL_ERROR_API_NOT_SUPPORT"),
    (200_002, "ACL_ERROR_INVALID_DEVICE"),
    (207_000, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT"),
    (207_001, "ACL_ERROR_RT_MEMORY_ALLOCATION"),
    (207_007, "ACL_ERROR_RT_NO_EVENT_RESOURCE"),
    (207_018, "ACL_ERROR_RT_DEVICE_OOM"),
    (500_000, "ACL_ERROR_INTERNAL_ERROR"),
    (500_001, "ACL_ERROR_FAILURE"),
    (500_003, "ACL_ERROR_RT_FAILURE"),
    (507_000, "ACL_ERROR_RT_INTERNAL_ERROR"),
    (507_004, "ACL_ERROR_RT_STREAM_NOT_COMPLETE"),
    (507_006, "ACL_ERROR_RT_EVENT_NOT_COMPLETE"),
    (507_046, "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"),
    (507_047, "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT"),
    (507_053, "ACL_ERROR_RT_DEVICE_MEM_ERROR"),
    (507_054, "ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR"),
    (507_055, "ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR"),
    (507_056, "ACL_ERROR_RT_LINK_ERROR"),
    (507_904, "ACL_ERROR_RT_COMM_OP_RETRY_FAIL"),
];

/// The `HcclResult` names, indexed by value.
pub const HCCL_CODES: &[&str] = &[
    "HCCL_SUCCESS",
    "HCCL_E_PARA",
    "HCCL_E_PTR",
    "HCCL_E_MEMORY",
    "HCCL_E_INTERNAL",
    "HCCL_E_NOT_SUPPORT",
    "HCCL_E_NOT_FOUND",
    "HCCL_E_UNAVAIL",
    "HCCL_E_SYSCALL",
    "HCCL_E_TIMEOUT",
    "HCCL_E_OPEN_FILE_FAILURE",
    "HCCL_E_TCP_CONNECT",
    "HCCL_E_ROCE_CONNECT",
    "HCCL_E_TCP_TRANSFER",
    "HCCL_E_ROCE_TRANSFER",
    "HCCL_E_RUNTIME",
    "HCCL_E_DRV",
    "HCCL_E_PROFILING",
    "HCCL_E_CCE",
    "HCCL_E_NETWORK",
    "HCCL_E_AGAIN",
    "HCCL_E_REMOTE",
    "HCCL_E_SUSPENDING",
    "HCCL_E_OPRETRY_FAIL",
    "HCCL_E_OOM",
];

/// A failed ACL status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclError(pub sys::aclError);

impl AclError {
    /// The symbolic name (`ACL_ERROR_...`), or `ACL_ERROR_UNKNOWN` for codes outside the
    /// reference list.
    pub fn name(self) -> &'static str {
        ACL_CODES
            .iter()
            .find(|(c, _)| *c == self.0)
            .map_or("ACL_ERROR_UNKNOWN", |(_, n)| n)
    }

    /// The typed backend error for a failure of `call`. 207001 and 207018 are out of
    /// memory (`requested` bytes), the synchronize/wait timeouts are `Timeout`; everything
    /// else is a `Device` error with code and name.
    pub fn into_backend(self, call: &'static str, requested: u64) -> BackendError {
        if ACL_TIMEOUTS.contains(&self.0) {
            return BackendError::Timeout {
                backend: BACKEND.to_owned(),
                what: format!("{call} ({} {})", self.name(), self.0),
                millis: 0,
            };
        }
        if ACL_OOM.contains(&self.0) {
            return BackendError::out_of_memory(
                BACKEND,
                requested,
                format!("{call} returned {} ({})", self.name(), self.0),
            );
        }
        BackendError::Device {
            backend: BACKEND.to_owned(),
            call,
            code: i64::from(self.0),
            code_name: self.name().to_owned(),
            message: format!("ACL runtime call {call} failed"),
        }
    }
}

/// A failed `HcclResult`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HcclError(pub sys::HcclResult);

impl HcclError {
    /// The symbolic name (`HCCL_E_...`).
    pub fn name(self) -> &'static str {
        if self.0 == sys::HCCL_E_IN_STATUS {
            return "HCCL_E_IN_STATUS";
        }
        usize::try_from(self.0)
            .ok()
            .and_then(|i| HCCL_CODES.get(i))
            .copied()
            .unwrap_or("HCCL_E_UNKNOWN")
    }

    /// The typed backend error for a failure of `call`. `HCCL_E_TIMEOUT` is a `Timeout`,
    /// `HCCL_E_OOM` is `OutOfMemory`; everything else a `Device` error with code and name.
    pub fn into_backend(self, call: &'static str) -> BackendError {
        if self.0 == sys::HCCL_E_OOM {
            return BackendError::out_of_memory(
                BACKEND,
                0,
                format!("{call} returned HCCL_E_OOM (24)"),
            );
        }
        if self.0 == sys::HCCL_E_TIMEOUT {
            return BackendError::Timeout {
                backend: BACKEND.to_owned(),
                what: format!("{call} (HCCL_E_TIMEOUT)"),
                millis: 0,
            };
        }
        BackendError::Device {
            backend: BACKEND.to_owned(),
            call,
            code: i64::from(self.0),
            code_name: self.name().to_owned(),
            message: format!("HCCL call {call} failed"),
        }
    }
}

/// `Ok(())` for `ACL_SUCCESS`, the typed error otherwise (`requested`: bytes, for OOM).
pub fn acl_check(
    code: sys::aclError,
    call: &'static str,
    requested: u64,
) -> Result<(), BackendError> {
    if code == sys::ACL_SUCCESS {
        Ok(())
    } else {
        Err(AclError(code).into_backend(call, requested))
    }
}

/// `Ok(())` for `HCCL_SUCCESS`, the typed error otherwise.
pub fn hccl_check(code: sys::HcclResult, call: &'static str) -> Result<(), BackendError> {
    if code == sys::HCCL_SUCCESS {
        Ok(())
    } else {
        Err(HcclError(code).into_backend(call))
    }
}

/// The `Unavailable` error for a load failure (lists every path tried).
pub fn unavailable(e: &crate::loader::LoadError) -> BackendError {
    BackendError::Unavailable {
        backend: BACKEND.to_owned(),
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_acl_oom_codes_and_hccl_oom_are_out_of_memory() {
        for code in [207_001, 207_018] {
            let e = AclError(code).into_backend("aclrtMalloc", 64);
            assert!(e.is_out_of_memory(), "{code}: {e:?}");
        }
        assert!(
            HcclError(24)
                .into_backend("HcclAllReduce")
                .is_out_of_memory()
        );
        assert_eq!(AclError(207_018).name(), "ACL_ERROR_RT_DEVICE_OOM");
    }

    #[test]
    fn timeouts_and_status_codes_are_named() {
        for (code, name) in [
            (507_046, "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"),
            (507_047, "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT"),
            (107_019, "ACL_ERROR_RT_WAIT_TIMEOUT"),
            (107_020, "ACL_ERROR_RT_TASK_TIMEOUT"),
        ] {
            assert_eq!(AclError(code).name(), name);
            let e = AclError(code).into_backend("aclrtSynchronizeStreamWithTimeout", 0);
            assert!(matches!(e, BackendError::Timeout { .. }), "{code}: {e:?}");
            assert!(e.to_string().contains(name), "{e}");
        }
        assert_eq!(HcclError(1041).name(), "HCCL_E_IN_STATUS");
        assert_eq!(HcclError(20).name(), "HCCL_E_AGAIN");
    }
}
