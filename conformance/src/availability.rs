//! Whether a backend is linked into this build: the one place that decides "not compiled
//! into this build" and words it (with the cargo feature that would link it), for the
//! runner's skips, `--require-backend` and `list`.

use memreuse::BackendRegistration;

/// A backend name this build does not link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotCompiled {
    /// The backend's name.
    pub backend: String,
    /// The cargo feature that links it (the name itself for a backend memreuse does not
    /// know).
    pub feature: String,
}

impl std::fmt::Display for NotCompiled {
    /// `not compiled into this build (cargo feature `F`)`: callers put the backend's name
    /// in front, each in its own phrasing.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not compiled into this build (cargo feature `{}`)",
            self.feature
        )
    }
}

/// The registration of the backend called `name`, or why there is none: it is not
/// compiled into this build.
pub fn registration(name: &str) -> Result<&'static BackendRegistration, NotCompiled> {
    memreuse::find_backend(name).ok_or_else(|| NotCompiled {
        backend: name.to_owned(),
        feature: memreuse::KNOWN_BACKENDS
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(name, |(_, f)| f)
            .to_owned(),
    })
}
