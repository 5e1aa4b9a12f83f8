//! Which environment variable the configuration string comes from: memreuse's own name
//! first, then PyTorch's names, so a launch script written for PyTorch configures memreuse
//! unchanged.
//!
//! Precedence: `MEMREUSE_ALLOC_CONF`, then `PYTORCH_ALLOC_CONF` (PyTorch 2.8+'s name), then
//! the platform's older name: `PYTORCH_CUDA_ALLOC_CONF` for CUDA, `PYTORCH_NPU_ALLOC_CONF`
//! for Ascend (the mock and Vulkan read only the first two). The first variable that is set
//! is used, even when empty (an empty `MEMREUSE_ALLOC_CONF` asks for the defaults whatever
//! PyTorch's variables say, as an empty `PYTORCH_ALLOC_CONF` does in PyTorch). Only the
//! variable used is parsed: an invalid value in a variable it overrides is not an error (the
//! override exists so that a PyTorch string memreuse refuses can be replaced), but every set
//! variable whose value differs from the one used is named in a `tracing` warning.

use std::ffi::OsString;

use super::config::{ALLOC_CONF_ENV, AllocatorConfig, ConfigError};

/// PyTorch's generic configuration variable (PyTorch 2.8+).
const PYTORCH_GENERIC: &str = "PYTORCH_ALLOC_CONF";
/// PyTorch's CUDA-only variable (the name before 2.8, still read).
const PYTORCH_CUDA: &str = "PYTORCH_CUDA_ALLOC_CONF";
/// torch_npu's variable.
const PYTORCH_NPU: &str = "PYTORCH_NPU_ALLOC_CONF";

/// PyTorch's and torch_npu's configuration variables that some platform reads after
/// [`ALLOC_CONF_ENV`].
pub const PYTORCH_ALLOC_CONF_ENVS: [&str; 3] = [PYTORCH_GENERIC, PYTORCH_CUDA, PYTORCH_NPU];

/// The platform whose PyTorch variable names apply: it decides the last variable of the
/// precedence. Backends map to it with [`AllocConfPlatform::for_backend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AllocConfPlatform {
    /// The mock, Vulkan and any backend PyTorch has no variable of its own for.
    #[default]
    Generic,
    /// CUDA: `PYTORCH_CUDA_ALLOC_CONF` last.
    Cuda,
    /// Ascend: `PYTORCH_NPU_ALLOC_CONF` last.
    Ascend,
}

impl AllocConfPlatform {
    /// The platform of a backend by its name as [`crate::Backend::name`] reports it or as
    /// `MEMREUSE_BACKEND` spells it: a name starting with `cuda` is CUDA, one starting with
    /// `ascend` or `npu` is Ascend, every other name is generic.
    pub fn for_backend(name: &str) -> Self {
        let name = name.to_ascii_lowercase();
        if name.starts_with("cuda") {
            AllocConfPlatform::Cuda
        } else if name.starts_with("ascend") || name.starts_with("npu") {
            AllocConfPlatform::Ascend
        } else {
            AllocConfPlatform::Generic
        }
    }

    /// The variables read, first one wins.
    pub const fn variables(self) -> &'static [&'static str] {
        match self {
            AllocConfPlatform::Generic => &[ALLOC_CONF_ENV, PYTORCH_GENERIC],
            AllocConfPlatform::Cuda => &[ALLOC_CONF_ENV, PYTORCH_GENERIC, PYTORCH_CUDA],
            AllocConfPlatform::Ascend => &[ALLOC_CONF_ENV, PYTORCH_GENERIC, PYTORCH_NPU],
        }
    }
}

/// The configuration variable chosen by [`ChosenConf::choose`], its value, and the set
/// variables it overrides whose values differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChosenConf {
    /// The variable used.
    pub variable: &'static str,
    /// Its value.
    pub value: OsString,
    /// Lower-precedence variables that are set to a different value (ignored).
    pub overridden: Vec<&'static str>,
}

