//! The NCCL face: versions, unique ids, communicator creation (`ncclCommInitRank`,
//! `ncclCommInitRankConfig` blocking and non-blocking, `ncclCommInitAll`, `ncclCommSplit`),
//! `ncclCommFinalize`, `ncclCommDestroy`, `ncclCommAbort`, `ncclCommGetAsyncError`,
//! `ncclGetErrorString`. The operations are in `nccl_ops.rs`.
//!
//! Rules: every rank of a communicator initialises with the same unique id, the same rank
//! count and a distinct rank in `0..nranks` (`ncclInvalidArgument` otherwise) on a distinct
//! device (`ncclInvalidUsage`, NCCL's "duplicate GPU"); a rank initialises on the device of
//! its current context (none: `ncclInvalidUsage`, the stand-in's choice where NCCL would
//! silently take device 0); ranks that never arrive make a blocking init fail after the
//! configured timeout with `ncclSystemError` (NCCL would wait forever). A non-blocking
//! communicator (`config->blocking == 0`) answers `ncclInProgress` and reports it from
//! `ncclCommGetAsyncError` until every rank joined; any other call on it meanwhile is
//! `ncclInvalidUsage`. A config must carry `NCCL_CONFIG_INITIALIZER`'s magic and a size no
//! smaller than the fields read (`ncclInvalidArgument`). A destroyed or aborted
//! communicator is an unknown handle (`ncclInvalidArgument`).

#![allow(non_snake_case, clippy::missing_safety_doc)]
#![cfg_attr(feature = "old-nccl", allow(dead_code))]

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use memreuse_core::Backend;
use memreuse_mock::{JointGroup, MockDevice, MockEvent, PairGroups};
use parking_lot::{Condvar, Mutex};

use crate::codes::{
    NCCL_IN_PROGRESS, NCCL_INTERNAL_ERROR, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE,
    NCCL_REMOTE_ERROR, NCCL_SYSTEM_ERROR,
};
use crate::state::{current, guard, next_handle_key, timeout};

/// `NCCL_VERSION_CODE` reported by `ncclGetVersion`.
pub const VERSION: c_int = if cfg!(feature = "old-nccl") {
    21_304
} else {
    22_805
};
/// `sizeof(ncclUniqueId)`.
pub const UNIQUE_ID_BYTES: usize = 128;
/// `NCCL_CONFIG_INITIALIZER`'s magic.
pub const CONFIG_MAGIC: u32 = 0xcafe_beef;
/// `NCCL_SPLIT_NOCOLOR`.
pub const SPLIT_NOCOLOR: c_int = -1;

/// `ncclUniqueId`: 128 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    internal: [u8; UNIQUE_ID_BYTES],
}

/// The leading fields of every `ncclConfig_t` version.
#[repr(C)]
pub struct ConfigHead {
    pub(crate) size: usize,
    pub(crate) magic: u32,
    pub(crate) version: u32,
    pub(crate) blocking: c_int,
}

const _: () = {
    use cudarc::nccl::sys;
    use std::mem::{offset_of, size_of};
    assert!(size_of::<sys::ncclUniqueId>() == size_of::<UniqueId>());
    assert!(offset_of!(ConfigHead, magic) == offset_of!(sys::ncclConfig_t, magic));
    assert!(offset_of!(ConfigHead, version) == offset_of!(sys::ncclConfig_t, version));
    assert!(offset_of!(ConfigHead, blocking) == offset_of!(sys::ncclConfig_t, blocking));
};

/// Per parent rank: its child communicator and rank there (`None`: no color).
type SplitResults = Vec<Option<(Arc<Shared>, usize)>>;

/// A split being formed: per parent rank, its (color, key); then the results.
pub(crate) struct Split {
    pub arrived: Vec<Option<(c_int, c_int)>>,
    pub results: Option<SplitResults>,
    pub taken: usize,
}

