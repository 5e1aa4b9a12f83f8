//! Injected call failures: "the `nth` next call of symbol `name` answers `code`". A test
//! reaches a vendor error path (a map that fails, a communicator call that is refused)
//! without a stand-in rule for each; the call fails before its body runs, so it has no
//! effect, as a real library's refused call has none.

use std::collections::HashMap;

use parking_lot::Mutex;

/// One pending failure of a symbol.
struct Pending {
    /// Calls of the symbol still to pass before the failing one (0: the next one fails).
    skip: u64,
    /// The raw code the failing call answers.
    code: i64,
}

static PENDING: Mutex<Option<HashMap<String, Vec<Pending>>>> = Mutex::new(None);

/// Makes the `nth` next call (1: the very next) of the export `name` answer `code` without
/// running. Several failures of one symbol can be pending. Returns false (nothing injected)
/// when `nth` is 0 or `code` is 0 (success is not a failure).
pub fn inject_call_failure(name: &str, nth: u64, code: i64) -> bool {
    if nth == 0 || code == 0 {
        return false;
    }
    PENDING
        .lock()
        .get_or_insert_with(HashMap::new)
        .entry(name.to_owned())
        .or_default()
        .push(Pending {
            skip: nth - 1,
            code,
        });
    true
}

/// Failures injected and not yet taken, over every symbol.
#[must_use]
pub fn pending_call_failures() -> u64 {
    PENDING
        .lock()
        .as_ref()
        .map_or(0, |m| m.values().map(|v| v.len() as u64).sum())
}

/// Forgets every pending failure (a fresh cluster was configured).
pub(crate) fn clear() {
    PENDING.lock().take();
}

/// Called once per call of `name`: the raw code it must answer, if a failure is due.
pub(crate) fn take(name: &str) -> Option<i64> {
    let mut guard = PENDING.lock();
    let list = guard.as_mut()?.get_mut(name)?;
    let mut due = None;
    for (i, p) in list.iter_mut().enumerate() {
        if p.skip == 0 {
            if due.is_none() {
                due = Some(i);
            }
        } else {
            p.skip -= 1;
        }
    }
    due.map(|i| list.remove(i).code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nth_call_fails_once_and_others_pass() {
        assert!(inject_call_failure("faults_test_symbol", 2, 7));
        assert_eq!(take("faults_test_symbol"), None);
        assert_eq!(take("faults_test_symbol"), Some(7));
        assert_eq!(take("faults_test_symbol"), None);
        assert!(!inject_call_failure("faults_test_symbol", 0, 7));
        assert!(!inject_call_failure("faults_test_symbol", 1, 0));
    }
}
