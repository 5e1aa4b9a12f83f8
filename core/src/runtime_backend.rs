//! Backends registered at run time (plugins loaded from a file), beside the compiled-in
//! `inventory` ones, in the same registry: once registered, [`crate::find_backend`],
//! [`crate::registered_backends`], [`crate::open_backend`] and [`crate::find_world`] see
//! them like any other backend, so code that opens backends by name needs no change.
//!
//! The registry's entries hold plain `fn` pointers (they are `inventory` statics); a
//! run-time backend carries state (its loaded library). Each registration therefore takes
//! one of [`MAX_RUNTIME_BACKENDS`] slots, and the slot's monomorphized `fn`s forward to the
//! closures stored in it.

use std::sync::{Mutex, OnceLock, PoisonError};

use thiserror::Error;

use crate::dyn_backend::AnyBackend;
use crate::error::BackendError;
use crate::registry::{BackendOptions, BackendRegistration, find_backend, push_runtime_backend};
use crate::world::{RankEndpoint, WorldOptions, WorldRegistration, push_runtime_world};

/// How many backends one process can register at run time.
pub const MAX_RUNTIME_BACKENDS: usize = 32;

/// Counts the devices of a run-time backend.
pub type DeviceCountFn = Box<dyn Fn() -> Result<usize, BackendError> + Send + Sync>;
/// Opens one device of a run-time backend.
pub type OpenFn = Box<dyn Fn(&BackendOptions) -> Result<AnyBackend, BackendError> + Send + Sync>;
/// Opens every rank of a world of a run-time backend.
pub type OpenWorldFn =
    Box<dyn Fn(&WorldOptions) -> Result<Vec<RankEndpoint>, BackendError> + Send + Sync>;

/// A backend to register at run time (see [`register_backend`]).
pub struct RuntimeBackend {
    /// The name users select it by (`--backend NAME`); must be free.
    pub name: String,
    /// One line saying what it is (a plugin's says its file and ABI version).
    pub summary: String,
    /// How many devices are usable (`Err(Unavailable)` when the vendor library is missing).
    pub device_count: DeviceCountFn,
    /// Opens one device.
    pub open: OpenFn,
    /// Opens a whole world in this process, when the backend can.
    pub open_world: Option<OpenWorldFn>,
}

/// Why a run-time registration was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegisterError {
    /// The name is empty or contains whitespace.
    #[error("backend name {name:?} is not valid: give a non-empty name without whitespace")]
    InvalidName {
        /// The name asked for.
        name: String,
    },
    /// A compiled-in or earlier registered backend already has the name.
    #[error("backend name `{name}` is already registered; pick another name")]
    NameTaken {
        /// The name asked for.
        name: String,
    },
    /// Every slot is taken.
    #[error("at most {limit} backends can be registered at run time in one process")]
    Full {
        /// [`MAX_RUNTIME_BACKENDS`].
        limit: usize,
    },
}

struct Slot {
    backend: RuntimeBackend,
}

static SLOTS: [OnceLock<Slot>; MAX_RUNTIME_BACKENDS] =
    [const { OnceLock::new() }; MAX_RUNTIME_BACKENDS];
/// Serializes registrations (name check, slot choice, publication).
static REGISTER: Mutex<usize> = Mutex::new(0);

fn empty_slot() -> BackendError {
    BackendError::Unavailable {
        backend: "runtime".to_owned(),
        reason: "run-time backend slot used before registration".to_owned(),
    }
}

fn device_count_slot<const K: usize>() -> Result<usize, BackendError> {
    SLOTS[K]
        .get()
        .map_or_else(|| Err(empty_slot()), |s| (s.backend.device_count)())
}

fn open_slot<const K: usize>(options: &BackendOptions) -> Result<AnyBackend, BackendError> {
    SLOTS[K]
        .get()
        .map_or_else(|| Err(empty_slot()), |s| (s.backend.open)(options))
}

fn open_world_slot<const K: usize>(
    options: &WorldOptions,
) -> Result<Vec<RankEndpoint>, BackendError> {
    match SLOTS[K].get().and_then(|s| s.backend.open_world.as_ref()) {
        Some(open) => open(options),
        None => Err(empty_slot()),
    }
}

type Fns = (
    fn() -> Result<usize, BackendError>,
    fn(&BackendOptions) -> Result<AnyBackend, BackendError>,
    fn(&WorldOptions) -> Result<Vec<RankEndpoint>, BackendError>,
);

macro_rules! slot_fns {
    ($($k:literal)*) => {
        [$((device_count_slot::<$k> as fn() -> _, open_slot::<$k> as fn(&_) -> _, open_world_slot::<$k> as fn(&_) -> _)),*]
    };
}

static SLOT_FNS: [Fns; MAX_RUNTIME_BACKENDS] = slot_fns!(
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
);

/// Registers `backend` beside the compiled-in ones, for the life of the process, and
/// returns its registration (what [`crate::find_backend`] will return for its name).
pub fn register_backend(
    backend: RuntimeBackend,
) -> Result<&'static BackendRegistration, RegisterError> {
    if backend.name.is_empty() || backend.name.chars().any(char::is_whitespace) {
        return Err(RegisterError::InvalidName { name: backend.name });
    }
    let mut used = REGISTER.lock().unwrap_or_else(PoisonError::into_inner);
    if find_backend(&backend.name).is_some() {
        return Err(RegisterError::NameTaken { name: backend.name });
    }
    let k = *used;
    if k >= MAX_RUNTIME_BACKENDS {
        return Err(RegisterError::Full {
            limit: MAX_RUNTIME_BACKENDS,
        });
    }
    let name: &'static str = Box::leak(backend.name.clone().into_boxed_str());
    let summary: &'static str = Box::leak(backend.summary.clone().into_boxed_str());
    let has_world = backend.open_world.is_some();
    if SLOTS[k].set(Slot { backend }).is_err() {
        return Err(RegisterError::Full {
            limit: MAX_RUNTIME_BACKENDS,
        });
    }
    *used = k + 1;
    let (device_count, open, open_world) = SLOT_FNS[k];
    let registration: &'static BackendRegistration = Box::leak(Box::new(BackendRegistration {
        name,
        summary,
        device_count,
        open,
    }));
    if has_world {
        push_runtime_world(Box::leak(Box::new(WorldRegistration {
            backend: name,
            open_world,
        })));
    }
    push_runtime_backend(registration);
    Ok(registration)
}
