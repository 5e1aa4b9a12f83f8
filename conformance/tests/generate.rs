//! Every generator preset produces a valid schedule (default options and others), its JSON
//! round-trips through the parser, and unsupported options are refused.

use memreuse_conformance::generate::{GenError, GenOptions, PRESETS, generate};
use memreuse_conformance::schedule::Schedule;
use memreuse_conformance::validate::validate;

fn assert_valid(preset: &str, opts: &GenOptions) -> memreuse_conformance::ValidSchedule {
    let s = generate(preset, opts).unwrap_or_else(|e| panic!("{preset} {opts:?}: {e}"));
    // Through JSON, as a file on disk would be.
    let text = s.to_json_string();
    let parsed = Schedule::from_json_str(preset, &text).unwrap_or_else(|e| panic!("{preset}: {e}"));
    assert_eq!(parsed, s, "{preset}: JSON round trip");
    match validate(preset, &parsed) {
        Ok(v) => v,
        Err(errors) => panic!(
            "{preset} {opts:?} invalid:\n{}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

#[test]
fn every_preset_validates_with_defaults_and_has_checks() {
    for p in PRESETS {
        let v = assert_valid(p.name, &GenOptions::default());
        assert!(
            v.reference.checks.iter().any(|c| !c.is_empty()),
            "{}: no checks",
            p.name
        );
        assert_eq!(v.reference.digest.len(), 16);
    }
}

#[test]
fn presets_validate_with_other_options() {
    let variants = [
        GenOptions {
            layers: 1,
            elems: 16,
            iterations: 1,
            seed: 0,
            ..GenOptions::default()
        },
        GenOptions {
            layers: 3,
            elems: 100,
            iterations: 3,
            seed: 4_000_000_000,
            ..GenOptions::default()
        },
        GenOptions {
            layers: 4,
            elems: 48,
            iterations: 0,
            seed: 7,
            ..GenOptions::default()
        },
    ];
    for p in PRESETS.iter().filter(|p| p.name != "oom-pressure") {
        for opts in &variants {
            assert_valid(p.name, opts);
        }
    }
    assert_valid(
        "oom-pressure",
        &GenOptions {
            layers: 1,
            iterations: 1,
            device_memory: Some(1 << 30),
            ..GenOptions::default()
        },
    );
}

#[test]
fn world_size_variants() {
    for name in [
        "ddp",
        "fsdp",
        "tp",
        "ep",
        "free-before-wait",
        "never-wait",
        "late-wait",
    ] {
        for n in [1, 3, 8] {
            assert_valid(
                name,
                &GenOptions {
                    world_size: Some(n),
                    ..GenOptions::default()
                },
            );
        }
    }
    assert_valid(
        "oom-pressure",
        &GenOptions {
            world_size: Some(1),
            layers: 1,
            iterations: 1,
            ..GenOptions::default()
        },
    );
    assert_valid(
        "pp",
        &GenOptions {
            world_size: Some(2),
            layers: 3,
            ..GenOptions::default()
        },
    );
    assert_valid(
        "pp",
        &GenOptions {
            world_size: Some(5),
            ..GenOptions::default()
        },
    );
    assert_valid(
        "p2p-mode2",
        &GenOptions {
            world_size: Some(4),
            ..GenOptions::default()
        },
    );
}

#[test]
fn many_layers_stay_within_the_exactness_bound() {
    for name in ["tp", "fsdp", "moe-mixed", "ddp"] {
        assert_valid(
            name,
            &GenOptions {
                layers: 24,
                elems: 16,
                iterations: 3,
                ..GenOptions::default()
            },
        );
    }
}

#[test]
fn unsupported_options_are_refused() {
    let bad =
        |name, opts: GenOptions| matches!(generate(name, &opts), Err(GenError::Unsupported { .. }));
    assert!(bad(
        "pp",
        GenOptions {
            world_size: Some(1),
            ..GenOptions::default()
        }
    ));
    assert!(bad(
        "p2p-mode2",
        GenOptions {
            world_size: Some(3),
            ..GenOptions::default()
        }
    ));
    assert!(bad(
        "moe-mixed",
        GenOptions {
            world_size: Some(8),
            ..GenOptions::default()
        }
    ));
    assert!(bad(
        "ddp",
        GenOptions {
            layers: 0,
            ..GenOptions::default()
        }
    ));
    assert!(bad(
        "ddp",
        GenOptions {
            world_size: Some(0),
            ..GenOptions::default()
        }
    ));
    for preset in ["fsdp", "tp", "late-wait"] {
        let err = generate(
            preset,
            &GenOptions {
                elems: 0,
                ..GenOptions::default()
            },
        )
        .expect_err("elems 0 is refused");
        assert!(
            err.to_string().contains("elems must be at least 1"),
            "{err}"
        );
    }
    // The message says what was wrong and what is valid.
    let err = generate(
        "fsdp",
        &GenOptions {
            world_size: Some(5000),
            ..GenOptions::default()
        },
    )
    .expect_err("too many ranks");
    assert_eq!(
        err.to_string(),
        "preset fsdp: world size 5000 is not supported: valid are 1..=1024 ranks, and this preset needs any number of ranks"
    );
    assert_eq!(
        generate("nope", &GenOptions::default()).err(),
        Some(GenError::UnknownPreset("nope".into()))
    );
}

#[test]
fn oom_pressure_needs_reclaimed_memory() {
    let v = assert_valid("oom-pressure", &GenOptions::default());
    let cap = v.schedule.device_memory.expect("sets device_memory");
    // Fits the live peak, but not the peak without any reuse of freed tensors.
    assert!(
        v.reference.live_peak_bytes <= cap,
        "{} > {cap}",
        v.reference.live_peak_bytes
    );
    let keep = 6u64 << 21;
    assert!(keep * 3 > cap, "three big tensors must not fit");
}

#[test]
fn moe_mixed_uses_every_dimension() {
    let s = generate("moe-mixed", &GenOptions::default()).expect("generates");
    assert_eq!(s.world_size, 16);
    for g in ["dp", "fsdp", "tp", "ep"] {
        let lists = &s.groups[g];
        assert_eq!(lists.len(), 8, "{g}");
        let mut all: Vec<usize> = lists.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..16).collect::<Vec<_>>(),
            "{g} covers every rank once"
        );
    }
    assert_eq!(s.groups["dp"][0], vec![0, 8]);
    assert_eq!(s.groups["ep"][0], vec![0, 1]);
}

/// Every accepted option combination gives a schedule `validate` accepts; the others are
/// refused with a reason. Before: 33 of 120 accepted combinations wrote invalid files, and
/// `ddp --elems 2^60 --layers 16` wrapped to a 0-element tensor.
#[test]
fn accepted_options_always_give_valid_schedules() {
    let (mut accepted, mut refused) = (0, 0);
    let elems = [16u64, (1 << 26) + 1, u64::MAX];
    let iterations = [1u32, 10_001];
    let worlds = [None, Some(3), Some(1024)];
    for p in PRESETS {
        for &e in &elems {
            for &it in &iterations {
                for &w in &worlds {
                    let opts = GenOptions {
                        layers: 3,
                        elems: e,
                        iterations: it,
                        world_size: w,
                        ..GenOptions::default()
                    };
                    match generate(p.name, &opts) {
                        Ok(s) => {
                            accepted += 1;
                            if let Err(errors) = validate(p.name, &s) {
                                panic!("{} {opts:?} generated but invalid: {}", p.name, errors[0]);
                            }
                        }
                        Err(e) => {
                            refused += 1;
                            assert!(matches!(e, GenError::Unsupported { .. }), "{e}");
                        }
                    }
                }
            }
        }
    }
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
    // The one that used to wrap, and one too large to build at all.
    for (preset, layers, elems) in [("ddp", 16, 1u64 << 60), ("ddp", 100_000_000, 16)] {
        let opts = GenOptions {
            layers,
            elems,
            ..GenOptions::default()
        };
        let e = generate(preset, &opts).expect_err("refused");
        assert!(e.to_string().contains("above the limit"), "{e}");
    }
}

/// The eight-then-four pattern of the expandable-segments measurements: one rank, eight
/// 16 MiB tensors live at once and freed, then four 32 MiB, under a 200 MiB device.
#[test]
fn eight_then_four_is_the_measured_pattern() {
    let v = assert_valid("eight-then-four", &GenOptions::default());
    let s = &v.schedule;
    assert_eq!(s.world_size, 1);
    assert_eq!(s.device_memory, Some(200 << 20));
    // 128 MiB live at either peak, plus the 16 KiB probes.
    let live = v.reference.live_peak_bytes;
    assert!(
        (128 << 20..(128 << 20) + (1 << 20)).contains(&live),
        "{live}"
    );
    let sizes = |prefix: char| -> Vec<u64> {
        s.body
            .iter()
            .filter_map(|op| match &op.kind {
                memreuse_conformance::OpKind::Alloc { t, elems, .. } if t.starts_with(prefix) => {
                    Some(*elems * 4)
                }
                _ => None,
            })
            .collect()
    };
    assert_eq!(sizes('s'), vec![16 << 20; 8]);
    assert_eq!(sizes('b'), vec![32 << 20; 4]);
    // Larger tensors and another device keep the proportions.
    let v = assert_valid(
        "eight-then-four",
        &GenOptions {
            elems: 1 << 23,
            device_memory: Some(1 << 30),
            ..GenOptions::default()
        },
    );
    assert_eq!(v.schedule.device_memory, Some(1 << 30));
    assert!(v.reference.live_peak_bytes >= 8 * (32 << 20));
}
