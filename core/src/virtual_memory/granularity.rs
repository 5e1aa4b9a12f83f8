//! The alignment rules of the `vm_*` calls: the granularity a driver reports must be a
//! power of two of at least [`MIN_GRANULARITY`] bytes, and every size and address passed
//! to the calls a non-zero multiple of it. A port checks both before it calls its driver.

#![forbid(unsafe_code)]

use crate::error::BackendError;

/// The smallest granularity a backend may accept from its driver: the 256-byte allocation
/// alignment every backend keeps ([`crate::Capabilities::allocation_alignment`]).
pub const MIN_GRANULARITY: u64 = 256;

/// Who reported a granularity, named in the error when the value breaks the rules.
#[derive(Clone, Copy, Debug)]
pub struct GranularitySource {
    /// The backend's name (`"cuda"`, `"ascend"`).
    pub backend: &'static str,
    /// The driver call that reported it (`"cuMemGetAllocationGranularity"`).
    pub call: &'static str,
    /// The name of the status the call returned (it succeeded: `"CUDA_SUCCESS"`).
    pub success_code: &'static str,
    /// What answered, in words (`"driver"`, `"runtime"`).
    pub reporter: &'static str,
}

/// `granularity` as the driver reported it, if it keeps the core's rules (a power of two
/// of at least [`MIN_GRANULARITY`]). Anything else is the driver's fault, not the
/// caller's: a [`BackendError::Device`] naming `source.call`, never `InvalidArgument`.
pub fn check_granularity(
    granularity: u64,
    source: &GranularitySource,
) -> Result<u64, BackendError> {
    if granularity.is_power_of_two() && granularity >= MIN_GRANULARITY {
        return Ok(granularity);
    }
    Err(BackendError::Device {
        backend: source.backend.to_owned(),
        call: source.call,
        code: 0,
        code_name: source.success_code.to_owned(),
        message: format!(
            "the {} reported a granularity of {granularity} bytes, not a power of two of at \
             least {MIN_GRANULARITY}",
            source.reporter
        ),
    })
}

/// `value` (the `what` of `call`: `"size"`, `"address"`) is a non-zero multiple of
/// `granularity`; else [`BackendError::InvalidArgument`] of `backend` saying so.
pub fn check_aligned(
    backend: &str,
    call: &'static str,
    what: &str,
    value: u64,
    granularity: u64,
) -> Result<(), BackendError> {
    if value == 0 || value % granularity != 0 {
        return Err(BackendError::InvalidArgument {
            backend: backend.to_owned(),
            call,
            reason: format!(
                "{what} {value:#x} is not a non-zero multiple of the granularity {granularity}"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 2 << 20;

    const CUDA: GranularitySource = GranularitySource {
        backend: "cuda",
        call: "cuMemGetAllocationGranularity",
        success_code: "CUDA_SUCCESS",
        reporter: "driver",
    };

    #[test]
    fn a_granularity_breaking_the_core_rules_is_the_drivers_error() {
        for good in [256, 2 << 20, 1 << 30] {
            assert_eq!(check_granularity(good, &CUDA).unwrap(), good);
        }
        for bad in [0, 128, 3 << 20, (2 << 20) + 256] {
            match check_granularity(bad, &CUDA) {
                Err(BackendError::Device {
                    backend,
                    call,
                    code_name,
                    message,
                    ..
                }) => {
                    assert_eq!((backend.as_str(), call), ("cuda", CUDA.call));
                    assert_eq!(code_name, "CUDA_SUCCESS");
                    assert!(message.contains(&format!("{bad} bytes")), "{message}");
                    assert!(message.starts_with("the driver reported"), "{message}");
                }
                other => panic!("{bad}: expected a Device error, got {other:?}"),
            }
        }
    }

    #[test]
    fn sizes_and_addresses_are_non_zero_multiples_of_the_granularity() {
        check_aligned("cuda", "vm_map", "address", 3 * G, G).unwrap();
        for (value, rule) in [(G + 1, "granularity"), (0, "non-zero"), (G / 2, "0x100000")] {
            match check_aligned("ascend", "vm_reserve", "size", value, G) {
                Err(BackendError::InvalidArgument {
                    backend,
                    call,
                    reason,
                }) => {
                    assert_eq!((backend.as_str(), call), ("ascend", "vm_reserve"));
                    assert!(reason.starts_with("size "), "{reason}");
                    assert!(reason.contains(rule), "{value}: {reason}");
                }
                other => panic!("{value}: expected InvalidArgument, got {other:?}"),
            }
        }
    }
}
