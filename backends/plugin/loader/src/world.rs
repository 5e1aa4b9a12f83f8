//! Opening every rank of a plugin world inside this process: through `world_open`, or,
//! for plugins that only offer the multi-process entries, through `comm_unique_id` and
//! one `comm_init_rank` per rank (each on its own thread: it blocks until all joined).

use std::mem::size_of;
use std::sync::Arc;
use std::time::Duration;

use memreuse_core::comm::ErasedCommunicator;
use memreuse_core::{AnyBackend, BackendError, BackendOptions, RankEndpoint, WorldOptions};

use crate::abi::{MR_UNIQUE_ID_MAX, MrComm, MrDevice, MrWorldOptions};
use crate::comm::PluginComm;
use crate::device::{PluginDevice, mr_open_options};
use crate::library::Plugin;

/// One rank: its device and its member of the world communicator.
pub type PluginRank = (PluginDevice, PluginComm);

/// Opens `world_size` ranks of `plugin`, one device each, whose communication ops give up
/// on a missing peer after `timeout`.
pub fn open_plugin_world(
    plugin: &Arc<Plugin>,
    world_size: usize,
    backend: &BackendOptions,
    timeout: Duration,
) -> Result<Vec<PluginRank>, BackendError> {
    if world_size == 0 {
        return Err(BackendError::invalid_argument(
            plugin.name.clone(),
            "world_open",
            "a world needs at least one rank",
        ));
    }
    if plugin.api.world_open.is_some() {
        by_world_open(plugin, world_size, backend, timeout)
    } else if plugin.api.comm_init_rank.is_some() {
        by_init_rank(plugin, world_size, backend, timeout)
    } else {
        Err(BackendError::Unavailable {
            backend: plugin.name.clone(),
            reason: format!(
                "plugin {} offers no communicator (world_open and comm_init_rank are NULL)",
                plugin.path.display()
            ),
        })
    }
}

fn by_world_open(
    plugin: &Arc<Plugin>,
    n: usize,
    backend: &BackendOptions,
    timeout: Duration,
) -> Result<Vec<PluginRank>, BackendError> {
    let Some(open) = plugin.api.world_open else {
        return Err(plugin.absent("world_open"));
    };
    let options = MrWorldOptions {
        struct_size: size_of::<MrWorldOptions>(),
        device: mr_open_options(backend),
        world_size: n as u32,
        reserved: 0,
        timeout_ms: timeout.as_millis() as u64,
    };
    let mut devices: Vec<*mut MrDevice> = vec![std::ptr::null_mut(); n];
    let mut comms: Vec<*mut MrComm> = vec![std::ptr::null_mut(); n];
    // SAFETY: the options struct and two arrays of `world_size` out-slots.
    let status = unsafe { open(&raw const options, devices.as_mut_ptr(), comms.as_mut_ptr()) };
    plugin.check(status, "world_open")?;
    // Take ownership of everything returned before checking, so a partial answer is
    // released (communicators first, then their devices) instead of leaked.
    let mut ranks = Vec::with_capacity(n);
    let mut failure = None;
    for (r, (&d, &c)) in devices.iter().zip(&comms).enumerate() {
        if d.is_null() {
            if !c.is_null()
                && let Some(destroy) = plugin.api.comm_destroy
            {
                // SAFETY: a communicator the plugin returned, released once.
                unsafe { destroy(c) };
            }
            failure.get_or_insert_with(|| plugin.null_handle("world_open"));
            continue;
        }
        match PluginDevice::from_raw(plugin, d, r) {
            Ok(dev) if c.is_null() => {
                drop(dev);
                failure.get_or_insert_with(|| plugin.null_handle("world_open"));
            }
            Ok(dev) => match PluginComm::from_raw(dev.clone(), c) {
                Ok(comm) => ranks.push((dev, comm)),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            },
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(ranks),
    }
}

fn by_init_rank(
    plugin: &Arc<Plugin>,
    n: usize,
    backend: &BackendOptions,
    timeout: Duration,
) -> Result<Vec<PluginRank>, BackendError> {
    let (Some(unique_id), Some(init)) = (plugin.api.comm_unique_id, plugin.api.comm_init_rank)
    else {
        return Err(plugin.absent("comm_unique_id"));
    };
    let mut id = [0u8; MR_UNIQUE_ID_MAX];
    let mut len = 0usize;
    // SAFETY: a buffer of MR_UNIQUE_ID_MAX bytes and a length out-pointer.
    let status = unsafe { unique_id(id.as_mut_ptr(), id.len(), &raw mut len) };
    plugin.check(status, "comm_unique_id")?;
    if len == 0 || len > MR_UNIQUE_ID_MAX {
        return Err(plugin.null_handle("comm_unique_id"));
    }
    let devices = (0..n)
        .map(|r| {
            PluginDevice::open(
                plugin,
                &BackendOptions {
                    device: r,
                    ..backend.clone()
                },
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let timeout_ms = timeout.as_millis() as u64;
    let joined: Vec<Result<PluginComm, BackendError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(r, dev)| {
                let id = &id[..len];
                scope.spawn(move || {
                    let mut c: *mut MrComm = std::ptr::null_mut();
                    // SAFETY: a live device, the id bytes, an out-pointer.
                    let status = unsafe {
                        init(
                            dev.inner.raw,
                            id.as_ptr(),
                            id.len(),
                            n as u32,
                            r as u32,
                            timeout_ms,
                            &raw mut c,
                        )
                    };
                    plugin.check(status, "comm_init_rank")?;
                    if c.is_null() {
                        return Err(plugin.null_handle("comm_init_rank"));
                    }
                    PluginComm::from_raw(dev.clone(), c)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(BackendError::invalid_argument(
                        plugin.name.clone(),
                        "comm_init_rank",
                        "the joining thread panicked",
                    ))
                })
            })
            .collect()
    });
    let comms = joined.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(devices.into_iter().zip(comms).collect())
}

/// The erased endpoints the runner's world registration returns.
pub(crate) fn open_endpoints(
    plugin: &Arc<Plugin>,
    options: &WorldOptions,
) -> Result<Vec<RankEndpoint>, BackendError> {
    Ok(open_plugin_world(
        plugin,
        options.world_size,
        &options.backend,
        options.timeout,
    )?
    .into_iter()
    .enumerate()
    .map(|(rank, (device, comm))| RankEndpoint {
        rank,
        backend: AnyBackend::new(device),
        communicator: Box::new(ErasedCommunicator::<PluginDevice>::new(Box::new(comm))),
    })
    .collect())
}
