//! Loading a plugin file and applying the version policy.
//!
//! Same major, any minor: the host copies only the `struct_size` bytes the plugin filled
//! into a zeroed table (entries past them read as NULL: absent capabilities) and ignores a
//! newer plugin's tail. A different major, a table too small for the required entries, a
//! NULL required entry or garbage sizes are a [`PluginError`] naming the file, both
//! versions and the field; nothing here aborts.

use std::ffi::c_char;
use std::mem::{MaybeUninit, offset_of, size_of};
use std::path::{Path, PathBuf};

use crate::abi::{ABI_MAJOR, API_SIZE_V1_0, MrBackendApi};
use crate::error::{AbiVersion, HOST_ABI, PluginError};

/// Largest `struct_size` believed (a table of 8000 entries); beyond it the size is garbage.
const MAX_TABLE_BYTES: usize = 64 << 10;
/// Newest major probed for an error message when `memreuse_backend_v1` is missing.
const PROBE_MAJORS: u32 = 9;

/// A loaded plugin: its file, declared version and the table as this host reads it.
pub struct Plugin {
    /// The file it was loaded from.
    pub path: PathBuf,
    /// The version it declares.
    pub version: AbiVersion,
    /// The backend name in its table.
    pub name: String,
    /// Its one-line summary (may be empty).
    pub summary: String,
    /// The entries this host reads (those past the plugin's `struct_size` are NULL).
    pub(crate) api: MrBackendApi,
}

// SAFETY: the table holds function pointers and pointers to static strings of a library
// that is never unloaded; the header's threading rules let any thread call device entries.
unsafe impl Send for Plugin {}
// SAFETY: as for Send; the table is never written after loading.
unsafe impl Sync for Plugin {}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Plugin({} ABI {} from {})",
            self.name,
            self.version,
            self.path.display()
        )
    }
}

type Entry = unsafe extern "C" fn() -> *const MrBackendApi;

macro_rules! end_of {
    ($field:ident) => {
        offset_of!(MrBackendApi, $field) + size_of::<usize>()
    };
}

/// Required entries with the offset they end at, in table order.
fn required(api: &MrBackendApi) -> Vec<(&'static str, usize, bool)> {
    macro_rules! req {
        ($($f:ident),*) => { vec![$((stringify!($f), end_of!($f), api.$f.is_some())),*] };
    }
    req!(
        last_error,
        device_count,
        device_open,
        device_close,
        memory_info,
        malloc,
        free,
        default_stream,
        stream_create,
        stream_destroy,
        stream_id,
        event_create,
        event_destroy,
        event_record,
        event_query,
        event_synchronize,
        stream_wait_event,
        stream_synchronize,
        device_synchronize,
        memset_zero,
        copy_host_to_device,
        copy_device_to_host,
        copy_device_to_device
    )
}

/// Entries required once the plugin offers communicators.
fn required_comm(api: &MrBackendApi) -> Vec<(&'static str, usize, bool)> {
    macro_rules! req {
        ($($f:ident),*) => { vec![$((stringify!($f), end_of!($f), api.$f.is_some())),*] };
    }
    req!(
        comm_rank_size,
        comm_new_group,
        comm_destroy,
        comm_abort,
        comm_async_error,
        all_reduce,
        all_gather,
        reduce_scatter,
        all_to_all,
        broadcast,
        send,
        recv
    )
}

