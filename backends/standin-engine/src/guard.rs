//! The wrapper every export runs its body under, and the per-symbol call counters it keeps.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use parking_lot::Mutex;

use crate::code::ResultCode;
use crate::faults;

static CALLS: Mutex<Option<HashMap<&'static str, u64>>> = Mutex::new(None);

/// How often export `name` was called in this process (through [`guard`]).
#[must_use]
pub fn calls_of(name: &str) -> u64 {
    CALLS
        .lock()
        .as_ref()
        .and_then(|m| m.get(name).copied())
        .unwrap_or(0)
}

/// Runs an exported function's body: counts the call, answers an injected failure of
/// `name` when one is due (the body does not run), and turns `Err(code)` and panics
/// (`panic_code`) into a status code, so nothing unwinds across the C boundary.
pub fn guard<C: ResultCode>(
    name: &'static str,
    panic_code: C,
    f: impl FnOnce() -> Result<(), C>,
) -> C {
    *CALLS
        .lock()
        .get_or_insert_with(HashMap::new)
        .entry(name)
        .or_insert(0) += 1;
    if let Some(code) = faults::take(name).and_then(C::from_raw) {
        return code;
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => C::SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => panic_code,
    }
}

/// Writes `value` through an out-pointer after the null check (`null_code` when null).
///
/// # Safety
/// `out` is null or valid for a write of `T`.
pub unsafe fn write_out<T, C>(out: *mut T, value: T, null_code: C) -> Result<(), C> {
    if out.is_null() {
        return Err(null_code);
    }
    // SAFETY: not null (checked); valid for writes by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_the_panic_code_and_calls_are_counted() {
        let before = calls_of("guard_test_symbol");
        assert_eq!(guard("guard_test_symbol", 9_i32, || panic!("bug")), 9);
        assert_eq!(guard("guard_test_symbol", 9_i32, || Err(3)), 3);
        assert_eq!(guard("guard_test_symbol", 9_u32, || Ok(())), 0);
        assert_eq!(calls_of("guard_test_symbol"), before + 3);
    }

    #[test]
    fn an_injected_failure_answers_without_running_the_body() {
        assert!(crate::inject_call_failure("guard_fault_symbol", 1, 46));
        let mut ran = false;
        assert_eq!(
            guard("guard_fault_symbol", 1_u32, || {
                ran = true;
                Ok(())
            }),
            46
        );
        assert!(!ran);
        assert_eq!(guard("guard_fault_symbol", 1_u32, || Ok(())), 0);
    }
}
