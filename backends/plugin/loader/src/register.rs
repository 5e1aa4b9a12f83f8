//! Plugins in the backend registry: `plugin:PATH` names and `MEMREUSE_BACKEND_PLUGINS`.
//!
//! `MEMREUSE_BACKEND_PLUGINS=name=PATH[,name=PATH...]`: entries are separated by `,`; the
//! first `=` of an entry separates the name from the path, so a path may contain `=` as it
//! is. A `,` inside a path is written `\,` and a backslash `\\`. Names are non-empty, with
//! no whitespace, `,`, `=` or `:`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use memreuse_core::{AnyBackend, RuntimeBackend, find_backend, register_backend};
use parking_lot::Mutex;

use crate::abi::MR_OK;
use crate::device::PluginDevice;
use crate::error::{AbiVersion, PluginError};
use crate::library::{Plugin, load};

/// The environment variable naming plugins.
pub const PLUGINS_VAR: &str = "MEMREUSE_BACKEND_PLUGINS";
/// The prefix of a backend name that is a plugin path (`plugin:./libmemreuse_host.so`).
pub const PLUGIN_PREFIX: &str = "plugin:";

/// A plugin registered in this process, for `list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedPlugin {
    /// The name it is selected by (`host`, or `plugin:PATH`).
    pub name: String,
    /// Its file.
    pub path: PathBuf,
    /// The ABI version it declares.
    pub version: AbiVersion,
    /// The backend name in its table.
    pub backend: String,
    /// Its summary.
    pub summary: String,
}

static LOADED: Mutex<Vec<LoadedPlugin>> = Mutex::new(Vec::new());

/// Every plugin registered so far, in registration order.
pub fn loaded_plugins() -> Vec<LoadedPlugin> {
    LOADED.lock().clone()
}

/// Loads `path` and registers it as backend `name`. Registering the same name for the same
/// file again is a no-op.
pub fn register_named(name: &str, path: &Path) -> Result<LoadedPlugin, PluginError> {
    if let Some(done) = LOADED.lock().iter().find(|p| p.name == name) {
        return if done.path == path {
            Ok(done.clone())
        } else {
            Err(PluginError::Register {
                path: path.to_owned(),
                reason: format!(
                    "the name `{name}` is already given to plugin {}",
                    done.path.display()
                ),
            })
        };
    }
    let plugin = Arc::new(load(path)?);
    let info = LoadedPlugin {
        name: name.to_owned(),
        path: path.to_owned(),
        version: plugin.version,
        backend: plugin.name.clone(),
        summary: plugin.summary.clone(),
    };
    let summary = format!(
        "plugin {} (ABI {}){}{}",
        path.display(),
        plugin.version,
        if plugin.summary.is_empty() { "" } else { ": " },
        plugin.summary
    );
    let (count, open) = (Arc::clone(&plugin), Arc::clone(&plugin));
    let world = Arc::clone(&plugin);
    let has_world = plugin.api.world_open.is_some() || plugin.api.comm_init_rank.is_some();
    register_backend(RuntimeBackend {
        name: name.to_owned(),
        summary,
        device_count: Box::new(move || device_count(&count)),
        open: Box::new(move |o| Ok(AnyBackend::new(PluginDevice::open(&open, o)?))),
        open_world: has_world.then(|| -> memreuse_core::OpenWorldFn {
            Box::new(move |o| crate::world::open_endpoints(&world, o))
        }),
    })
    .map_err(|e| PluginError::Register {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    LOADED.lock().push(info.clone());
    Ok(info)
}

fn device_count(plugin: &Plugin) -> Result<usize, memreuse_core::BackendError> {
    let Some(f) = plugin.api.device_count else {
        return Err(plugin.absent("device_count"));
    };
    let mut n = 0usize;
    // SAFETY: a required entry taking a count out-pointer.
    let status = unsafe { f(&raw mut n) };
    if status == MR_OK {
        Ok(n)
    } else {
        Err(plugin.backend_error(status, "device_count", 0))
    }
}

/// Registers a `plugin:PATH` name (the name is the text given, `plugin:` included) and
/// returns what was registered; a name without the prefix is `Ok(None)`, for the caller to
/// look up among the other backends.
pub fn resolve(name: &str) -> Result<Option<LoadedPlugin>, PluginError> {
    let Some(path) = name.strip_prefix(PLUGIN_PREFIX) else {
        return Ok(None);
    };
    if path.is_empty() {
        return Err(PluginError::Spec {
            what: format!("backend `{name}`"),
            reason: "give the plugin's file after `plugin:` (plugin:./libmemreuse_host.so)"
                .to_owned(),
        });
    }
    register_named(name, Path::new(path)).map(Some)
}

/// Parses a `MEMREUSE_BACKEND_PLUGINS` value into (name, path) pairs.
pub fn parse_plugin_list(text: &str) -> Result<Vec<(String, PathBuf)>, PluginError> {
    let bad = |reason: String| PluginError::Spec {
        what: format!("{PLUGINS_VAR}={text:?}"),
        reason,
    };
    let mut entries = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars();
    let mut raw_entries = Vec::new();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                match chars.next() {
                    Some(e @ (',' | '\\')) => current.push(e),
                    _ => return Err(bad(
                        "`\\` must be followed by `,` or `\\` (write `\\,` for a comma in a path)"
                            .to_owned(),
                    )),
                }
            }
            ',' => raw_entries.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    raw_entries.push(current);
    for entry in raw_entries {
        if entry.trim().is_empty() {
            continue;
        }
        let Some((name, path)) = entry.split_once('=') else {
            return Err(bad(format!("entry {entry:?} has no `=`: write name=PATH")));
        };
        let name = name.trim();
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == ':') {
            return Err(bad(format!(
                "name {name:?} must be non-empty without whitespace or `:`"
            )));
        }
        if path.is_empty() {
            return Err(bad(format!("plugin `{name}` has an empty path")));
        }
        entries.push((name.to_owned(), PathBuf::from(path)));
    }
    Ok(entries)
}

/// Registers every plugin `MEMREUSE_BACKEND_PLUGINS` names (none when it is unset).
pub fn register_from_env() -> Result<Vec<LoadedPlugin>, PluginError> {
    match std::env::var(PLUGINS_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(Vec::new()),
        Err(std::env::VarError::NotUnicode(raw)) => Err(PluginError::Spec {
            what: format!("{PLUGINS_VAR}={}", raw.to_string_lossy()),
            reason: "not valid UTF-8".to_owned(),
        }),
        Ok(text) => parse_plugin_list(&text)?
            .into_iter()
            .map(|(name, path)| register_named(&name, &path))
            .collect(),
    }
}

/// True when `name` is registered (compiled in or a plugin) after resolving `plugin:` names
/// and the environment: what a runner calls before opening `name`.
pub fn ensure_registered(name: &str) -> Result<bool, PluginError> {
    if find_backend(name).is_some() {
        return Ok(true);
    }
    if resolve(name)?.is_some() {
        return Ok(true);
    }
    register_from_env()?;
    Ok(find_backend(name).is_some())
}
