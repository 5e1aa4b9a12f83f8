//! memreuse-mock: a strict simulated device (placeholder until the mock lands).
