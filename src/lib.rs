//! memreuse: facade crate.
pub use memreuse_core::*;
#[cfg(feature = "mock")]
pub use memreuse_mock as mock;
