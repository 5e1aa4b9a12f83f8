//! Backends register themselves here: compiled-in ones with `inventory`, plugins loaded at
//! run time through [`crate::register_backend`]; the facade opens one by name.

use std::sync::{PoisonError, RwLock};

use thiserror::Error;

use crate::dyn_backend::AnyBackend;
use crate::error::BackendError;

/// How to open one device of a backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendOptions {
    /// Device index.
    pub device: usize,
    /// Device capacity in bytes, on backends where it can be set (the mock); ignored by
    /// real devices.
    pub memory_capacity: Option<u64>,
    /// Run deterministically from this seed, on backends that can (the mock).
    pub deterministic_seed: Option<u64>,
    /// Switch the backend's own race detector off, where it has one (the mock), so that
    /// only the `memreuse_core::race::RaceChecker` adaptor judges (`run --race-check
    /// adaptor`). Backends without a native detector ignore it.
    pub disable_native_race_detection: bool,
}

/// One backend linked into this binary. Submit it with `inventory::submit!`.
pub struct BackendRegistration {
    /// The name users select it by (`MEMREUSE_BACKEND`, `--backend`).
    pub name: &'static str,
    /// One line saying what it is.
    pub summary: &'static str,
    /// How many devices are usable; `Err(Unavailable)` when the vendor library or the
    /// driver is missing. Must never panic.
    pub device_count: fn() -> Result<usize, BackendError>,
    /// Opens one device.
    pub open: fn(&BackendOptions) -> Result<AnyBackend, BackendError>,
}

inventory::collect!(BackendRegistration);

/// Registrations added at run time (plugins), beside the `inventory` ones. They live as long
/// as the process: a loaded plugin is never unloaded.
static RUNTIME_BACKENDS: RwLock<Vec<&'static BackendRegistration>> = RwLock::new(Vec::new());

/// Adds a run-time registration (called by `crate::register_backend` once the name is
/// known to be free).
pub(crate) fn push_runtime_backend(registration: &'static BackendRegistration) {
    RUNTIME_BACKENDS
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .push(registration);
}

fn runtime_backends() -> Vec<&'static BackendRegistration> {
    RUNTIME_BACKENDS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Every backend of this process, sorted by name: those linked into this binary and those
/// registered at run time (plugins).
pub fn registered_backends() -> Vec<&'static BackendRegistration> {
    let mut all: Vec<_> = inventory::iter::<BackendRegistration>.into_iter().collect();
    all.extend(runtime_backends());
    all.sort_by_key(|r| r.name);
    all
}

/// The registration named `name`, if it is linked in or was registered at run time.
pub fn find_backend(name: &str) -> Option<&'static BackendRegistration> {
    inventory::iter::<BackendRegistration>
        .into_iter()
        .find(|r| r.name == name)
        .or_else(|| runtime_backends().into_iter().find(|r| r.name == name))
}

/// Why a backend could not be opened by name.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenError {
    /// No backend of that name is linked into this binary.
    #[error("unknown backend `{name}`; available in this build: {}", available.join(", "))]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names that are linked in.
        available: Vec<String>,
    },
    /// The backend exists but was not compiled in: rebuild with the cargo feature.
    #[error("backend `{name}` is not compiled into this build (enable cargo feature `{feature}`); available: {}", available.join(", "))]
    NotCompiled {
        /// The name asked for.
        name: String,
        /// The cargo feature that links it.
        feature: String,
        /// The names that are linked in.
        available: Vec<String>,
    },
    /// The backend is linked in but cannot run here.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A plugin named by `plugin:PATH` or `MEMREUSE_BACKEND_PLUGINS` could not be loaded.
    #[error("backend `{name}`: {reason}")]
    Plugin {
        /// The name asked for.
        name: String,
        /// What was wrong with the plugin (file, versions, field).
        reason: String,
    },
}

/// Opens device `options.device` of the backend called `name`.
pub fn open_backend(name: &str, options: &BackendOptions) -> Result<AnyBackend, OpenError> {
    let Some(reg) = find_backend(name) else {
        return Err(OpenError::Unknown {
            name: name.to_owned(),
            available: registered_backends()
                .iter()
                .map(|r| r.name.to_owned())
                .collect(),
        });
    };
    Ok((reg.open)(options)?)
}
