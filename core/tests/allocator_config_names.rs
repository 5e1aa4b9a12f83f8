//! PyTorch's configuration names (issue 24 item 3): which variable is read, torch_npu's key
//! spellings, and PyTorch's keys memreuse refuses as known-but-unsupported. Pure functions:
//! the environment is a closure, never the process's own.

use std::collections::HashMap;
use std::ffi::OsString;

use memreuse_core::allocator::{
    ALLOC_CONF_ENV, AllocConfPlatform, AllocatorConfig, ChosenConf, ConfigError,
    KNOWN_UNSUPPORTED_KEYS, KeyOrigin,
};

fn env(vars: &[(&str, &str)]) -> impl FnMut(&str) -> Option<OsString> {
    let map: HashMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
        .collect();
    move |name| map.get(name).cloned()
}

fn choose(platform: AllocConfPlatform, vars: &[(&str, &str)]) -> Option<ChosenConf> {
    ChosenConf::choose(platform, env(vars))
}

#[test]
fn precedence_memreuse_then_generic_then_platform() {
    let all = [
        ("MEMREUSE_ALLOC_CONF", "max_split_size_mb:20"),
        ("PYTORCH_ALLOC_CONF", "max_split_size_mb:40"),
        ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:60"),
        ("PYTORCH_NPU_ALLOC_CONF", "max_split_size_mb:80"),
    ];
    for platform in [
        AllocConfPlatform::Generic,
        AllocConfPlatform::Cuda,
        AllocConfPlatform::Ascend,
    ] {
        assert_eq!(choose(platform, &all).unwrap().variable, ALLOC_CONF_ENV);
        assert_eq!(
            choose(platform, &all[1..]).unwrap().variable,
            "PYTORCH_ALLOC_CONF"
        );
    }
    assert_eq!(
        choose(AllocConfPlatform::Cuda, &all[2..]).unwrap().variable,
        "PYTORCH_CUDA_ALLOC_CONF"
    );
    assert_eq!(
        choose(AllocConfPlatform::Ascend, &all[2..])
            .unwrap()
            .variable,
        "PYTORCH_NPU_ALLOC_CONF"
    );
    // The mock and Vulkan read only the first two; CUDA never reads the NPU name.
    assert!(choose(AllocConfPlatform::Generic, &all[2..]).is_none());
    assert!(choose(AllocConfPlatform::Cuda, &all[3..]).is_none());
    assert!(choose(AllocConfPlatform::Ascend, &all[2..3]).is_none());
    let cuda = choose(AllocConfPlatform::Cuda, &all[2..]).unwrap();
    assert_eq!(cuda.parse().unwrap().max_split_size, 60 << 20);
}

#[test]
fn backends_map_to_platforms() {
    assert_eq!(
        AllocConfPlatform::for_backend("cuda"),
        AllocConfPlatform::Cuda
    );
    assert_eq!(
        AllocConfPlatform::for_backend("ascend"),
        AllocConfPlatform::Ascend
    );
    assert_eq!(
        AllocConfPlatform::for_backend("mock"),
        AllocConfPlatform::Generic
    );
    assert_eq!(
        AllocConfPlatform::for_backend("vulkan"),
        AllocConfPlatform::Generic
    );
}

#[test]
fn differing_variables_name_the_one_used_in_the_warning() {
    let chosen = choose(
        AllocConfPlatform::Cuda,
        &[
            ("PYTORCH_ALLOC_CONF", "expandable_segments:True"),
            ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:20"),
        ],
    )
    .unwrap();
    assert_eq!(chosen.overridden, vec!["PYTORCH_CUDA_ALLOC_CONF"]);
    let warning = chosen.warning().unwrap();
    assert!(
        warning.starts_with("allocator configuration read from PYTORCH_ALLOC_CONF"),
        "{warning}"
    );
    assert!(warning.contains("PYTORCH_CUDA_ALLOC_CONF"), "{warning}");
    // Equal values: nothing to warn about.
    let same = choose(
        AllocConfPlatform::Generic,
        &[
            ("MEMREUSE_ALLOC_CONF", "expandable_segments:True"),
            ("PYTORCH_ALLOC_CONF", "expandable_segments:True"),
        ],
    )
    .unwrap();
    assert!(same.overridden.is_empty());
    assert!(same.warning().is_none());
}

#[test]
fn an_empty_memreuse_variable_overrides_pytorchs() {
    let chosen = choose(
        AllocConfPlatform::Generic,
        &[
            ("MEMREUSE_ALLOC_CONF", ""),
            ("PYTORCH_ALLOC_CONF", "expandable_segments:True"),
        ],
    )
    .unwrap();
    assert_eq!(chosen.variable, ALLOC_CONF_ENV);
    assert_eq!(chosen.parse().unwrap(), AllocatorConfig::default());
    assert!(chosen.warning().is_some());
}

