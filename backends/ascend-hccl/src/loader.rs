//! Finding and opening `libascendcl.so` and `libhccl.so`, and resolving every symbol once.
//!
//! Search order (the first directory holding **both** libraries wins; every path tried is
//! recorded for the "unavailable" error):
//! 1. `$MEMREUSE_ASCEND_LIB_DIR` (tests point it at the stand-in; nothing else sets it),
//! 2. `$ASCEND_HOME_PATH/lib64` (set by CANN's `set_env.sh`),
//! 3. [`CANN_LIB_DIR`] (current installs), then [`DEFAULT_CANN_LIB_DIR`] (older ones),
//! 4. the system search path (`LD_LIBRARY_PATH`, ld.so cache) by bare file name.
//!
//! Required symbols are those every CANN release this backend targets exports; a library
//! lacking one is refused with [`LoadError::MissingSymbol`]. Optional symbols are `None` when
//! absent and each has a fallback (the table is in `backends/ascend-hccl/docs/usage-rules.md`).
//! `HcclGroupStart` / `HcclGroupEnd` are looked up in `libhccl.so` (which on CANN 8.5+ links
//! `libhcomm.so`, so the lookup reaches it), then in `libhcomm.so` opened from the same
//! directory, then by bare name, as torch_npu does.

use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

use libloading::Library;

use crate::sys;

/// Environment variable naming a directory that holds both libraries (checked first).
pub const LIB_DIR_ENV: &str = "MEMREUSE_ASCEND_LIB_DIR";
/// CANN's install root variable; libraries are under its `lib64`.
pub const ASCEND_HOME_ENV: &str = "ASCEND_HOME_PATH";
/// Where current CANN installs put their libraries.
pub const CANN_LIB_DIR: &str = "/usr/local/Ascend/cann/lib64";
/// Where older CANN toolkits install by default.
pub const DEFAULT_CANN_LIB_DIR: &str = "/usr/local/Ascend/ascend-toolkit/latest/lib64";
/// The library that exports `HcclGroupStart` / `HcclGroupEnd` from CANN 8.5 on.
pub const HCOMM_LIB: &str = "libhcomm.so";
/// The ACL runtime library's file name.
pub const ACL_LIB: &str = "libascendcl.so";
/// The HCCL library's file name.
pub const HCCL_LIB: &str = "libhccl.so";

/// Why the libraries could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No candidate location held loadable libraries.
    #[error("could not load {ACL_LIB} + {HCCL_LIB}; tried: {}", tried.join("; "))]
    NotFound {
        /// Every path tried, each with the loader's message.
        tried: Vec<String>,
    },
    /// The libraries loaded but lack a symbol this backend cannot work without.
    #[error("{library} at {path} lacks required symbol `{symbol}`")]
    MissingSymbol {
        /// `libascendcl.so` or `libhccl.so`.
        library: &'static str,
        /// Where it was loaded from.
        path: String,
        /// The symbol.
        symbol: &'static str,
    },
    /// `MEMREUSE_ASCEND_DISABLE_SYMBOLS` named a symbol that cannot be disabled.
    #[error(
        "{DISABLE_SYMBOLS_ENV} names `{symbol}`, which {why}; only these optional symbols can be disabled: {}",
        OPTIONAL_SYMBOLS.join(", ")
    )]
    CannotDisable {
        /// The name given.
        symbol: String,
        /// "is required" or "is not a symbol this backend binds".
        why: &'static str,
    },
}

/// The opened libraries, by the short names the symbol table below uses.
struct Libs {
    acl: Library,
    hccl: Library,
    /// `libhcomm.so`, opened only when `libhccl.so` lacks the group symbols.
    hcomm: Option<Library>,
}

impl Libs {
    /// Looks `symbol` up in `lib` (`hccl` falls back to `libhcomm.so`); the second value
    /// names the library it came from.
    /// A symbol found through `libhccl.so` that `libhcomm.so` defines (same address) is
    /// named as coming from `libhcomm.so`.
    fn find<T: Copy>(&self, lib: &str, symbol: &str) -> Option<(T, &'static str)> {
        if lib == "acl" {
            return optional(&self.acl, symbol).map(|f| (f, ACL_LIB));
        }
        let in_hcomm = self.hcomm.as_ref().and_then(|h| optional::<T>(h, symbol));
        match optional::<T>(&self.hccl, symbol) {
            Some(f) => {
                let defined_by_hcomm = in_hcomm.is_some_and(|h| same_address(&h, &f));
                Some((
                    f,
                    if defined_by_hcomm {
                        HCOMM_LIB
                    } else {
                        HCCL_LIB
                    },
                ))
            }
            None => in_hcomm.map(|f| (f, HCOMM_LIB)),
        }
    }
}

