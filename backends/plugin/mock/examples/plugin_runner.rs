//! The stock conformance runner with plugins registered first: what `memreuse-conformance`
//! does once it is wired to `memreuse-plugin` (docs/plugin-abi.md, "Running the stock
//! binary"), until then the binary CI runs plugins with.
//!
//! Before the runner parses anything, every plugin `MEMREUSE_BACKEND_PLUGINS` names and
//! every `plugin:PATH` given to `--backend` / `--require-backend` is loaded and registered
//! (so `list` shows them, with their file and ABI version). A plugin that cannot be loaded
//! is a usage error: exit 2, before any run.

use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Err(e) = register(&args) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    memreuse_conformance::cli::main_with(args)
}

/// Registers the environment's plugins and the `plugin:` names among the arguments.
fn register(args: &[OsString]) -> Result<(), memreuse_plugin::PluginError> {
    memreuse_plugin::register_from_env()?;
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
    for name in names {
        memreuse_plugin::resolve(name)?;
    }
    Ok(())
}
