//! `run --alloc-conf STRING` and the configuration variables: the allocator configurations
//! a run replays every schedule under (docs/conformance-cli.md).
//!
//! Each `--alloc-conf` value is another set of runs; when none is given the runner reads,
//! per backend, the first set variable of core's precedence (`MEMREUSE_ALLOC_CONF`,
//! `PYTORCH_ALLOC_CONF`, then `PYTORCH_CUDA_ALLOC_CONF` on CUDA or `PYTORCH_NPU_ALLOC_CONF`
//! on Ascend: [`resolve_for_backend`]), and when none is set or the one used is empty the
//! backend's runs use the default configuration. Values are parsed strictly, before anything runs: a malformed one
//! is a usage error naming the key and what is valid. A valid configuration that a backend
//! cannot provide (`expandable_segments:True` without virtual memory) is found when the
//! allocator is opened ([`open_allocators`]) and skips that run with the reason.

use std::sync::Arc;

use memreuse_core::AnyBackend;
use memreuse_core::allocator::{
    ALLOC_CONF_ENV, AllocConfPlatform, AllocatorConfig, CachingAllocator, ChosenConf, ConfigError,
};

use crate::skip::SkipReason;

/// Bytes of the readable part of a [`file_tag`] at most; the hash after it keeps tags of
/// different strings apart.
const TAG_PREFIX_BYTES: usize = 16;

/// One allocator configuration to run under, as given and as parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocConf {
    /// The string as given (the report's `alloc_conf`).
    pub text: String,
    /// What it parses to.
    pub config: AllocatorConfig,
}

impl AllocConf {
    /// The file-name form of [`AllocConf::text`] (see [`file_tag`]).
    pub fn file_tag(&self) -> String {
        file_tag(&self.text)
    }
}

/// Where a configuration string came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfSource {
    /// A `--alloc-conf` value.
    Flag,
    /// This environment variable (`MEMREUSE_ALLOC_CONF` or one of PyTorch's names).
    Env(&'static str),
}

impl std::fmt::Display for ConfSource {
    /// `--alloc-conf` or the variable's name: the `from ...` of the report's allocator line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfSource::Flag => f.write_str("--alloc-conf"),
            ConfSource::Env(variable) => f.write_str(variable),
        }
    }
}

/// A configuration string the runner refuses before running anything (exit status 2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocConfError {
    /// The string does not parse; `error` names the key and what is valid.
    #[error("{}: {}", match origin { ConfSource::Flag => format!("--alloc-conf `{value}`"), ConfSource::Env(variable) => format!("{variable}=`{value}`") }, detail(error))]
    Invalid {
        /// Flag or variable.
        origin: ConfSource,
        /// The string as given.
        value: String,
        /// Why it does not parse.
        error: ConfigError,
    },
    /// The configuration variable used (named) is set to something that is not valid
    /// Unicode.
    #[error("{0} is not valid Unicode (unset it, or give --alloc-conf)")]
    EnvNotUnicode(&'static str),
    /// Two different strings whose file-tag hashes collide (their artifacts would
    /// overwrite each other).
    #[error(
        "--alloc-conf `{first}` and `{second}` have the same file tag hash `{tag}`; write one of them differently"
    )]
    TagCollision {
        /// The first string.
        first: String,
        /// The second string.
        second: String,
        /// Their common [`tag_hash`].
        tag: String,
    },
}

/// `error`'s message without the `MEMREUSE_ALLOC_CONF: ` it starts with (the runner names
/// the source itself).
pub(crate) fn detail(error: &ConfigError) -> String {
    let text = error.to_string();
    match text.strip_prefix(&format!("{ALLOC_CONF_ENV}: ")) {
        Some(rest) => rest.to_owned(),
        None => text,
    }
}

/// The configurations to run under: one per distinct `--alloc-conf` value (in order; an
/// empty value is the default configuration, `None`), or, when no flag is given, what
/// `env` (the value of `MEMREUSE_ALLOC_CONF`, `None` when unset) says. The variable is not
/// looked at when a flag is given.
pub fn resolve(
    flags: &[String],
    env: Option<std::ffi::OsString>,
) -> Result<Vec<Option<AllocConf>>, AllocConfError> {
    resolve_from(flags, env.map(|v| (ALLOC_CONF_ENV, v)))
}