macro_rules! api {
    (
        required { $($lib:ident :: $name:ident),* $(,)? }
        optional { $($olib:ident :: $oname:ident : $oty:ident),* $(,)? }
    ) => {
        /// Every bound function, resolved once from the loaded libraries.
        #[allow(non_snake_case)]
        pub struct Api {
            /// The ACL runtime library (kept open for the process's lifetime).
            _acl: Library,
            /// The HCCL library.
            _hccl: Library,
            /// `libhcomm.so`, when it was opened for the group symbols.
            _hcomm: Option<Library>,
            /// The directory (or `system search path`) the libraries came from.
            pub source: String,
            /// The library `HcclGroupStart` / `HcclGroupEnd` came from (`None`: absent).
            pub group_source: Option<&'static str>,
            $(
                #[doc = concat!("`", stringify!($name), "` (required).")]
                pub $name: sys::$name,
            )*
            $(
                #[doc = concat!("`", stringify!($oname), "` (optional).")]
                pub $oname: Option<sys::$oty>,
            )*
        }

        /// Every required symbol, by name.
        pub const REQUIRED_SYMBOLS: &[&str] = &[$(stringify!($name)),*];
        /// Every optional symbol, by name (what `MEMREUSE_ASCEND_DISABLE_SYMBOLS` may name).
        pub const OPTIONAL_SYMBOLS: &[&str] = &[$(stringify!($oname)),*];

        impl Api {
            #[allow(non_snake_case)]
            fn resolve(libs: Libs, source: String, disabled: &[String]) -> Result<Api, LoadError> {
                check_disabled(disabled)?;
                let mut sources: Vec<(&'static str, &'static str)> = Vec::new();
                $(
                    let $name: sys::$name = match libs.find(stringify!($lib), stringify!($name)) {
                        Some((f, _)) => f,
                        None => return Err(missing(stringify!($lib), &source, stringify!($name))),
                    };
                )*
                $(
                    let $oname: Option<sys::$oty> = if disabled.iter().any(|d| d == stringify!($oname)) {
                        None
                    } else {
                        libs.find(stringify!($olib), stringify!($oname)).map(|(f, from)| {
                            sources.push((stringify!($oname), from));
                            f
                        })
                    };
                )*
                let mut api = Api {
                    _acl: libs.acl,
                    _hccl: libs.hccl,
                    _hcomm: libs.hcomm,
                    source,
                    group_source: None,
                    $($name,)* $($oname,)*
                };
                api.pair_group_symbols(&sources);
                Ok(api)
            }
        }
    };
}

