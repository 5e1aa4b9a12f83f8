//! memreuse-conformance (in progress).
