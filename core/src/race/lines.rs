//! The text form of race reports that crosses a C boundary: the stand-in libraries
//! (`memreuse_standin_race_reports`) write it and the backends that load them read it back,
//! so both ends share one definition of the format.
//!
//! One line per report: `KIND START END`, then for the earlier and the later access
//! `STREAM R|W ALLOC`, then a tab, the earlier op, a tab, the later op. KIND is `reuse` or
//! `schedule`; ALLOC is 0 when the bytes were not annotated; tabs and newlines inside op
//! names become spaces.

use std::fmt::Write as _;

use super::report::{AccessKind, RaceAccess, RaceKind, RaceReport};
use crate::ids::{AllocationId, StreamId};

/// The reports as lines (format in the module docs).
#[must_use]
pub fn format_race_lines(reports: &[RaceReport]) -> String {
    let mut text = String::new();
    for r in reports {
        let kind = match r.kind {
            RaceKind::Reuse => "reuse",
            RaceKind::Schedule => "schedule",
        };
        let _ = write!(text, "{kind} {} {}", r.range.start, r.range.end);
        access_text(&mut text, &r.earlier);
        access_text(&mut text, &r.later);
        let _ = writeln!(text, "\t{}\t{}", clean(&r.earlier.op), clean(&r.later.op));
    }
    text
}

fn access_text(out: &mut String, a: &RaceAccess) {
    let kind = match a.kind {
        AccessKind::Read => 'R',
        AccessKind::Write => 'W',
    };
    let _ = write!(
        out,
        " {} {kind} {}",
        a.stream.0,
        a.allocation.map_or(0, |id| id.0)
    );
}

/// An op name with the separators of the format replaced, so it stays one field.
fn clean(op: &str) -> String {
    op.replace(['\t', '\n'], " ")
}

/// Parses lines written by [`format_race_lines`]; a line that does not have the format is
/// skipped (it came from a library this crate did not build).
#[must_use]
pub fn parse_race_lines(text: &str) -> Vec<RaceReport> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<RaceReport> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn race_report_lines_parse_and_bad_lines_are_skipped() {
        let text = "reuse 512 1024 3 W 7 4 R 9\tmemset\tcopy\nbroken line\n";
        let r = parse_race_lines(text);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].kind, RaceKind::Reuse);
        assert_eq!(r[0].range, 512..1024);
        assert_eq!(r[0].earlier.allocation, Some(AllocationId(7)));
        assert_eq!(r[0].later.kind, AccessKind::Read);
        assert_eq!(r[0].later.op, "copy");
    }

    #[test]
    fn formatted_reports_read_back_identical_with_separators_in_op_names_flattened() {
        let report = RaceReport {
            kind: RaceKind::Schedule,
            range: 4096..8192,
            earlier: RaceAccess {
                op: "all_reduce\t[iter 2]".to_owned(),
                stream: StreamId(5),
                kind: AccessKind::Write,
                allocation: None,
            },
            later: RaceAccess {
                op: "copy".to_owned(),
                stream: StreamId(6),
                kind: AccessKind::Read,
                allocation: Some(AllocationId(11)),
            },
        };
        let text = format_race_lines(std::slice::from_ref(&report));
        assert_eq!(
            text,
            "schedule 4096 8192 5 W 0 6 R 11\tall_reduce [iter 2]\tcopy\n"
        );
        let back = parse_race_lines(&text);
        let mut expected = report;
        expected.earlier.op = "all_reduce [iter 2]".to_owned();
        assert_eq!(back, vec![expected]);
    }
}