/// What the members of one communicator share.
pub(crate) struct Shared {
    pub devices: Vec<MockDevice>,
    pub collectives: JointGroup,
    pub pairs: PairGroups,
    /// Per collective number: the first arrival's signature (mismatch detection).
    pub signatures: Mutex<HashMap<u64, (String, usize)>>,
    /// When a mismatched collective was seen: reported as an async error once the
    /// communicator's timeout has passed since (NCCL itself would hang).
    pub mismatch: Mutex<Option<Instant>>,
    pub splits: Mutex<HashMap<u64, Split>>,
    pub splits_cv: Condvar,
}

/// Point-to-point with oneself waiting for its other half: (buffer, bytes, stream).
pub(crate) type SelfQueue =
    std::collections::VecDeque<(memreuse_core::DevicePtr, u64, crate::state::StreamH)>;

/// One rank's communicator handle.
pub(crate) struct Member {
    /// Set once every rank joined.
    pub shared: OnceLock<Arc<Shared>>,
    pub rank: usize,
    pub nranks: usize,
    pub device_index: usize,
    pub nonblocking: bool,
    /// A failed init (non-blocking), as a code.
    init_error: AtomicU32,
    /// Collectives issued by this rank (their numbers in the group).
    pub issued: AtomicU64,
    pub splits_issued: AtomicU64,
    /// End events of this rank's submitted work, to report failures asynchronously.
    pub pending: Mutex<Vec<(MockDevice, MockEvent)>>,
    /// Sends to self (.0: receives waiting for one, .1: sends waiting for a receive).
    #[allow(clippy::type_complexity)]
    pub self_p2p: Mutex<(SelfQueue, SelfQueue)>,
    /// The first failure seen (sticky), as a code.
    async_error: AtomicU32,
    pub finalized: AtomicBool,
    /// A non-blocking finalize reports `ncclInProgress` once more.
    settling: AtomicBool,
}

impl Member {
    pub(crate) fn new(
        rank: usize,
        nranks: usize,
        device_index: usize,
        nonblocking: bool,
    ) -> Member {
        Member {
            shared: OnceLock::new(),
            rank,
            nranks,
            device_index,
            nonblocking,
            init_error: AtomicU32::new(0),
            issued: AtomicU64::new(0),
            splits_issued: AtomicU64::new(0),
            pending: Mutex::new(Vec::new()),
            self_p2p: Mutex::new((SelfQueue::new(), SelfQueue::new())),
            async_error: AtomicU32::new(0),
            finalized: AtomicBool::new(false),
            settling: AtomicBool::new(false),
        }
    }

    /// The shared part of an initialised communicator (`ncclInvalidUsage` while in progress).
    pub fn ready(&self) -> Result<&Arc<Shared>, u32> {
        self.shared.get().ok_or(NCCL_INVALID_USAGE)
    }
}

pub(crate) fn new_shared(devices: Vec<MockDevice>) -> Result<Arc<Shared>, u32> {
    let collectives = JointGroup::new(&devices).map_err(|_| NCCL_INTERNAL_ERROR)?;
    let pairs = PairGroups::new(&devices);
    Ok(Arc::new(Shared {
        devices,
        collectives,
        pairs,
        signatures: Mutex::new(HashMap::new()),
        mismatch: Mutex::new(None),
        splits: Mutex::new(HashMap::new()),
        splits_cv: Condvar::new(),
    }))
}

/// Communicator handles: opaque keys from the same sequence as the driver's handles.
static COMMS: Mutex<Option<HashMap<usize, Arc<Member>>>> = Mutex::new(None);

pub(crate) fn insert_comm(m: Arc<Member>) -> usize {
    let key = next_handle_key();
    COMMS.lock().get_or_insert_with(HashMap::new).insert(key, m);
    key
}

fn remove_comm(key: usize) {
    if let Some(m) = COMMS.lock().as_mut() {
        m.remove(&key);
    }
}

/// Forgets every communicator (a fresh cluster was configured).
pub(crate) fn reset() {
    *COMMS.lock() = None;
}