fn open_error(path: &Path, e: &libloading::Error) -> PluginError {
    PluginError::Open {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// Reads `len` bytes at `ptr` as UTF-8 (`None` for NULL or invalid text).
///
/// # Safety
/// `ptr` must be NULL or point to `len` readable bytes.
pub(crate) unsafe fn text(ptr: *const c_char, len: usize) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees `len` readable bytes at a non-NULL `ptr`.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    std::str::from_utf8(bytes).ok().map(str::to_owned)
}

/// Loads `path` and checks its table against this host's ABI.
pub fn load(path: &Path) -> Result<Plugin, PluginError> {
    if !path.is_file() {
        return Err(PluginError::Open {
            path: path.to_owned(),
            reason: "no such file".to_owned(),
        });
    }
    // A bare file name would make dlopen search the library path: open the file named.
    let file = if path.is_relative() {
        Path::new(".").join(path)
    } else {
        path.to_owned()
    };
    // SAFETY: loading a library runs its initializers; that is what loading a plugin means,
    // and the user named this file as a memreuse plugin.
    let lib = unsafe { libloading::Library::new(&file) }.map_err(|e| open_error(path, &e))?;
    // Never unloaded: the plugin's threads and statics may outlive any handle we hold.
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    let symbol = format!("memreuse_backend_v{ABI_MAJOR}");
    // SAFETY: the symbol's type is fixed by memreuse_backend.h for this name.
    let entry = match unsafe { lib.get::<Entry>(symbol.as_bytes()) } {
        Ok(e) => *e,
        Err(_) => return Err(other_major(path, lib)),
    };
    // SAFETY: the entry takes no arguments and returns a table pointer (or NULL).
    let table = unsafe { entry() };
    if table.is_null() {
        return Err(PluginError::NullTable {
            path: path.to_owned(),
            symbol,
        });
    }
    // SAFETY: a non-NULL table begins with `size_t struct_size` (header rule 1).
    let struct_size = unsafe { table.cast::<usize>().read() };
    let header = end_of!(last_error);
    if struct_size < header || struct_size > MAX_TABLE_BYTES {
        return Err(PluginError::BadSize {
            path: path.to_owned(),
            struct_size,
            reason: format!(
                "an ABI 1 table is between {header} bytes (up to `last_error`) and {MAX_TABLE_BYTES}"
            ),
        });
    }
    let mut api = MaybeUninit::<MrBackendApi>::zeroed();
    let copy = struct_size.min(size_of::<MrBackendApi>());
    // SAFETY: the plugin filled `struct_size` bytes; we copy at most our table's size into
    // our zeroed table. All-zero is a valid MrBackendApi (None entries, NULL pointers).
    let api = unsafe {
        std::ptr::copy_nonoverlapping(table.cast::<u8>(), api.as_mut_ptr().cast::<u8>(), copy);
        api.assume_init()
    };
    let version = AbiVersion {
        major: api.abi_major,
        minor: api.abi_minor,
    };
    if version.major != ABI_MAJOR {
        return Err(PluginError::WrongMajor {
            path: path.to_owned(),
            plugin: version,
            host: HOST_ABI,
            via: format!("; its {symbol}() declares major {}", version.major),
        });
    }
    check_entries(path, version, struct_size, &api)?;
    // SAFETY: header rule: strings are (pointer, length) into the plugin's static data.
    let name = unsafe { text(api.name, api.name_len) }.unwrap_or_default();
    if name.is_empty() || name.chars().any(char::is_whitespace) {
        return Err(PluginError::BadName {
            path: path.to_owned(),
            reason: "empty, not UTF-8 or contains whitespace (give a short name like `host`)"
                .to_owned(),
        });
    }
    // SAFETY: as for `name`.
    let summary = unsafe { text(api.summary, api.summary_len) }.unwrap_or_default();
    Ok(Plugin {
        path: path.to_owned(),
        version,
        name,
        summary,
        api,
    })
}

fn check_entries(
    path: &Path,
    plugin: AbiVersion,
    struct_size: usize,
    api: &MrBackendApi,
) -> Result<(), PluginError> {
    let mut entries = required(api);
    if api.world_open.is_some() || api.comm_init_rank.is_some() {
        entries.extend(required_comm(api));
    }
    for (field, needed, present) in entries {
        if needed > struct_size {
            return Err(PluginError::TooSmall {
                path: path.to_owned(),
                plugin,
                host: HOST_ABI,
                field,
                struct_size,
                needed,
            });
        }
        if !present {
            return Err(PluginError::MissingEntry {
                path: path.to_owned(),
                plugin,
                host: HOST_ABI,
                field,
            });
        }
    }
    debug_assert!(API_SIZE_V1_0 >= end_of!(copy_device_to_device));
    Ok(())
}

/// The error for a library without `memreuse_backend_v1`: names a newer entry if one is
/// exported, so "built for another major" reads differently from "not a plugin".
fn other_major(path: &Path, lib: &libloading::Library) -> PluginError {
    for major in (1..=PROBE_MAJORS).rev().filter(|m| *m != ABI_MAJOR) {
        let name = format!("memreuse_backend_v{major}");
        // SAFETY: only the symbol's presence is checked; it is never called.
        if unsafe { lib.get::<Entry>(name.as_bytes()) }.is_ok() {
            return PluginError::WrongMajor {
                path: path.to_owned(),
                plugin: AbiVersion { major, minor: 0 },
                host: HOST_ABI,
                via: format!(
                    "; only {name} is exported, this host needs memreuse_backend_v{ABI_MAJOR}"
                ),
            };
        }
    }
    PluginError::NoEntry {
        path: path.to_owned(),
    }
}
