//! The result codes a face's exports return: ACL and HCCL status codes are `i32`, `CUresult`
//! is `u32`, `ncclResult_t` is a C enum passed as `u32`.

/// A C status code type whose 0 means success.
pub trait ResultCode: Copy + Eq + Send + 'static {
    /// Success (0 in every API the stand-ins model).
    const SUCCESS: Self;

    /// The code for a raw value a harness call was given (`None`: it does not fit).
    fn from_raw(raw: i64) -> Option<Self>;
}

impl ResultCode for i32 {
    const SUCCESS: Self = 0;

    fn from_raw(raw: i64) -> Option<Self> {
        Self::try_from(raw).ok()
    }
}

impl ResultCode for u32 {
    const SUCCESS: Self = 0;

    fn from_raw(raw: i64) -> Option<Self> {
        Self::try_from(raw).ok()
    }
}
