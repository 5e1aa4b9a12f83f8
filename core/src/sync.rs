//! Synchronization primitives for the code loom model-checks (the shelf hand-off).
//!
//! Under `--cfg loom` they are loom's, so `core/tests/loom_handoff.rs` explores every
//! interleaving of the real hand-off code; otherwise they are std's.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(loom)]
use loom::sync::Mutex as Inner;
#[cfg(not(loom))]
use std::sync::Mutex as Inner;

/// A mutex whose `lock` cannot fail: the protected data is a list of handles that no
/// panic can leave half-updated, so a poisoned lock is recovered rather than propagated.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(Inner<T>);

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Mutex(Inner::new(value))
    }

    pub(crate) fn lock(&self) -> impl std::ops::DerefMut<Target = T> + '_ {
        match self.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}
