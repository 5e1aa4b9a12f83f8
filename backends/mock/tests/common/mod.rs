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

/// Little-endian bytes of `v` (what a device buffer of f32 holds).
pub fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The f32 values of little-endian `b`.
pub fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
