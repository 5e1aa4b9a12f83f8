//! Backends loaded at run time through the C ABI: before the command line is parsed, every
//! plugin `MEMREUSE_BACKEND_PLUGINS` names and every `plugin:PATH` given to `--backend` or
//! `--require-backend` is loaded and registered beside the compiled-in backends, so `list`,
//! `run` and `--require-backend` see them (docs/plugin-abi.md).

use std::ffi::OsString;

/// Loads and registers the environment's plugins and the `plugin:` names among `args`.
/// A plugin that cannot be loaded is a usage error for the caller (exit 2, before any run).
pub fn register(args: &[OsString]) -> Result<(), memreuse_plugin::PluginError> {
    memreuse_plugin::register_from_env()?;
    for name in backend_names(args) {
        memreuse_plugin::resolve(name)?;
    }
    Ok(())
}

/// The values of `--backend` and `--require-backend` (both `--flag VALUE` and
/// `--flag=VALUE`) that name a plugin file (`plugin:PATH`).
fn backend_names(args: &[OsString]) -> Vec<&str> {
    let mut names = Vec::new();
    let mut it = args.iter().filter_map(|a| a.to_str());
    while let Some(a) = it.next() {
        for flag in ["--backend", "--require-backend"] {
            if a == flag {
                names.extend(it.next());
            } else if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                names.push(v);
            }
        }
    }
    names.retain(|n| n.starts_with("plugin:"));
    names
}

#[cfg(test)]
mod tests {
    use super::backend_names;
    use std::ffi::OsString;

    #[test]
    fn plugin_names_come_from_both_flag_spellings_and_nothing_else() {
        let args: Vec<OsString> = [
            "memreuse-conformance",
            "--backend",
            "mock",
            "--backend=plugin:/a/b.so",
            "--require-backend",
            "plugin:c.so",
            "--schedule",
            "plugin:not-a-backend.json",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(backend_names(&args), ["plugin:/a/b.so", "plugin:c.so"]);
    }
}
