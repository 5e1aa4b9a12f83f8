//! Parse + validate never panic: arbitrary JSON, and random mutations of valid schedules,
//! always yield an error or a schedule.

use memreuse_conformance::generate::{GenOptions, generate};
use memreuse_conformance::validate::{LoadError, load_str};
use proptest::prelude::*;
use serde_json::Value;

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (0u64..40).prop_map(Value::from),
        prop::sample::select(vec![
            "all_reduce",
            "send",
            "recv",
            "batch",
            "alloc",
            "free",
            "world",
            "compute",
            "w0",
            "b0",
            "sum",
            "max",
            "memreuse.schedule/1"
        ])
        .prop_map(Value::from),
        "[a-z_]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    prop::sample::select(vec![
                        "op", "t", "peer", "ranks", "work", "async", "elems", "group", "in", "out",
                        "root"
                    ])
                    .prop_map(str::to_owned),
                    "[a-z_]{1,8}"
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every JSON pointer inside `v`.
fn pointers(v: &Value, at: &str, out: &mut Vec<String>) {
    out.push(at.to_owned());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                pointers(
                    x,
                    &format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                pointers(x, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn mutate(mut v: Value, edits: &[(usize, u8, Value)]) -> Value {
    for (pick, how, replacement) in edits {
        let mut all = Vec::new();
        pointers(&v, "", &mut all);
        let target = &all[pick % all.len()];
        if *how % 3 == 0 && !target.is_empty() {
            // Delete the node from its parent.
            let (parent, key) = target.rsplit_once('/').unwrap_or(("", ""));
            match v.pointer_mut(parent) {
                Some(Value::Object(m)) => {
                    m.remove(&key.replace("~1", "/").replace("~0", "~"));
                }
                Some(Value::Array(a)) => {
                    if let Ok(i) = key.parse::<usize>()
                        && i < a.len()
                    {
                        a.remove(i);
                    }
                }
                _ => {}
            }
        } else if let Some(node) = v.pointer_mut(target) {
            *node = replacement.clone();
        }
    }
    v
}

fn check_no_panic(text: &str) {
    match load_str("fuzz.json", text) {
        Ok(v) => assert_eq!(v.reference.digest.len(), 16),
        Err(LoadError::Parse(e)) => assert_eq!(e.file, "fuzz.json"),
        Err(LoadError::Invalid(errors)) => assert!(!errors.is_empty()),
    }
}

const SEEDS: [&str; 2] = [
    include_str!("data/e1-ddp-buckets.json"),
    include_str!("data/e2-p2p-batch.json"),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn arbitrary_json_never_panics(v in arb_json()) {
        check_no_panic(&v.to_string());
    }

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,64}") {
        check_no_panic(&s);
    }

    #[test]
    fn mutated_valid_schedules_never_panic(
        which in 0usize..6,
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), prop_oneof![arb_json(), (0u64..6).prop_map(Value::from)]), 1..4),
    ) {
        let text = match which {
            0 | 1 => SEEDS[which].to_owned(),
            k => {
                let preset = ["ddp", "pp", "p2p-mode2", "fsdp"][k - 2];
                let opts = GenOptions { layers: 1, elems: 16, iterations: 1, ..GenOptions::default() };
                generate(preset, &opts).expect("generates").to_json_string()
            }
        };
        let base: Value = serde_json::from_str(&text).expect("JSON");
        check_no_panic(&mutate(base, &edits).to_string());
    }
}
