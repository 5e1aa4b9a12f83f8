//! The benchmark's allocator configuration, read from the environment as PyTorch's CUDA
//! allocator reads it: `MEMREUSE_ALLOC_CONF`, else `PYTORCH_ALLOC_CONF`, else
//! `PYTORCH_CUDA_ALLOC_CONF` (core's CUDA precedence), so the launch script that
//! configures PyTorch's side of the comparison configures memreuse's side the same way.

use std::ffi::OsString;

use memreuse_core::AllocatorConfig;
use memreuse_core::ConfigError;
use memreuse_core::allocator::{AllocConfPlatform, ChosenConf};

/// The configuration from the process's environment; a warning on stderr names the
/// variable used when another one is set to a different value.
pub fn allocator_config() -> Result<AllocatorConfig, ConfigError> {
    allocator_config_from(|name| std::env::var_os(name), |w| eprintln!("warning: {w}"))
}

/// [`allocator_config`] with the variables looked up by `lookup` and the warning given to
/// `warn`: the first set variable of the CUDA precedence, parsed (its error names it);
/// none set gives the defaults.
pub fn allocator_config_from(
    lookup: impl FnMut(&str) -> Option<OsString>,
    warn: impl FnOnce(&str),
) -> Result<AllocatorConfig, ConfigError> {
    let Some(chosen) = ChosenConf::choose(AllocConfPlatform::Cuda, lookup) else {
        return Ok(AllocatorConfig::default());
    };
    if let Some(w) = chosen.warning() {
        warn(&w);
    }
    chosen.parse()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(
        vars: &'static [(&'static str, &'static str)],
    ) -> impl FnMut(&str) -> Option<OsString> {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(*v))
        }
    }

    #[test]
    fn pytorch_cuda_name_configures_the_bench_and_memreuse_name_wins_with_a_warning() {
        let c = allocator_config_from(
            lookup(&[("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:40")]),
            |w| panic!("no warning expected: {w}"),
        )
        .expect("valid");
        assert_eq!(c.max_split_size, 40 << 20);
        let mut warned = String::new();
        let c = allocator_config_from(
            lookup(&[
                ("MEMREUSE_ALLOC_CONF", "max_split_size_mb:60"),
                ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:40"),
            ]),
            |w| warned = w.to_owned(),
        )
        .expect("valid");
        assert_eq!(c.max_split_size, 60 << 20);
        assert!(
            warned.contains("MEMREUSE_ALLOC_CONF") && warned.contains("PYTORCH_CUDA_ALLOC_CONF"),
            "{warned}"
        );
        let defaults = allocator_config_from(lookup(&[]), |_| {}).expect("defaults");
        assert_eq!(defaults, AllocatorConfig::default());
        let e = allocator_config_from(lookup(&[("PYTORCH_CUDA_ALLOC_CONF", "bogus:1")]), |_| {})
            .unwrap_err();
        assert!(e.to_string().contains("PYTORCH_CUDA_ALLOC_CONF"), "{e}");
    }
}
