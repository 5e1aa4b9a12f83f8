//! Parse errors are typed and name the file, the phase and the op index.

use memreuse_conformance::schedule::{OpKind, ParseErrorKind as P, Phase, Schedule};

fn err(text: &str) -> memreuse_conformance::schedule::ParseError {
    Schedule::from_json_str("f.json", text).expect_err("must not parse")
}

fn with_body(body: &str) -> String {
    format!(r#"{{"format":"memreuse.schedule/1","name":"n","world_size":2,"body":{body}}}"#)
}

#[test]
fn not_json_and_not_an_object() {
    assert!(matches!(err("{").kind, P::NotJson(_)));
    assert_eq!(err("[1]").kind, P::NotAnObject);
    assert_eq!(err("[1]").file, "f.json");
}

#[test]
fn wrong_or_missing_format() {
    assert_eq!(
        err(r#"{"format":"memreuse.schedule/2","name":"n","world_size":1,"body":[]}"#).kind,
        P::WrongFormat("memreuse.schedule/2".into())
    );
    assert_eq!(
        err(r#"{"name":"n","world_size":1,"body":[]}"#).kind,
        P::MissingField("format".into())
    );
}

#[test]
fn unknown_and_missing_top_level_fields() {
    assert_eq!(
        err(r#"{"format":"memreuse.schedule/1","name":"n","world_size":1,"body":[],"extra":1}"#)
            .kind,
        P::UnknownField("extra".into())
    );
    assert_eq!(
        err(r#"{"format":"memreuse.schedule/1","name":"n","world_size":1}"#).kind,
        P::MissingField("body".into())
    );
}

#[test]
fn op_errors_name_phase_and_index() {
    let e = err(&with_body(r#"[{"op":"sync"},{"op":"teleport"}]"#));
    assert_eq!(
        (e.phase, e.op_index, e.kind.clone()),
        (Some(Phase::Body), Some(1), P::UnknownOp("teleport".into()))
    );
    assert!(
        e.to_string().starts_with("f.json: body op 1: unknown op"),
        "{e}"
    );
    let e = err(&with_body(
        r#"[{"op":"alloc","t":"a","elems":16,"colour":"red"}]"#,
    ));
    assert_eq!(
        (e.op_index, e.kind),
        (Some(0), P::UnknownField("colour".into()))
    );
    let e = err(&with_body(r#"[{"op":"alloc","t":"a"}]"#));
    assert_eq!(e.kind, P::MissingField("elems".into()));
    let e = err(&with_body(r#"[{"t":"a"}]"#));
    assert_eq!(e.kind, P::MissingField("op".into()));
    let text = r#"{"format":"memreuse.schedule/1","name":"n","world_size":2,"body":[],"teardown":[{"op":"sync"},{"op":"sync"},{"op":"free"}]}"#;
    let e = err(text);
    assert_eq!(
        (e.phase, e.op_index, e.kind),
        (Some(Phase::Teardown), Some(2), P::MissingField("t".into()))
    );
}

#[test]
fn batch_members_take_no_async_work_or_ranks() {
    let e = err(&with_body(
        r#"[{"op":"batch","ops":[{"op":"send","t":"a","peer":1,"async":true}]}]"#,
    ));
    assert_eq!(e.kind, P::UnknownField("async".into()));
    let e = err(&with_body(
        r#"[{"op":"batch","ops":[{"op":"recv","t":"a","peer":1,"ranks":[0]}]}]"#,
    ));
    assert_eq!(e.kind, P::UnknownField("ranks".into()));
    let e = err(&with_body(r#"[{"op":"batch","ops":[{"op":"barrier"}]}]"#));
    assert_eq!(e.kind, P::UnknownOp("barrier".into()), "{e}");
}

#[test]
fn integers_are_range_checked() {
    for bad in [
        r#"[{"op":"upload","t":"a","seed":4294967296}]"#,
        r#"[{"op":"upload","t":"a","seed":-1}]"#,
        r#"[{"op":"alloc","t":"a","elems":1.5}]"#,
        r#"[{"op":"alloc","t":"a","elems":"16"}]"#,
        r#"[{"op":"sync","ranks":[-1]}]"#,
        r#"[{"op":"all_reduce","t":"a","reduce":"avg"}]"#,
        r#"[{"op":"alloc","t":"a","elems":16,"dtype":"float"}]"#,
        r#"[{"op":"all_reduce","t":"a","async":"yes"}]"#,
    ] {
        let e = err(&with_body(bad));
        assert!(matches!(e.kind, P::InvalidValue(_)), "{bad}: {e}");
        assert_eq!(e.op_index, Some(0), "{bad}");
    }
    assert!(matches!(
        err(r#"{"format":"memreuse.schedule/1","name":"n","world_size":-2,"body":[]}"#).kind,
        P::InvalidValue(_)
    ));
}

#[test]
fn defaults_and_ranks_are_parsed() {
    let s = Schedule::from_json_str(
        "f",
        &with_body(r#"[{"op":"upload","t":"a","seed":4294967295,"ranks":[1]}]"#),
    )
    .expect("parses");
    assert_eq!(s.iterations, 1);
    assert_eq!(s.body[0].ranks, Some(vec![1]));
    assert_eq!(
        s.body[0].kind,
        OpKind::Upload {
            t: "a".into(),
            seed: u32::MAX
        }
    );
    assert!(s.setup.is_empty() && s.teardown.is_empty() && s.groups.is_empty());
}

#[test]
fn io_errors_name_the_file() {
    let e = Schedule::from_file(std::path::Path::new("/nonexistent/s.json")).expect_err("no file");
    assert_eq!(e.file, "/nonexistent/s.json");
    assert!(matches!(e.kind, P::Io(_)));
}

#[test]
fn duplicate_keys_are_rejected_everywhere() {
    // Before: last-wins, even for `format` and `world_size`.
    let cases = [
        r#"{"format":"memreuse.schedule/1","format":"memreuse.schedule/1","name":"n","world_size":1,"body":[]}"#.to_owned(),
        r#"{"format":"memreuse.schedule/1","name":"n","world_size":1,"world_size":2,"body":[]}"#.to_owned(),
        with_body(r#"[{"op":"alloc","t":"a","t":"b","elems":16}]"#),
        with_body(r#"[{"op":"batch","ops":[{"op":"send","t":"a","peer":1,"peer":0}]}]"#),
        r#"{"format":"memreuse.schedule/1","name":"n","world_size":2,"groups":{"g":[[0]],"g":[[1]]},"body":[]}"#.to_owned(),
    ];
    for text in &cases {
        let e = err(text);
        assert!(
            matches!(&e.kind, P::DuplicateKey(m) if m.starts_with("duplicate key \"")),
            "{text}: {e}"
        );
        assert!(e.to_string().contains("every key may appear once"), "{e}");
    }
}

#[test]
fn long_names_are_rejected_and_huge_values_are_not_echoed_in_full() {
    let long = "x".repeat(129);
    // Before: a 300-character name was accepted, and its artifact files were never written.
    let e = err(&format!(
        r#"{{"format":"memreuse.schedule/1","name":"{}","world_size":1,"body":[]}}"#,
        "x".repeat(65)
    ));
    assert!(
        matches!(&e.kind, P::NameTooLong { what, len: 65, max: 64, .. } if what == "name"),
        "{e}"
    );
    let e = err(&with_body(&format!(
        r#"[{{"op":"alloc","t":"{long}","elems":16}}]"#
    )));
    assert!(
        matches!(&e.kind, P::NameTooLong { what, .. } if what == "t"),
        "{e}"
    );
    assert_eq!((e.phase, e.op_index), (Some(Phase::Body), Some(0)));
    // 100 KB values in every echoing position: each message stays short and gives the length.
    let huge = "y".repeat(100_000);
    for text in [
        format!(r#"{{"format":"{huge}","name":"n","world_size":1,"body":[]}}"#),
        with_body(&format!(r#"[{{"op":"{huge}"}}]"#)),
        with_body(&format!(r#"[{{"op":"alloc","t":"a","elems":"{huge}"}}]"#)),
        with_body(&format!(
            r#"[{{"op":"alloc","t":"a","elems":16,"{huge}":1}}]"#
        )),
        format!(r#"{{"format":"memreuse.schedule/1","{huge}":1,"{huge}":2}}"#),
    ] {
        let msg = err(&text).to_string();
        assert!(msg.len() < 400, "{} bytes: {}", msg.len(), &msg[..400]);
        assert!(msg.contains("100000 bytes"), "{msg}");
    }
}
