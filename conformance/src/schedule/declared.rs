//! Declared outcomes (docs/schedule-format.md, `expect_out_of_memory`): the allocator
//! settings under which a schedule is expected to run out of memory, so the runner can
//! judge such a run as what the schedule says rather than as an error.

use memreuse_core::allocator::{AllocatorConfig, ConfigError};
use serde::{Deserialize, Serialize};

/// One declaration: under `alloc_conf`'s settings the schedule runs out of memory, for
/// the reason `because`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredOom {
    /// Allocator settings in `MEMREUSE_ALLOC_CONF` syntax
    /// (`expandable_segments:True,expandable_segments_page_size_mb:20`). A run matches when
    /// its configuration has every key named here at the value given here; keys not named
    /// may be anything.
    pub alloc_conf: String,
    /// Why the schedule cannot fit under those settings, in words (printed with the run).
    pub because: String,
}

/// The keys of `text`, in order (only meaningful once `text` parses).
fn keys(text: &str) -> impl Iterator<Item = &str> {
    text.split(',')
        .filter_map(|piece| piece.split_once(':'))
        .map(|(key, _)| key.trim())
}

/// The value `config` gives `key`, comparable between two configurations (`None` for a key
/// the configuration string does not have).
fn setting(config: &AllocatorConfig, key: &str) -> Option<String> {
    Some(match key {
        "max_split_size_mb" => config.max_split_size.to_string(),
        "garbage_collection_threshold" => format!("{:?}", config.garbage_collection_threshold),
        "roundup_power2_divisions" => format!("{:?}", config.roundup_power2_divisions),
        "per_process_memory_fraction" => format!("{:?}", config.per_process_memory_fraction),
        "lazy_reclaim" => config.lazy_reclaim.to_string(),
        "expandable_segments" => config.expandable_segments.to_string(),
        "expandable_segments_trim" => config.expandable_segments_trim.to_string(),
        "expandable_segments_page_size_mb" => config.expandable_segments_page_size.to_string(),
        _ => return None,
    })
}

impl DeclaredOom {
    /// Checks that [`DeclaredOom::alloc_conf`] is a valid configuration string, naming the
    /// key and what is valid when it is not.
    pub fn check(&self) -> Result<(), ConfigError> {
        AllocatorConfig::parse(&self.alloc_conf).map(|_| ())
    }

    /// Whether a run under `run` (the run's parsed configuration; the default for a run
    /// without one) has every setting this declaration names.
    pub fn applies_to(&self, run: &AllocatorConfig) -> bool {
        let Ok(declared) = AllocatorConfig::parse(&self.alloc_conf) else {
            return false;
        };
        keys(&self.alloc_conf).all(|key| {
            let want = setting(&declared, key);
            want.is_some() && want == setting(run, key)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared(conf: &str) -> DeclaredOom {
        DeclaredOom {
            alloc_conf: conf.to_owned(),
            because: "two 12 MiB tensors need two 20 MiB pages".to_owned(),
        }
    }

    fn conf(text: &str) -> AllocatorConfig {
        AllocatorConfig::parse(text).expect("valid")
    }

    /// A key the declaration names must have its value; keys it does not name do not
    /// matter, and a default value counts as that value (20 MiB pages are the default).
    #[test]
    fn a_declaration_applies_to_runs_with_every_setting_it_names() {
        let d = declared("expandable_segments:True,expandable_segments_page_size_mb:20");
        assert!(d.check().is_ok());
        assert!(d.applies_to(&conf("expandable_segments:True")));
        assert!(d.applies_to(&conf("max_split_size_mb:40,expandable_segments:True")));
        assert!(!d.applies_to(&conf(
            "expandable_segments:True,expandable_segments_page_size_mb:2"
        )));
        assert!(!d.applies_to(&AllocatorConfig::default()));
    }

    /// A string that does not parse is refused by `check` and matches nothing.
    #[test]
    fn an_invalid_declaration_is_refused_and_matches_nothing() {
        let d = declared("expandable_segment:True");
        assert!(d.check().is_err());
        assert!(!d.applies_to(&conf("expandable_segments:True")));
    }
}