/// [`resolve`] with the variable named: `env` is the variable chosen and its value.
fn resolve_from(
    flags: &[String],
    env: Option<(&'static str, std::ffi::OsString)>,
) -> Result<Vec<Option<AllocConf>>, AllocConfError> {
    let (values, source) = if flags.is_empty() {
        match env {
            None => return Ok(vec![None]),
            Some((variable, v)) => (
                vec![
                    v.into_string()
                        .map_err(|_| AllocConfError::EnvNotUnicode(variable))?,
                ],
                ConfSource::Env(variable),
            ),
        }
    } else {
        (flags.to_vec(), ConfSource::Flag)
    };
    let mut out: Vec<Option<AllocConf>> = Vec::new();
    for value in values {
        let conf = if value.trim().is_empty() {
            None
        } else {
            let config =
                AllocatorConfig::parse(&value).map_err(|error| AllocConfError::Invalid {
                    origin: source,
                    value: value.clone(),
                    error,
                })?;
            Some(AllocConf {
                text: value,
                config,
            })
        };
        let text = |c: &Option<AllocConf>| c.as_ref().map(|c| c.text.clone());
        if out.iter().any(|seen| text(seen) == text(&conf)) {
            continue;
        }
        if let Some(c) = &conf
            && let Some(first) = out
                .iter()
                .flatten()
                .find(|seen| tag_hash(&seen.text) == tag_hash(&c.text))
        {
            return Err(AllocConfError::TagCollision {
                first: first.text.clone(),
                second: c.text.clone(),
                tag: tag_hash(&c.text),
            });
        }
        out.push(conf);
    }
    Ok(out)
}

/// The configuration `backend`'s runs use when no `--alloc-conf` is given: the first set
/// variable of its platform's precedence (core's `ChosenConf`, looked up with `lookup`,
/// `std::env::var_os` for the process), parsed strictly.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendConf {
    /// The configuration (`None`: the defaults).
    pub conf: Option<AllocConf>,
    /// The variable it was read from (`None`: none of the backend's variables is set).
    pub variable: Option<&'static str>,
    /// The warning core's precedence gives when a set variable it overrides differs.
    pub warning: Option<String>,
}

/// Resolves [`BackendConf`] for `backend` (its platform from
/// [`AllocConfPlatform::for_backend`]). Only the variable used is parsed: its error names
/// it; a differing variable it overrides is named in [`BackendConf::warning`].
pub fn resolve_for_backend(
    backend: &str,
    lookup: impl FnMut(&str) -> Option<std::ffi::OsString>,
) -> Result<BackendConf, AllocConfError> {
    let platform = AllocConfPlatform::for_backend(backend);
    let Some(chosen) = ChosenConf::choose(platform, lookup) else {
        return Ok(BackendConf {
            conf: None,
            variable: None,
            warning: None,
        });
    };
    let warning = chosen.warning();
    let variable = chosen.variable;
    let mut confs = resolve_from(&[], Some((variable, chosen.value)))?;
    Ok(BackendConf {
        conf: confs.pop().flatten(),
        variable: Some(variable),
        warning,
    })
}

/// A configuration string in a form that is safe in a file name: `conf-<prefix>-<hash>`,
/// where `<prefix>` is the string with every run of characters other than ASCII letters
/// and digits turned into one `-`, cut to 16 bytes, without a leading or trailing `-`, and
/// `<hash>` is [`tag_hash`], so different strings get different tags and the same string
/// always the same one. At most 34 bytes, no path separator, no `__` (the separator of
/// artifact stems).
pub fn file_tag(text: &str) -> String {
    file_tag_within(text, usize::MAX)
}

/// [`file_tag`] with its readable prefix cut so the tag has at most `max` bytes (never
/// less than `conf-<hash>`, 17 bytes): what an artifact stem uses when a long schedule
/// name leaves less room.
pub fn file_tag_within(text: &str, max: usize) -> String {
    let hash = tag_hash(text);
    let room = max.saturating_sub("conf--".len() + hash.len());
    let mut prefix = String::new();
    for c in text.chars() {
        if prefix.len() >= TAG_PREFIX_BYTES.min(room) {
            break;
        }
        if c.is_ascii_alphanumeric() {
            prefix.push(c);
        } else if !prefix.ends_with('-') {
            prefix.push('-');
        }
    }
    let prefix = prefix.trim_matches('-');
    if prefix.is_empty() {
        format!("conf-{hash}")
    } else {
        format!("conf-{prefix}-{hash}")
    }
}