impl ChosenConf {
    /// Picks the first set variable of `platform`'s precedence, looking each one up with
    /// `lookup` (`std::env::var_os` for the process's environment); `None` when none is set.
    pub fn choose(
        platform: AllocConfPlatform,
        mut lookup: impl FnMut(&str) -> Option<OsString>,
    ) -> Option<ChosenConf> {
        let mut set = platform
            .variables()
            .iter()
            .filter_map(|name| lookup(name).map(|value| (*name, value)));
        let (variable, value) = set.next()?;
        let overridden = set.filter(|(_, v)| *v != value).map(|(n, _)| n).collect();
        Some(ChosenConf {
            variable,
            value,
            overridden,
        })
    }

    /// The warning [`AllocatorConfig::from_env_for`] logs, `None` when no other set variable
    /// differs.
    pub fn warning(&self) -> Option<String> {
        if self.overridden.is_empty() {
            return None;
        }
        Some(format!(
            "allocator configuration read from {} (it takes precedence); {} set to a different value and ignored",
            self.variable,
            self.overridden.join(", "),
        ))
    }

    /// Parses the chosen value. An error names the chosen variable: errors in a variable
    /// other than [`ALLOC_CONF_ENV`] are wrapped in [`ConfigError::InVariable`].
    pub fn parse(&self) -> Result<AllocatorConfig, ConfigError> {
        let parsed = match self.value.to_str() {
            Some(s) => AllocatorConfig::parse(s),
            None => Err(ConfigError::NotUnicode),
        };
        parsed.map_err(|error| {
            if self.variable == ALLOC_CONF_ENV {
                error
            } else {
                ConfigError::InVariable {
                    variable: self.variable,
                    error: Box::new(error),
                }
            }
        })
    }
}

impl AllocatorConfig {
    /// [`AllocatorConfig::from_env_for`] with [`AllocConfPlatform::Generic`]:
    /// `MEMREUSE_ALLOC_CONF`, else `PYTORCH_ALLOC_CONF`. None set, or the one used empty
    /// after trimming, gives the defaults.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_for(AllocConfPlatform::Generic)
    }

    /// The user's configuration from the environment, for the backend named `backend`
    /// ([`crate::Backend::name`], or `MEMREUSE_BACKEND`'s spelling): the one call a library
    /// program makes to honour `MEMREUSE_ALLOC_CONF` (then `PYTORCH_ALLOC_CONF`, then
    /// `PYTORCH_CUDA_ALLOC_CONF` for CUDA or `PYTORCH_NPU_ALLOC_CONF` for Ascend, as
    /// [`AllocatorConfig::from_env_for`] reads them). Nothing set gives the defaults; an
    /// invalid value is the [`ConfigError`] naming the variable it came from.
    ///
    /// ```
    /// use memreuse_core::{AllocatorConfig, Backend, CachingAllocator};
    /// let backend = std::sync::Arc::new(memreuse_core::testing::ManualBackend::new(1 << 30));
    /// let config = AllocatorConfig::from_env_for_backend(backend.name())?;
    /// let allocator = CachingAllocator::try_new(backend, config)?;
    /// # drop(allocator);
    /// # Ok::<(), memreuse_core::allocator::ConfigError>(())
    /// ```
    pub fn from_env_for_backend(backend: &str) -> Result<Self, ConfigError> {
        Self::from_env_for(AllocConfPlatform::for_backend(backend))
    }

    /// Reads the configuration from the first set variable of `platform`'s precedence
    /// (module docs of `config_env.rs`: `MEMREUSE_ALLOC_CONF`, `PYTORCH_ALLOC_CONF`, then
    /// `PYTORCH_CUDA_ALLOC_CONF` or `PYTORCH_NPU_ALLOC_CONF`), warning when another set
    /// variable differs. Only the variable used is parsed, so its error is the one returned.
    pub fn from_env_for(platform: AllocConfPlatform) -> Result<Self, ConfigError> {
        let Some(chosen) = ChosenConf::choose(platform, |name| std::env::var_os(name)) else {
            return Ok(Self::default());
        };
        if let Some(warning) = chosen.warning() {
            tracing::warn!(variable = chosen.variable, "{warning}");
        }
        chosen.parse()
    }
}
