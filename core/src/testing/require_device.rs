//! `MEMREUSE_REQUIRE_DEVICE=1`: tests that need a real device skip (printing `skipped: ...`)
//! where there is none, so CI on CPUs passes them; a GPU or NPU runner sets this variable so
//! that the same tests fail instead of going green having tested nothing.

/// The variable a device runner sets.
pub const REQUIRE_DEVICE_VAR: &str = "MEMREUSE_REQUIRE_DEVICE";

/// True when `MEMREUSE_REQUIRE_DEVICE` is `1`.
pub fn device_required() -> bool {
    std::env::var(REQUIRE_DEVICE_VAR).is_ok_and(|v| v.trim() == "1")
}

/// A test cannot find its device: prints `skipped: {reason}` and returns, or, with
/// `MEMREUSE_REQUIRE_DEVICE=1`, fails the test with the reason.
///
/// # Panics
/// With `MEMREUSE_REQUIRE_DEVICE=1` (on purpose: the test must fail there).
pub fn skip_without_device(reason: &str) {
    assert!(
        !device_required(),
        "{REQUIRE_DEVICE_VAR}=1 but the device is missing: {reason}"
    );
    println!("skipped: {reason}");
}
