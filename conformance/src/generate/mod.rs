//! Schedule generators (in progress).