/// 12 lowercase hex digits of the 64-bit FNV-1a hash of `text`: the part of a
/// [`file_tag`] that tells configurations apart.
pub fn tag_hash(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:012x}", hash >> 16)
}

/// Why a run's allocators could not be opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenRefusal {
    /// The backend cannot provide the configuration: the run is skipped
    /// ([`SkipReason::UnsupportedConfig`]).
    Skip(SkipReason),
    /// Anything else: the run errors with this message.
    Error(String),
}

/// What a run does when opening its allocator under `conf` failed with `error`:
/// [`ConfigError::Unsupported`] skips it (the reason names the configuration, the key, the
/// backend and the capability it lacks); any other error fails it.
pub fn classify(conf: Option<&AllocConf>, error: &ConfigError) -> OpenRefusal {
    let text = conf.map_or("", |c| c.text.as_str());
    match error {
        ConfigError::Unsupported {
            key,
            backend,
            needs,
        } => OpenRefusal::Skip(SkipReason::UnsupportedConfig {
            conf: text.to_owned(),
            key: (*key).to_owned(),
            needs: (*needs).to_owned(),
            backend: backend.clone(),
        }),
        other => OpenRefusal::Error(format!(
            "could not open the allocator with `{text}`: {other}"
        )),
    }
}

/// Opens one allocator per backend with `config` (the run's configuration, tracing
/// settings included) through [`CachingAllocator::try_new`]; the first refusal is
/// classified by [`classify`].
pub fn open_allocators(
    backends: &[AnyBackend],
    conf: Option<&AllocConf>,
    config: &AllocatorConfig,
) -> Result<Vec<Arc<CachingAllocator<AnyBackend>>>, OpenRefusal> {
    backends
        .iter()
        .map(|b| {
            CachingAllocator::try_new(Arc::new(b.clone()), config.clone())
                .map_err(|e| classify(conf, &e))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(v: &[Option<AllocConf>]) -> Vec<Option<&str>> {
        v.iter()
            .map(|c| c.as_ref().map(|c| c.text.as_str()))
            .collect()
    }

    #[test]
    fn flags_win_over_the_variable_and_repeat_into_sets() {
        let flags = vec![
            "max_split_size_mb:20".to_owned(),
            String::new(),
            "max_split_size_mb:20".to_owned(),
            "roundup_power2_divisions:4".to_owned(),
        ];
        let got = resolve(&flags, Some("bogus:1".into())).unwrap();
        assert_eq!(
            texts(&got),
            [
                Some("max_split_size_mb:20"),
                None,
                Some("roundup_power2_divisions:4")
            ]
        );
        assert_eq!(got[0].as_ref().unwrap().config.max_split_size, 20 << 20);
        let env = resolve(&[], Some("max_split_size_mb:40".into())).unwrap();
        assert_eq!(texts(&env), [Some("max_split_size_mb:40")]);
        assert_eq!(texts(&resolve(&[], None).unwrap()), [None]);
        assert_eq!(texts(&resolve(&[], Some(" ".into())).unwrap()), [None]);
    }

    #[test]
    fn malformed_strings_name_their_source_and_the_key() {
        let e = resolve(&[], Some("bogus:1".into())).unwrap_err();
        assert!(matches!(
            e,
            AllocConfError::Invalid {
                origin: ConfSource::Env(ALLOC_CONF_ENV),
                error: ConfigError::UnknownKey { .. },
                ..
            }
        ));
        let msg = e.to_string();
        assert!(
            msg.starts_with("MEMREUSE_ALLOC_CONF=`bogus:1`: unknown key"),
            "{msg}"
        );
        assert!(
            msg.contains("unknown key `bogus`") && msg.contains("valid keys"),
            "{msg}"
        );
        let e = resolve(&["max_split_size_mb:1".to_owned()], None).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("--alloc-conf `max_split_size_mb:1`: "),
            "{msg}"
        );
        assert!(msg.contains("at least 20"), "{msg}");
    }

    #[test]
    fn a_variable_that_is_not_unicode_is_refused_unless_a_flag_is_given() {
        use std::os::unix::ffi::OsStringExt;
        let bytes = || {
            Some(std::ffi::OsString::from_vec(
                b"expandable_segments:\xff".to_vec(),
            ))
        };
        assert_eq!(
            resolve(&[], bytes()),
            Err(AllocConfError::EnvNotUnicode(ALLOC_CONF_ENV))
        );
        assert!(
            AllocConfError::EnvNotUnicode(ALLOC_CONF_ENV)
                .to_string()
                .contains("MEMREUSE_ALLOC_CONF is not valid Unicode"),
        );
        // With a flag the variable is not read, whatever it holds.
        let got = resolve(&["max_split_size_mb:20".to_owned()], bytes()).unwrap();
        assert_eq!(texts(&got), [Some("max_split_size_mb:20")]);
    }

    #[test]
    fn tags_are_stable_short_safe_and_distinct() {
        let a = file_tag("max_split_size_mb:20");
        assert_eq!(a, file_tag("max_split_size_mb:20"), "stable");
        // Pinned: file names of earlier runs keep meaning the same configuration.
        assert_eq!(a, "conf-max-split-size-m-b0878b0d65c7");
        assert_ne!(a, file_tag("max_split_size_mb:21"));
        assert_ne!(a, file_tag("max_split_size_mb:20 "), "distinct strings");
        let odd = file_tag("../..//x\\y:[1:2,>:4]__z");
        for t in [&a, &odd, &file_tag(&"\u{e9}".repeat(300)), &file_tag("::")] {
            assert!(t.len() <= 34, "{t}");
            assert!(!t.contains(['/', '\\']) && !t.contains("__"), "{t}");
            assert!(
                t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'),
                "{t}"
            );
        }
        assert_eq!(file_tag("::").len(), "conf-".len() + 12);
        let short = file_tag_within("max_split_size_mb:20", 20);
        assert!(short.len() <= 20 && short.ends_with(&tag_hash("max_split_size_mb:20")));
        assert_eq!(
            file_tag_within("max_split_size_mb:20", 0).len(),
            17,
            "never below"
        );
    }

    #[test]
    fn unsupported_skips_and_anything_else_errors() {
        let conf = resolve(&["expandable_segments:True".to_owned()], None).unwrap();
        let conf = conf[0].as_ref();
        let unsupported = ConfigError::Unsupported {
            key: "expandable_segments",
            backend: "vulkan".to_owned(),
            needs: "the virtual_memory capability",
        };
        let OpenRefusal::Skip(reason) = classify(conf, &unsupported) else {
            panic!("unsupported must skip");
        };
        assert!(
            matches!(reason, SkipReason::UnsupportedConfig { .. }),
            "{reason}"
        );
        let reason = reason.to_string();
        assert!(
            reason.contains("`expandable_segments:True`")
                && reason.contains("backend `vulkan`")
                && reason.contains("virtual_memory"),
            "{reason}"
        );
        let other = ConfigError::NotUnicode;
        assert!(matches!(classify(conf, &other), OpenRefusal::Error(_)));
    }

    #[test]
    fn a_backend_without_virtual_memory_is_refused_by_try_new_and_skipped() {
        // A ManualBackend without virtual memory: the replay's own call, through the
        // real `try_new`, skips the run; without the key it opens one allocator per rank.
        let b = AnyBackend::new(
            memreuse_core::testing::ManualBackend::new(1 << 20).without_virtual_memory(),
        );
        let backends = [b.clone(), b];
        let conf = resolve(&["expandable_segments:True".to_owned()], None).unwrap();
        let conf = conf[0].as_ref();
        let refusal = open_allocators(&backends, conf, &conf.unwrap().config).err();
        let Some(OpenRefusal::Skip(reason)) = refusal else {
            panic!("{refusal:?}");
        };
        assert!(
            matches!(reason, SkipReason::UnsupportedConfig { .. }),
            "{reason}"
        );
        let other = resolve(&["max_split_size_mb:20".to_owned()], None).unwrap();
        let other = other[0].as_ref();
        let opened = open_allocators(&backends, other, &other.unwrap().config).ok();
        assert_eq!(opened.map(|a| a.len()), Some(2));
    }
}