// Which CANN versions export each symbol, and each optional symbol's fallback:
// `backends/ascend-hccl/docs/usage-rules.md`.
api! {
    required {
        acl::aclInit, acl::aclFinalize, acl::aclrtSetDevice, acl::aclrtResetDevice,
        acl::aclrtGetDeviceCount, acl::aclrtMallocHost, acl::aclrtFreeHost, acl::aclrtMalloc,
        acl::aclrtFree, acl::aclrtGetMemInfo, acl::aclrtCreateStream, acl::aclrtDestroyStream,
        acl::aclrtSynchronizeStream, acl::aclrtSynchronizeDevice, acl::aclrtCreateEventWithFlag,
        acl::aclrtDestroyEvent, acl::aclrtRecordEvent, acl::aclrtResetEvent,
        acl::aclrtQueryEventStatus, acl::aclrtSynchronizeEvent, acl::aclrtStreamWaitEvent,
        acl::aclrtMemcpyAsync, acl::aclrtMemsetAsync,
        hccl::HcclGetRootInfo, hccl::HcclCommInitRootInfo, hccl::HcclAllReduce,
        hccl::HcclBroadcast, hccl::HcclReduceScatter, hccl::HcclAllGather, hccl::HcclSend,
        hccl::HcclRecv, hccl::HcclAlltoAll, hccl::HcclCommDestroy, hccl::HcclGetCommAsyncError,
    }
    optional {
        acl::aclrtMallocAlign32: aclrtMalloc,
        acl::aclrtCreateEventExWithFlag: aclrtCreateEventWithFlag,
        acl::aclrtDestroyStreamForce: aclrtDestroyStreamForce,
        acl::aclrtSynchronizeStreamWithTimeout: aclrtSynchronizeStreamWithTimeout,
        acl::aclrtReserveMemAddress: aclrtReserveMemAddress,
        acl::aclrtReleaseMemAddress: aclrtReleaseMemAddress,
        acl::aclrtMallocPhysical: aclrtMallocPhysical,
        acl::aclrtFreePhysical: aclrtFreePhysical,
        acl::aclrtMapMem: aclrtMapMem,
        acl::aclrtUnmapMem: aclrtUnmapMem,
        acl::aclrtMemGetAllocationGranularity: aclrtMemGetAllocationGranularity,
        hccl::HcclBarrier: HcclBarrier,
        hccl::HcclGroupStart: HcclGroupStart,
        hccl::HcclGroupEnd: HcclGroupEnd,
        acl::memreuse_standin_configure: memreuse_standin_configure,
        acl::memreuse_standin_set_race_detection: memreuse_standin_set_race_detection,
        acl::memreuse_standin_annotate: memreuse_standin_annotate,
        acl::memreuse_standin_set_op_label: memreuse_standin_set_op_label,
        acl::memreuse_standin_delay: memreuse_standin_delay,
        acl::memreuse_standin_race_reports: memreuse_standin_race_reports,
    }
}

impl fmt::Debug for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Api(from {})", self.source)
    }
}

impl Api {
    /// Half a pair of group symbols is no pair (run ungrouped); records where the pair
    /// came from.
    fn pair_group_symbols(&mut self, sources: &[(&'static str, &'static str)]) {
        if self.HcclGroupStart.is_some() && self.HcclGroupEnd.is_some() {
            self.group_source = sources
                .iter()
                .find(|(n, _)| *n == "HcclGroupStart")
                .map(|(_, from)| *from);
        } else {
            self.HcclGroupStart = None;
            self.HcclGroupEnd = None;
        }
    }

    /// True when the library is the memreuse stand-in (it exports the harness hooks).
    pub fn is_standin(&self) -> bool {
        self.memreuse_standin_configure.is_some()
    }
}

fn missing(library: &str, source: &str, symbol: &'static str) -> LoadError {
    LoadError::MissingSymbol {
        library: if library == "acl" { ACL_LIB } else { HCCL_LIB },
        path: source.to_owned(),
        symbol,
    }
}

/// Every name in `disabled` must be an optional symbol: disabling a required one would
/// silently do nothing, and an unknown name is a typo.
fn check_disabled(disabled: &[String]) -> Result<(), LoadError> {
    for d in disabled {
        if OPTIONAL_SYMBOLS.contains(&d.as_str()) {
            continue;
        }
        let why = if REQUIRED_SYMBOLS.contains(&d.as_str()) {
            "is required"
        } else {
            "is not a symbol this backend binds"
        };
        return Err(LoadError::CannotDisable {
            symbol: d.clone(),
            why,
        });
    }
    Ok(())
}

/// True when two function pointers of one `sys` type are the same address.
fn same_address<T: Copy>(a: &T, b: &T) -> bool {
    let size = std::mem::size_of::<T>();
    // SAFETY: both are `size` readable bytes (function pointers, no padding).
    unsafe {
        std::slice::from_raw_parts(std::ptr::from_ref(a).cast::<u8>(), size)
            == std::slice::from_raw_parts(std::ptr::from_ref(b).cast::<u8>(), size)
    }
}

fn optional<T: Copy>(lib: &Library, symbol: &str) -> Option<T> {
    let mut name = symbol.as_bytes().to_vec();
    name.push(0);
    // SAFETY: `T` is always one of the `sys` function-pointer types, declared with the
    // exact C signature of `symbol` from the reference ABI; the library stays loaded for
    // as long as the returned pointer is used (it is stored next to it in `Api`, and the
    // process-wide `Api` is never dropped).
    unsafe { lib.get::<T>(&name).ok().map(|s| *s) }
}

