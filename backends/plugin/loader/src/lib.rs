//! memreuse-plugin: backends loaded at run time through the stable C ABI of
//! `backends/plugin/include/memreuse_backend.h` (`docs/plugin-abi.md`).
//!
//! A vendor ports an accelerator in C (the reference plugin `backends/plugin/host` is the
//! template), builds a shared library, and runs the stock binaries on it: this crate loads
//! the library ([`load`]), applies the version policy (same major, any minor; typed
//! [`PluginError`]s naming the file, both versions and the field otherwise), and makes each
//! device an ordinary [`memreuse_core::Backend`] ([`PluginDevice`]) and each communicator
//! an ordinary [`memreuse_core::Communicator`] ([`PluginComm`]), so the allocator, the
//! process group, the race-checking adaptor and the contract kits apply unchanged.
//!
//! Plugins join the same registry as the compiled-in backends ([`register_named`],
//! [`resolve`] for `plugin:PATH` names, [`register_from_env`] for
//! `MEMREUSE_BACKEND_PLUGINS`); `memreuse_core::find_backend` and `find_world` then find
//! them by name.
//!
//! ```no_run
//! use memreuse_core::{Backend, BackendOptions};
//! let plugin = std::sync::Arc::new(memreuse_plugin::load("backends/plugin/host/libmemreuse_host.so".as_ref())?);
//! let device = memreuse_plugin::PluginDevice::open(&plugin, &BackendOptions::default())?;
//! let p = device.malloc(1024)?;
//! device.free(p)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod abi;
mod comm;
mod device;
mod error;
mod handles;
mod library;
mod register;
mod status;
mod world;

pub use comm::{PluginComm, dtype_code, op_code};
pub use device::{PluginDevice, PluginEvent, PluginStream};
pub use error::{AbiVersion, HOST_ABI, PluginError};
pub use library::{Plugin, load};
pub use register::{
    LoadedPlugin, PLUGIN_PREFIX, PLUGINS_VAR, ensure_registered, loaded_plugins, parse_plugin_list,
    register_from_env, register_named, resolve,
};
pub use status::status_name;
pub use world::{PluginRank, open_plugin_world};
