//! Race reports read from the stand-in's `memreuse_standin_race_reports` hook (a real CANN
//! install has no race detector: `race_reports` is `None` there).

use memreuse_core::{AccessKind, AllocationId, RaceAccess, RaceKind, RaceReport, StreamId};

/// Parses the stand-in's race report lines (format in the stand-in's `harness.rs`).
pub(crate) fn parse(text: &str) -> Vec<RaceReport> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split('\t');
            let head: Vec<&str> = parts.next()?.split(' ').collect();
            let (earlier_op, later_op) = (parts.next()?, parts.next()?);
            if head.len() != 9 {
                return None;
            }
            let num = |i: usize| head[i].parse::<u64>().ok();
            let access = |at: usize, op: &str| {
                Some(RaceAccess {
                    op: op.to_owned(),
                    stream: StreamId(num(at)?),
                    kind: if head[at + 1] == "W" {
                        AccessKind::Write
                    } else {
                        AccessKind::Read
                    },
                    allocation: num(at + 2).filter(|&a| a != 0).map(AllocationId),
                })
            };
            Some(RaceReport {
                kind: if head[0] == "reuse" {
                    RaceKind::Reuse
                } else {
                    RaceKind::Schedule
                },
                range: num(1)?..num(2)?,
                earlier: access(3, earlier_op)?,
                later: access(6, later_op)?,
            })
        })
        .collect()
}
