//! The allocator configurations of a `run`, per set of runs and per backend, and the
//! report's `allocator:` line that says what they were and where they came from.
//!
//! With `--alloc-conf` every value is one set of runs, the same on every backend. Without
//! it there is one set, and each backend reads its own platform's precedence of variables
//! (`MEMREUSE_ALLOC_CONF` > `PYTORCH_ALLOC_CONF` > `PYTORCH_CUDA_ALLOC_CONF` on CUDA /
//! `PYTORCH_NPU_ALLOC_CONF` on Ascend), so a launch script written for PyTorch configures
//! the CUDA runs without touching the mock's.

use crate::alloc_conf::{
    AllocConf, AllocConfError, BackendConf, ConfSource, resolve, resolve_for_backend,
};

/// One set of runs: the configuration each backend's runs use.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfSet {
    /// One `--alloc-conf` value for every backend (`None`: an empty value, the defaults).
    Flag(Option<AllocConf>),
    /// No `--alloc-conf`: per backend (in the plan's order), what its variables say.
    Env(Vec<(String, BackendConf)>),
}

impl ConfSet {
    /// The configuration of `backend`'s runs in this set (`None`: the defaults).
    pub fn for_backend(&self, backend: &str) -> &Option<AllocConf> {
        const DEFAULTS: &Option<AllocConf> = &None;
        match self {
            ConfSet::Flag(conf) => conf,
            ConfSet::Env(per_backend) => per_backend
                .iter()
                .find(|(b, _)| b == backend)
                .map_or(DEFAULTS, |(_, c)| &c.conf),
        }
    }
}

/// The sets of runs for `flags` (`--alloc-conf` values) on `backends`, reading variables
/// with `lookup` when no flag is given; also the warnings to print (each once), for
/// variables set to different values where one overrides another.
pub fn conf_sets(
    flags: &[String],
    backends: &[String],
    mut lookup: impl FnMut(&str) -> Option<std::ffi::OsString>,
) -> Result<(Vec<ConfSet>, Vec<String>), AllocConfError> {
    if !flags.is_empty() {
        let sets = resolve(flags, None)?
            .into_iter()
            .map(ConfSet::Flag)
            .collect();
        return Ok((sets, Vec::new()));
    }
    let mut per_backend = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    for backend in backends {
        let conf = resolve_for_backend(backend, &mut lookup)?;
        if let Some(w) = &conf.warning
            && !warnings.contains(w)
        {
            warnings.push(w.clone());
        }
        per_backend.push((backend.clone(), conf));
    }
    Ok((vec![ConfSet::Env(per_backend)], warnings))
}

/// The report's `allocator:` line: the settings every set of runs used and where they
/// came from, e.g. `expandable_segments:True from MEMREUSE_ALLOC_CONF`; per backend
/// (`mock: defaults; cuda: ... from PYTORCH_CUDA_ALLOC_CONF`) when backends differ; the
/// sets of several `--alloc-conf` values joined with ` | `.
pub fn allocator_line(sets: &[ConfSet]) -> String {
    let lines: Vec<String> = sets
        .iter()
        .map(|set| match set {
            ConfSet::Flag(conf) => describe(conf.as_ref(), Some(ConfSource::Flag)),
            ConfSet::Env(per_backend) => {
                let described: Vec<(&str, String)> = per_backend
                    .iter()
                    .map(|(b, c)| {
                        (
                            b.as_str(),
                            describe(c.conf.as_ref(), c.variable.map(ConfSource::Env)),
                        )
                    })
                    .collect();
                match described.first() {
                    None => "defaults".to_owned(),
                    Some((_, first)) if described.iter().all(|(_, d)| d == first) => first.clone(),
                    Some(_) => described
                        .iter()
                        .map(|(b, d)| format!("{b}: {d}"))
                        .collect::<Vec<_>>()
                        .join("; "),
                }
            }
        })
        .collect();
    lines.join(" | ")
}

/// `TEXT from SOURCE`, `defaults from SOURCE (empty)`, or `defaults` (nothing set).
fn describe(conf: Option<&AllocConf>, source: Option<ConfSource>) -> String {
    match (conf, source) {
        (Some(c), Some(s)) => format!("{} from {s}", c.text),
        (Some(c), None) => c.text.clone(),
        (None, Some(s)) => format!("defaults from {s} (empty)"),
        (None, None) => "defaults".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn env(vars: &[(&str, &str)]) -> impl FnMut(&str) -> Option<OsString> + use<> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    fn backends(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn each_backend_reads_its_own_precedence() {
        let lookup = env(&[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")]);
        let (sets, warnings) = conf_sets(&[], &backends(&["mock", "cuda"]), lookup).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(
            sets[0].for_backend("mock"),
            &None,
            "the mock reads no CUDA name"
        );
        assert_eq!(
            sets[0]
                .for_backend("cuda")
                .as_ref()
                .map(|c| c.text.as_str()),
            Some("expandable_segments:True")
        );
        assert_eq!(
            allocator_line(&sets),
            "mock: defaults; cuda: expandable_segments:True from PYTORCH_CUDA_ALLOC_CONF"
        );
    }

    #[test]
    fn memreuse_name_wins_with_a_warning_and_one_line_when_backends_agree() {
        let lookup = env(&[
            ("MEMREUSE_ALLOC_CONF", "max_split_size_mb:40"),
            ("PYTORCH_ALLOC_CONF", "max_split_size_mb:20"),
        ]);
        let (sets, warnings) = conf_sets(&[], &backends(&["mock", "cuda"]), lookup).unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("PYTORCH_ALLOC_CONF"), "{warnings:?}");
        assert_eq!(
            allocator_line(&sets),
            "max_split_size_mb:40 from MEMREUSE_ALLOC_CONF"
        );
    }

    #[test]
    fn flags_ignore_the_variables_and_an_invalid_variable_names_itself() {
        let lookup = env(&[("PYTORCH_ALLOC_CONF", "bogus:1")]);
        let flags = vec!["max_split_size_mb:20".to_owned(), String::new()];
        let (sets, _) = conf_sets(&flags, &backends(&["mock"]), lookup).unwrap();
        assert_eq!(
            allocator_line(&sets),
            "max_split_size_mb:20 from --alloc-conf | defaults from --alloc-conf (empty)"
        );
        let e = conf_sets(
            &[],
            &backends(&["mock"]),
            env(&[("PYTORCH_ALLOC_CONF", "bogus:1")]),
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("PYTORCH_ALLOC_CONF=`bogus:1`: "),
            "{e}"
        );
        let (none, _) = conf_sets(&[], &backends(&["mock"]), env(&[])).unwrap();
        assert_eq!(allocator_line(&none), "defaults");
    }
}