/// Two variables that differ where one is invalid: the variable used decides. Its error
/// wins; an invalid variable it overrides is not parsed (so `MEMREUSE_ALLOC_CONF` can replace
/// a PyTorch string memreuse refuses).
#[test]
fn the_used_variables_error_wins_and_an_overridden_invalid_one_is_ignored() {
    let ok_over_bad = choose(
        AllocConfPlatform::Cuda,
        &[
            ("MEMREUSE_ALLOC_CONF", "max_split_size_mb:20"),
            ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
        ],
    )
    .unwrap();
    assert_eq!(ok_over_bad.parse().unwrap().max_split_size, 20 << 20);
    assert_eq!(ok_over_bad.overridden, vec!["PYTORCH_CUDA_ALLOC_CONF"]);

    let bad_over_ok = choose(
        AllocConfPlatform::Cuda,
        &[
            ("PYTORCH_ALLOC_CONF", "max_split_size_mb:1"),
            ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:20"),
        ],
    )
    .unwrap();
    let err = bad_over_ok.parse().unwrap_err();
    assert!(
        matches!(&err, ConfigError::InVariable { variable: "PYTORCH_ALLOC_CONF", error }
            if matches!(**error, ConfigError::OutOfRange { .. })),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.starts_with("PYTORCH_ALLOC_CONF: `max_split_size_mb` must be at least 20"),
        "{msg}"
    );
    assert!(!msg.contains(ALLOC_CONF_ENV), "{msg}");
}

#[test]
fn errors_in_memreuses_variable_keep_their_shape() {
    let chosen = choose(
        AllocConfPlatform::Generic,
        &[("MEMREUSE_ALLOC_CONF", "bogus:1")],
    )
    .unwrap();
    assert!(matches!(
        chosen.parse(),
        Err(ConfigError::UnknownKey { key }) if key == "bogus"
    ));
}

#[cfg(unix)]
#[test]
fn a_non_unicode_pytorch_variable_is_named() {
    use std::os::unix::ffi::OsStringExt;
    let chosen = ChosenConf::choose(AllocConfPlatform::Ascend, |name| {
        (name == "PYTORCH_NPU_ALLOC_CONF").then(|| OsString::from_vec(vec![0xff, b':']))
    })
    .unwrap();
    let msg = chosen.parse().unwrap_err().to_string();
    assert_eq!(msg, "PYTORCH_NPU_ALLOC_CONF is not valid Unicode");
}

#[test]
fn torch_npu_spellings_mean_the_memreuse_keys() {
    let npu = AllocatorConfig::parse("expandable_segments:True,page_size:1g").unwrap();
    let ours =
        AllocatorConfig::parse("expandable_segments:True,expandable_segments_page_size_mb:1024")
            .unwrap();
    assert_eq!(npu, ours);
    assert_eq!(npu.expandable_segments_page_size, 1 << 30);
    let lazy = AllocatorConfig::parse("multi_stream_lazy_reclaim:True").unwrap();
    assert_eq!(lazy, AllocatorConfig::parse("lazy_reclaim:True").unwrap());
}

#[test]
fn torch_npu_spellings_are_checked_like_the_memreuse_keys() {
    assert!(matches!(
        AllocatorConfig::parse("expandable_segments:True,page_size:2m"),
        Err(ConfigError::BadValue { key, .. }) if key == "page_size"
    ));
    assert!(matches!(
        AllocatorConfig::parse("page_size:1g"),
        Err(ConfigError::Requires { key, requires: "expandable_segments:True" }) if key == "page_size"
    ));
    assert!(matches!(
        AllocatorConfig::parse("expandable_segments:True,page_size:1g,expandable_segments_page_size_mb:20"),
        Err(ConfigError::DuplicateKey { key }) if key == "expandable_segments_page_size_mb"
    ));
    assert!(matches!(
        AllocatorConfig::parse("lazy_reclaim:True,multi_stream_lazy_reclaim:False"),
        Err(ConfigError::DuplicateKey { key }) if key == "multi_stream_lazy_reclaim"
    ));
}

#[test]
fn pytorchs_other_keys_are_known_but_unsupported_not_typos() {
    for (key, origin) in KNOWN_UNSUPPORTED_KEYS {
        let err = AllocatorConfig::parse(&format!("{key}:1")).unwrap_err();
        assert_eq!(
            err,
            ConfigError::KnownUnsupported {
                key: (*key).to_owned(),
                origin: *origin
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("is known") && msg.contains("not supported"),
            "{msg}"
        );
        assert!(!msg.contains("unknown key"), "{msg}");
    }
    let msg = AllocatorConfig::parse("throw_on_cudamalloc_oom:True")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("PyTorch's CUDA allocator"), "{msg}");
    // A misspelling of a supported key stays a typo.
    assert!(matches!(
        AllocatorConfig::parse("max_split_size:20"),
        Err(ConfigError::UnknownKey { .. })
    ));
    assert!(KNOWN_UNSUPPORTED_KEYS.contains(&("backend", KeyOrigin::PyTorchCuda)));
}

#[test]
fn release_lock_on_malloc_is_read_under_pytorch_and_torch_npu_names() {
    for key in [
        "release_lock_on_cudamalloc",
        "release_lock_on_hipmalloc",
        "release_lock_on_npumalloc",
    ] {
        let on = AllocatorConfig::parse(&format!("{key}:True")).unwrap();
        assert!(on.release_lock_on_malloc, "{key}");
        assert!(
            !AllocatorConfig::parse(&format!("{key}:False"))
                .unwrap()
                .release_lock_on_malloc
        );
    }
    assert!(!AllocatorConfig::default().release_lock_on_malloc);
    // Two spellings of one setting are a duplicate, as torch_npu's aliases are.
    assert!(matches!(
        AllocatorConfig::parse("release_lock_on_cudamalloc:True,release_lock_on_npumalloc:True"),
        Err(ConfigError::DuplicateKey { .. })
    ));
}
