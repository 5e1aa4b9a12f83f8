//! Race reports read from the stand-in's `memreuse_standin_race_reports` hook (a real CANN
//! install has no race detector: `race_reports` is `None` there). The line format has one
//! definition, shared by the stand-in engine that writes it and every backend that reads it.

/// Parses the stand-in's race report lines.
pub(crate) use memreuse_core::race::parse_race_lines as parse;
