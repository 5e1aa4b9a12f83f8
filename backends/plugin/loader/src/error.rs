//! Why a plugin could not be loaded or registered: each error names the file and what was
//! wrong with it, so a CI log says what to fix.

use std::path::PathBuf;

use thiserror::Error;

/// An ABI version, `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbiVersion {
    /// Incompatible changes.
    pub major: u32,
    /// Append-only additions.
    pub minor: u32,
}

impl std::fmt::Display for AbiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// This host's ABI version.
pub const HOST_ABI: AbiVersion = AbiVersion {
    major: crate::abi::ABI_MAJOR,
    minor: crate::abi::ABI_MINOR,
};

/// What went wrong loading a plugin.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PluginError {
    /// The file is missing, unreadable or not a shared library of this platform.
    #[error("plugin {}: cannot be loaded as a shared library: {reason}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// What the dynamic loader said.
        reason: String,
    },
    /// The library exports no `memreuse_backend_v*` entry symbol.
    #[error("plugin {}: exports no entry symbol `memreuse_backend_v{}` (is it a memreuse backend plugin built against memreuse_backend.h?)", path.display(), HOST_ABI.major)]
    NoEntry {
        /// The file.
        path: PathBuf,
    },
    /// The plugin speaks another major version only.
    #[error("plugin {}: ABI {plugin} is not compatible with this host's ABI {host} (majors differ{via})", path.display())]
    WrongMajor {
        /// The file.
        path: PathBuf,
        /// What the plugin declares.
        plugin: AbiVersion,
        /// [`HOST_ABI`].
        host: AbiVersion,
        /// How it was found (`; only memreuse_backend_v2 is exported`).
        via: String,
    },
    /// The entry returned NULL.
    #[error("plugin {}: {symbol}() returned a NULL table", path.display())]
    NullTable {
        /// The file.
        path: PathBuf,
        /// The entry symbol.
        symbol: String,
    },
    /// `struct_size` is not a size any ABI 1 table can have.
    #[error("plugin {}: table struct_size {struct_size} is garbage: {reason}", path.display())]
    BadSize {
        /// The file.
        path: PathBuf,
        /// What it said.
        struct_size: usize,
        /// Why it cannot be right.
        reason: String,
    },
    /// The table ends before a required entry.
    #[error("plugin {} (ABI {plugin}, host {host}): table struct_size {struct_size} is too small for required entry `{field}` (needs {needed})", path.display())]
    TooSmall {
        /// The file.
        path: PathBuf,
        /// What the plugin declares.
        plugin: AbiVersion,
        /// [`HOST_ABI`].
        host: AbiVersion,
        /// The first required entry past the end.
        field: &'static str,
        /// What it said.
        struct_size: usize,
        /// Bytes the entry needs.
        needed: usize,
    },
    /// A required entry is NULL.
    #[error("plugin {} (ABI {plugin}, host {host}): required entry `{field}` is NULL", path.display())]
    MissingEntry {
        /// The file.
        path: PathBuf,
        /// What the plugin declares.
        plugin: AbiVersion,
        /// [`HOST_ABI`].
        host: AbiVersion,
        /// The entry.
        field: &'static str,
    },
    /// The table's name is empty or not UTF-8.
    #[error("plugin {}: table field `name` is {reason}", path.display())]
    BadName {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `MEMREUSE_BACKEND_PLUGINS` or a `plugin:` name could not be parsed.
    #[error("{what}: {reason}")]
    Spec {
        /// The text.
        what: String,
        /// What is wrong and what is valid.
        reason: String,
    },
    /// The registry refused the name.
    #[error("plugin {}: {reason}", path.display())]
    Register {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}