/// The member behind a handle (`ncclInvalidArgument` for null or unknown).
pub(crate) fn member(comm: usize) -> Result<Arc<Member>, u32> {
    COMMS
        .lock()
        .as_ref()
        .and_then(|m| m.get(&comm).cloned())
        .ok_or(NCCL_INVALID_ARGUMENT)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> u32 {
    guard("ncclGetVersion", NCCL_INTERNAL_ERROR, || {
        // SAFETY: null or valid for a write (contract); null is refused.
        unsafe { crate::state::write_out(version, VERSION, NCCL_INVALID_ARGUMENT) }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclGetErrorString(result: u32) -> *const c_char {
    crate::codes::nccl_text(result).as_ptr()
}

static ID_SEQ: AtomicU64 = AtomicU64::new(1);

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclGetUniqueId(id: *mut UniqueId) -> u32 {
    guard("ncclGetUniqueId", NCCL_INTERNAL_ERROR, || {
        let mut bytes = [0u8; UNIQUE_ID_BYTES];
        let tag = format!(
            "memreuse-cuda-standin id {} pid {} t {:?}",
            ID_SEQ.fetch_add(1, Ordering::Relaxed),
            std::process::id(),
            std::time::SystemTime::now()
        );
        let n = tag.len().min(UNIQUE_ID_BYTES);
        bytes[..n].copy_from_slice(&tag.as_bytes()[..n]);
        // SAFETY: null or valid for a write of 128 bytes (contract); null is refused.
        unsafe { crate::state::write_out(id, UniqueId { internal: bytes }, NCCL_INVALID_ARGUMENT) }
    })
}

/// A communicator being formed.
struct Pending {
    n: usize,
    arrived: Vec<Option<(usize, MockDevice)>>,
    shared: Option<Arc<Shared>>,
    taken: usize,
}

static RENDEZVOUS: Mutex<Option<HashMap<Vec<u8>, Pending>>> = Mutex::new(None);
static RENDEZVOUS_CV: Condvar = Condvar::new();

/// Joins the communicator of `key` as `rank` of `n`; returns the shared part once every
/// rank arrived, `ncclSystemError` after the timeout.
fn rendezvous(
    key: &[u8],
    n: usize,
    rank: usize,
    index: usize,
    device: MockDevice,
) -> Result<Arc<Shared>, u32> {
    let deadline = Instant::now() + timeout();
    let mut table = RENDEZVOUS.lock();
    let map = table.get_or_insert_with(HashMap::new);
    let p = map.entry(key.to_vec()).or_insert_with(|| Pending {
        n,
        arrived: vec![None; n],
        shared: None,
        taken: 0,
    });
    if p.n != n || p.arrived[rank].is_some() {
        return Err(NCCL_INVALID_ARGUMENT);
    }
    if p.arrived.iter().flatten().any(|(i, _)| *i == index) {
        return Err(NCCL_INVALID_USAGE);
    }
    p.arrived[rank] = Some((index, device));
    if p.arrived.iter().all(Option::is_some) {
        let devices = p.arrived.iter().flatten().map(|(_, d)| d.clone()).collect();
        p.shared = Some(new_shared(devices)?);
        RENDEZVOUS_CV.notify_all();
    }
    loop {
        let map = table.get_or_insert_with(HashMap::new);
        let p = map.get_mut(key).ok_or(NCCL_INTERNAL_ERROR)?;
        if let Some(shared) = p.shared.clone() {
            p.taken += 1;
            if p.taken == p.n {
                map.remove(key);
            }
            return Ok(shared);
        }
        if RENDEZVOUS_CV.wait_until(&mut table, deadline).timed_out() {
            if let Some(p) = table.as_mut().and_then(|m| m.get_mut(key)) {
                p.arrived[rank] = None;
            }
            return Err(NCCL_SYSTEM_ERROR);
        }
    }
}

/// `ncclCommInitRank` and `ncclCommInitRankConfig`.
///
/// # Safety
/// `comm` is null or valid for a write; `config` null or a valid `ncclConfig_t`.
unsafe fn init_rank(
    comm: *mut usize,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    config: *const ConfigHead,
) -> Result<(), u32> {
    if comm.is_null() {
        return Err(NCCL_INVALID_ARGUMENT);
    }
    let n = usize::try_from(nranks).ok().filter(|&n| n > 0);
    let r = usize::try_from(rank).ok();
    let (Some(n), Some(r)) = (n, r) else {
        return Err(NCCL_INVALID_ARGUMENT);
    };
    if r >= n {
        return Err(NCCL_INVALID_ARGUMENT);
    }
    let nonblocking = if config.is_null() {
        false
    } else {
        // SAFETY: not null (checked), valid for reads (contract).
        let c = unsafe { &*config };
        if c.magic != CONFIG_MAGIC || c.size < std::mem::size_of::<ConfigHead>() {
            return Err(NCCL_INVALID_ARGUMENT);
        }
        c.blocking == 0
    };
    let (_, index, device) = current().map_err(|_| NCCL_INVALID_USAGE)?;
    let member = Arc::new(Member::new(r, n, index, nonblocking));
    if nonblocking {
        let handle = insert_comm(Arc::clone(&member));
        std::thread::spawn(
            move || match rendezvous(&id.internal, n, r, index, device) {
                Ok(shared) => {
                    let _ = member.shared.set(shared);
                }
                Err(code) => member.init_error.store(code, Ordering::Release),
            },
        );
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { comm.write(handle) };
        return Err(NCCL_IN_PROGRESS);
    }
    let shared = rendezvous(&id.internal, n, r, index, device)?;
    let _ = member.shared.set(shared);
    let handle = insert_comm(member);
    // SAFETY: not null (checked), valid for a write (contract).
    unsafe { comm.write(handle) };
    Ok(())
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclCommInitRank(
    comm: *mut usize,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
) -> u32 {
    // SAFETY: per this function's contract.
    guard("ncclCommInitRank", NCCL_INTERNAL_ERROR, || unsafe {
        init_rank(comm, nranks, id, rank, std::ptr::null())
    })
}

/// Not exported by the `old-nccl` profile (NCCL < 2.14).
#[cfg_attr(not(feature = "old-nccl"), unsafe(no_mangle))]
unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut usize,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    config: *const ConfigHead,
) -> u32 {
    // SAFETY: per this function's contract.
    guard("ncclCommInitRankConfig", NCCL_INTERNAL_ERROR, || unsafe {
        init_rank(comm, nranks, id, rank, config)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclCommInitAll(comms: *mut usize, ndev: c_int, devlist: *const c_int) -> u32 {
    guard("ncclCommInitAll", NCCL_INTERNAL_ERROR, || {
        let n = usize::try_from(ndev)
            .ok()
            .filter(|&n| n > 0)
            .ok_or(NCCL_INVALID_ARGUMENT)?;
        if comms.is_null() {
            return Err(NCCL_INVALID_ARGUMENT);
        }
        let indices: Vec<usize> = if devlist.is_null() {
            (0..n).collect()
        } else {
            // SAFETY: `devlist` holds `ndev` ints (contract), not null (checked).
            let list = unsafe { std::slice::from_raw_parts(devlist, n) };
            list.iter()
                .map(|&d| usize::try_from(d).map_err(|_| NCCL_INVALID_ARGUMENT))
                .collect::<Result<_, _>>()?
        };
        let mut devices = Vec::with_capacity(n);
        for (k, &i) in indices.iter().enumerate() {
            if indices[..k].contains(&i) {
                return Err(NCCL_INVALID_USAGE);
            }
            devices.push(crate::state::device_at(i).ok_or(NCCL_INVALID_ARGUMENT)?);
        }
        let shared = new_shared(devices)?;
        for (rank, &index) in indices.iter().enumerate() {
            let m = Member::new(rank, n, index, false);
            let _ = m.shared.set(Arc::clone(&shared));
            let handle = insert_comm(Arc::new(m));
            // SAFETY: `comms` has room for `ndev` handles (contract), not null (checked).
            unsafe { comms.add(rank).write(handle) };
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclCommFinalize(comm: usize) -> u32 {
    guard("ncclCommFinalize", NCCL_INTERNAL_ERROR, || {
        let m = member(comm)?;
        m.ready()?;
        if m.finalized.swap(true, Ordering::AcqRel) {
            return Err(NCCL_INVALID_USAGE);
        }
        if m.nonblocking {
            // Flushing: ncclInProgress until ncclCommGetAsyncError says otherwise.
            m.settling.store(true, Ordering::Release);
            return Err(NCCL_IN_PROGRESS);
        }
        Ok(())
    })
}

/// Aborts what this rank's communicator still has queued, on every member involved.
fn abort_member(m: &Member, reason: &str) {
    let Some(shared) = m.shared.get() else {
        return;
    };
    shared.collectives.abort(reason);
    for peer in (0..shared.devices.len()).filter(|&p| p != m.rank) {
        for (sender, receiver) in [(m.rank, peer), (peer, m.rank)] {
            if let Ok(g) = shared.pairs.get(sender, receiver) {
                g.abort(reason);
            }
        }
    }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclCommDestroy(comm: usize) -> u32 {
    guard("ncclCommDestroy", NCCL_INTERNAL_ERROR, || {
        let m = member(comm)?;
        m.ready()?;
        // Queued work completes (the mock keeps it); the handle is gone at once.
        remove_comm(comm);
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclCommAbort(comm: usize) -> u32 {
    guard("ncclCommAbort", NCCL_INTERNAL_ERROR, || {
        let m = member(comm)?;
        abort_member(&m, &format!("ncclCommAbort by rank {}", m.rank));
        remove_comm(comm);
        Ok(())
    })
}

/// Harness: `comm`'s asynchronous state becomes `code` (sticky, as a real communicator's
/// first error is), an error NCCL hits on its own such as a peer's failure; `comm` 0: every
/// live communicator (a test of a backend that keeps its handles private).
pub(crate) fn set_async_error(comm: usize, code: u32) -> Result<(), u32> {
    if comm == 0 {
        for m in COMMS.lock().iter().flat_map(HashMap::values) {
            m.async_error.store(code, Ordering::Release);
        }
        return Ok(());
    }
    member(comm)?.async_error.store(code, Ordering::Release);
    Ok(())
}

/// The code a failed piece of work gives `ncclCommGetAsyncError`.
fn async_code(e: &memreuse_core::BackendError) -> u32 {
    match e {
        memreuse_core::BackendError::InvalidArgument { .. } => NCCL_INVALID_USAGE,
        _ => NCCL_REMOTE_ERROR,
    }
}

/// This rank's asynchronous state: `ncclSuccess`, `ncclInProgress` or the first error.
fn async_state(m: &Member) -> u32 {
    let sticky = m.async_error.load(Ordering::Acquire);
    if sticky != 0 {
        return sticky;
    }
    let init = m.init_error.load(Ordering::Acquire);
    if init != 0 {
        return init;
    }
    let Some(shared) = m.shared.get() else {
        return NCCL_IN_PROGRESS;
    };
    if m.settling.swap(false, Ordering::AcqRel) {
        return NCCL_IN_PROGRESS;
    }
    if shared
        .mismatch
        .lock()
        .is_some_and(|seen| seen.elapsed() >= timeout())
    {
        m.async_error.store(NCCL_INVALID_USAGE, Ordering::Release);
        return NCCL_INVALID_USAGE;
    }
    let mut pending = m.pending.lock();
    let mut failed = 0;
    pending.retain(|(d, e)| match d.query_event(e) {
        Ok(true) => false,
        Ok(false) => true,
        Err(err) => {
            if failed == 0 {
                failed = async_code(&err);
            }
            false
        }
    });
    if failed != 0 {
        m.async_error.store(failed, Ordering::Release);
    }
    failed
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ncclCommGetAsyncError(comm: usize, async_error: *mut u32) -> u32 {
    guard("ncclCommGetAsyncError", NCCL_INTERNAL_ERROR, || {
        let m = member(comm)?;
        let state = async_state(&m);
        // SAFETY: null or valid for a write (contract); null is refused.
        unsafe { crate::state::write_out(async_error, state, NCCL_INVALID_ARGUMENT) }
    })
}
