//! Helpers shared by the integration tests (included with `mod common;`).
#![allow(dead_code)]

use std::time::Duration;

use memreuse_core::{Backend, DevicePtr};
use memreuse_mock::{MockConfig, MockDevice, MockStream};

/// A backed device with 1 MiB and a generous host timeout.
pub fn device() -> MockDevice {
    MockDevice::new(MockConfig::with_capacity(1 << 20)).expect("device")
}

/// A device with `config` changes applied to the test defaults.
pub fn device_with(f: impl FnOnce(&mut MockConfig)) -> MockDevice {
    let mut c = MockConfig::with_capacity(1 << 20);
    f(&mut c);
    MockDevice::new(c).expect("device")
}

/// Reads `n` bytes at `p` through `stream` (blocking).
pub fn read(dev: &MockDevice, p: DevicePtr, n: usize, stream: &MockStream) -> Vec<u8> {
    let mut out = vec![0u8; n];
    dev.copy_device_to_host(&mut out, p, stream).expect("d2h");
    out
}

/// Microseconds of a duration, for `Backend::delay`.
pub fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}