/// The candidate directories, in search order; `None` means "bare name, system search".
pub fn candidate_dirs() -> Vec<Option<PathBuf>> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os(LIB_DIR_ENV).filter(|v| !v.is_empty()) {
        dirs.push(Some(PathBuf::from(d)));
    }
    if let Some(h) = std::env::var_os(ASCEND_HOME_ENV).filter(|v| !v.is_empty()) {
        dirs.push(Some(PathBuf::from(h).join("lib64")));
    }
    dirs.push(Some(PathBuf::from(CANN_LIB_DIR)));
    dirs.push(Some(PathBuf::from(DEFAULT_CANN_LIB_DIR)));
    dirs.push(None);
    dirs
}

fn open(dir: Option<&PathBuf>, name: &str, tried: &mut Vec<String>) -> Option<Library> {
    let (shown, target) = match dir {
        Some(d) => {
            let p = d.join(name);
            (p.display().to_string(), p.into_os_string())
        }
        None => (
            format!("{name} (system search path)"),
            std::ffi::OsString::from(name),
        ),
    };
    // SAFETY: loading runs the library's initialisers. The candidates are the vendor's ACL
    // and HCCL runtimes (or the stand-in the test harness points at), whose initialisers
    // are designed to run on dlopen; no symbol is used before resolution checks it.
    match unsafe { Library::new(&target) } {
        Ok(lib) => Some(lib),
        Err(e) => {
            tried.push(format!("{shown}: {e}"));
            None
        }
    }
}

/// Optional symbols named (comma-separated) in this variable are treated as absent, to
/// force the fallback path (e.g. `aclrtMallocAlign32` on a runtime whose version misbehaves).
/// Naming a required or unknown symbol is [`LoadError::CannotDisable`]. This is not how a
/// CANN version's absent symbols are tested: CI builds stand-in variants that lack them.
pub const DISABLE_SYMBOLS_ENV: &str = "MEMREUSE_ASCEND_DISABLE_SYMBOLS";

/// The optional symbols disabled by [`DISABLE_SYMBOLS_ENV`].
pub fn disabled_from_env() -> Vec<String> {
    std::env::var(DISABLE_SYMBOLS_ENV)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Opens both libraries from the first of `dirs` that has them (`None`: bare names through
/// the system search path), treating the optional symbols in `disabled` as absent.
pub fn load_from(dirs: &[Option<PathBuf>], disabled: &[String]) -> Result<Api, LoadError> {
    let mut tried = Vec::new();
    for dir in dirs {
        let Some(acl) = open(dir.as_ref(), ACL_LIB, &mut tried) else {
            continue;
        };
        let Some(hccl) = open(dir.as_ref(), HCCL_LIB, &mut tried) else {
            continue;
        };
        let source = dir.as_ref().map_or_else(
            || "system search path".to_owned(),
            |d| d.display().to_string(),
        );
        // CANN 8.5+: the group symbols live in libhcomm.so (which libhccl.so links, so the
        // lookup through libhccl.so may find them too). Its absence is no error.
        let mut ignored = Vec::new();
        let hcomm = open(dir.as_ref(), HCOMM_LIB, &mut ignored).or_else(|| {
            optional::<sys::HcclGroupStart>(&hccl, "HcclGroupStart")
                .is_none()
                .then(|| open(None, HCOMM_LIB, &mut ignored))
                .flatten()
        });
        return Api::resolve(Libs { acl, hccl, hcomm }, source, disabled);
    }
    Err(LoadError::NotFound { tried })
}

/// [`load_from`] over [`candidate_dirs`] with [`disabled_from_env`], without caching.
pub fn load_fresh() -> Result<Api, LoadError> {
    load_from(&candidate_dirs(), &disabled_from_env())
}

/// The process-wide libraries, loaded on first use (the outcome, success or failure, is
/// kept: set `MEMREUSE_ASCEND_LIB_DIR` before the first call).
pub fn api() -> Result<&'static Api, LoadError> {
    static API: OnceLock<Result<Api, LoadError>> = OnceLock::new();
    API.get_or_init(load_fresh).as_ref().map_err(Clone::clone)
}
