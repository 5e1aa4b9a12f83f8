//! What a vendor face tells the engine so the shared harness hooks answer in its terms.

use std::ffi::{CStr, c_void};

use memreuse_core::BackendError;
use memreuse_mock::{MockConfig, MockDevice, MockStream};

use crate::code::ResultCode;

/// One vendor library's face: its codes, its cluster and its handle lookups. Implemented by
/// a unit type of the stand-in and passed to [`crate::export_harness!`].
pub trait Face: 'static {
    /// The status code type of the library's hooks (ACL's `i32`, `CUresult`).
    type Code: ResultCode;

    /// What a panic inside a hook answers (the library's internal error).
    const INTERNAL: Self::Code;
    /// A bad argument to a hook (zero devices or capacity, a null label).
    const INVALID_VALUE: Self::Code;
    /// A device index the cluster does not have.
    const INVALID_DEVICE: Self::Code;

    /// The cluster's device `index`.
    fn device(index: usize) -> Option<MockDevice>;

    /// Races found on every device of the cluster.
    fn race_count() -> u64;

    /// Replaces the cluster with `devices` devices of `config` and resets every table of
    /// the old one (the engine has built `config` from the hook's arguments).
    fn configure(devices: usize, config: MockConfig) -> Result<(), Self::Code>;

    /// The device and mock stream behind a stream handle (null: the face's default).
    fn stream(raw: *mut c_void) -> Result<(MockDevice, MockStream), Self::Code>;

    /// The face's code for an error of the mock.
    fn mock_code(e: &BackendError) -> Self::Code;

    /// Stream handles not destroyed (the harness's leak count).
    fn live_streams() -> u64;

    /// The build variant (install profile): `default` or a feature's name.
    fn profile() -> &'static CStr;
}
