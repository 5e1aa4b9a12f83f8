//! Helpers shared by the backend's integration tests.

pub mod standin;
