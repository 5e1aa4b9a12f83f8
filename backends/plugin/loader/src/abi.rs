//! The Rust mirror of `backends/plugin/include/memreuse_backend.h` (ABI 1.1).
//!
//! Field for field the header's structs, `#[repr(C)]`; the layout is asserted at compile
//! time against the same numbers the header checks with its negative-array typedefs, so
//! the two sides cannot drift apart silently. Plugins written in Rust (the mock plugin)
//! build their table from these types.

use std::ffi::{c_char, c_void};
use std::mem::{offset_of, size_of};

/// The ABI major this host speaks (the entry symbol `memreuse_backend_v1`).
pub const ABI_MAJOR: u32 = 1;
/// The newest ABI minor this host knows.
pub const ABI_MINOR: u32 = 1;

/// A status code (`MR_OK` or an `MR_ERR_*`).
pub type MrStatus = i32;
/// Success.
pub const MR_OK: MrStatus = 0;
/// An argument refused.
pub const MR_ERR_INVALID_ARGUMENT: MrStatus = 1;
/// The device cannot provide the bytes asked.
pub const MR_ERR_OUT_OF_MEMORY: MrStatus = 2;
/// An operation, element type or reduction not offered.
pub const MR_ERR_UNSUPPORTED: MrStatus = 3;
/// The vendor library or the device is missing (a skip).
pub const MR_ERR_UNAVAILABLE: MrStatus = 4;
/// A vendor call failed.
pub const MR_ERR_DEVICE: MrStatus = 5;
/// A peer never arrived, a stream hung.
pub const MR_ERR_TIMEOUT: MrStatus = 6;
/// The device is gone.
pub const MR_ERR_DEVICE_LOST: MrStatus = 7;
/// The communicator was aborted.
pub const MR_ERR_ABORTED: MrStatus = 8;
/// A bug in the plugin.
pub const MR_ERR_INTERNAL: MrStatus = 9;

/// An element type code (`MR_DTYPE_*`).
pub type MrDType = u32;
/// IEEE binary32.
pub const MR_DTYPE_F32: MrDType = 0;
/// IEEE binary16.
pub const MR_DTYPE_F16: MrDType = 1;
/// bfloat16.
pub const MR_DTYPE_BF16: MrDType = 2;
/// IEEE binary64.
pub const MR_DTYPE_F64: MrDType = 3;
/// Signed 8-bit integer.
pub const MR_DTYPE_I8: MrDType = 4;
/// Unsigned 8-bit integer.
pub const MR_DTYPE_U8: MrDType = 5;
/// Signed 32-bit integer.
pub const MR_DTYPE_I32: MrDType = 6;
/// Unsigned 32-bit integer.
pub const MR_DTYPE_U32: MrDType = 7;
/// Signed 64-bit integer.
pub const MR_DTYPE_I64: MrDType = 8;
/// Unsigned 64-bit integer.
pub const MR_DTYPE_U64: MrDType = 9;
/// OCP fp8 E4M3 (moved, not reduced).
pub const MR_DTYPE_F8E4M3: MrDType = 10;
/// OCP fp8 E5M2 (moved, not reduced).
pub const MR_DTYPE_F8E5M2: MrDType = 11;
/// Number of element type codes in ABI 1 (F32, F16, BF16, F64, I8, U8, I32, U32, I64,
/// U64, F8E4M3, F8E5M2).
pub const MR_DTYPE_COUNT: MrDType = 12;
/// A reduction code (`MR_OP_*`).
pub type MrReduceOp = u32;
/// Sum.
pub const MR_OP_SUM: MrReduceOp = 0;
/// Product.
pub const MR_OP_PROD: MrReduceOp = 1;
/// Maximum.
pub const MR_OP_MAX: MrReduceOp = 2;
/// Minimum.
pub const MR_OP_MIN: MrReduceOp = 3;
/// Average.
pub const MR_OP_AVG: MrReduceOp = 4;

/// `MrOpenOptions.flags`: `memory_capacity` is set.
pub const MR_OPEN_MEMORY_CAPACITY: u32 = 1;
/// `MrOpenOptions.flags`: `deterministic_seed` is set.
pub const MR_OPEN_DETERMINISTIC_SEED: u32 = 2;
/// `MrOpenOptions.flags`: switch a simulator's own race detector off.
pub const MR_OPEN_NO_NATIVE_RACE_DETECTION: u32 = 4;

/// `MrCapabilities.flags` bits.
pub const MR_CAP_DETERMINISTIC_SCHEDULING: u64 = 1;
/// Native race detection.
pub const MR_CAP_NATIVE_RACE_DETECTION: u64 = 2;
/// Honours `memory_capacity`.
pub const MR_CAP_MEMORY_CAPACITY: u64 = 4;
/// Exact delays.
pub const MR_CAP_EXACT_DELAYS: u64 = 8;
/// The `vm_*` entries work.
pub const MR_CAP_VIRTUAL_MEMORY: u64 = 16;
/// `group_start`/`group_end` batch send/recv.
pub const MR_CAP_GROUPING: u64 = 32;

/// Opaque device handle.
#[repr(C)]
pub struct MrDevice {
    _opaque: [u8; 0],
}
/// Opaque stream handle.
#[repr(C)]
pub struct MrStream {
    _opaque: [u8; 0],
}
/// Opaque event handle.
#[repr(C)]
pub struct MrEvent {
    _opaque: [u8; 0],
}
/// Opaque communicator handle.
#[repr(C)]
pub struct MrComm {
    _opaque: [u8; 0],
}

/// How to open one device.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrOpenOptions {
    /// `size_of::<MrOpenOptions>()`.
    pub struct_size: usize,
    /// Device index.
    pub device: u32,
    /// `MR_OPEN_*`.
    pub flags: u32,
    /// Capacity, when flagged.
    pub memory_capacity: u64,
    /// Seed, when flagged.
    pub deterministic_seed: u64,
}

/// How to open a world of ranks in this process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrWorldOptions {
    /// `size_of::<MrWorldOptions>()`.
    pub struct_size: usize,
    /// Per rank (`device` ignored).
    pub device: MrOpenOptions,
    /// Ranks.
    pub world_size: u32,
    /// Zero.
    pub reserved: u32,
    /// How long a collective waits for a missing peer.
    pub timeout_ms: u64,
}

/// Free and total device memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrMemoryInfo {
    /// Size of the host's struct.
    pub struct_size: usize,
    /// Free bytes.
    pub free_bytes: u64,
    /// Total bytes.
    pub total_bytes: u64,
}

/// What a device can honour.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrCapabilities {
    /// Size of the host's struct.
    pub struct_size: usize,
    /// `MR_CAP_*`.
    pub flags: u64,
    /// A power of two, at least 256.
    pub allocation_alignment: u64,
}

/// One side of a race.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrRaceAccess {
    /// Op name and label (plugin-owned).
    pub op: *const c_char,
    /// Its length.
    pub op_len: usize,
    /// The stream's id.
    pub stream: u64,
    /// 0 read, 1 write.
    pub kind: u32,
    /// Nonzero when `allocation` is set.
    pub has_allocation: u32,
    /// The annotated allocation id.
    pub allocation: u64,
}

impl Default for MrRaceAccess {
    fn default() -> Self {
        MrRaceAccess {
            op: std::ptr::null(),
            op_len: 0,
            stream: 0,
            kind: 0,
            has_allocation: 0,
            allocation: 0,
        }
    }
}

/// Two conflicting accesses not ordered by happens-before.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrRaceReport {
    /// Size of the host's struct.
    pub struct_size: usize,
    /// 0 schedule, 1 reuse.
    pub kind: u32,
    /// Zero.
    pub reserved: u32,
    /// First byte of the overlap.
    pub range_start: u64,
    /// One past the last byte.
    pub range_end: u64,
    /// The access enqueued first.
    pub earlier: MrRaceAccess,
    /// The access that found the conflict.
    pub later: MrRaceAccess,
}

/// Longest communicator unique id.
pub const MR_UNIQUE_ID_MAX: usize = 128;

type D = *mut MrDevice;
type S = *mut MrStream;
type E = *mut MrEvent;
type C = *mut MrComm;

/// The entry table (see the header for what each entry does and which are optional).
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)] // each entry is documented in memreuse_backend.h
pub struct MrBackendApi {
    pub struct_size: usize,
    pub abi_major: u32,
    pub abi_minor: u32,
    pub name: *const c_char,
    pub name_len: usize,
    pub summary: *const c_char,
    pub summary_len: usize,
    pub last_error: Option<unsafe extern "C" fn(len: *mut usize) -> *const c_char>,
    pub device_count: Option<unsafe extern "C" fn(count: *mut usize) -> MrStatus>,
    pub device_open: Option<unsafe extern "C" fn(*const MrOpenOptions, *mut D) -> MrStatus>,
    pub device_close: Option<unsafe extern "C" fn(D)>,
    pub memory_info: Option<unsafe extern "C" fn(D, *mut MrMemoryInfo) -> MrStatus>,
    pub capabilities: Option<unsafe extern "C" fn(D, *mut MrCapabilities) -> MrStatus>,
    pub malloc: Option<unsafe extern "C" fn(D, u64, *mut u64) -> MrStatus>,
    pub free: Option<unsafe extern "C" fn(D, u64) -> MrStatus>,
    pub default_stream: Option<unsafe extern "C" fn(D, *mut S) -> MrStatus>,
    pub stream_create: Option<unsafe extern "C" fn(D, *mut S) -> MrStatus>,
    pub stream_destroy: Option<unsafe extern "C" fn(D, S)>,
    pub stream_id: Option<unsafe extern "C" fn(D, *const MrStream) -> u64>,
    pub event_create: Option<unsafe extern "C" fn(D, *mut E) -> MrStatus>,
    pub event_destroy: Option<unsafe extern "C" fn(D, E)>,
    pub event_record: Option<unsafe extern "C" fn(D, E, S) -> MrStatus>,
    pub event_query: Option<unsafe extern "C" fn(D, E, *mut i32) -> MrStatus>,
    pub event_synchronize: Option<unsafe extern "C" fn(D, E) -> MrStatus>,
    pub stream_wait_event: Option<unsafe extern "C" fn(D, S, E) -> MrStatus>,
    pub stream_synchronize: Option<unsafe extern "C" fn(D, S) -> MrStatus>,
    pub device_synchronize: Option<unsafe extern "C" fn(D) -> MrStatus>,
    pub memset_zero: Option<unsafe extern "C" fn(D, u64, u64, S) -> MrStatus>,
    pub copy_host_to_device:
        Option<unsafe extern "C" fn(D, u64, *const c_void, usize, S) -> MrStatus>,
    pub copy_device_to_host:
        Option<unsafe extern "C" fn(D, *mut c_void, u64, usize, S) -> MrStatus>,
    pub copy_device_to_device: Option<unsafe extern "C" fn(D, u64, u64, u64, S) -> MrStatus>,
    pub delay: Option<unsafe extern "C" fn(D, u64, S) -> MrStatus>,
    pub device_async_error: Option<unsafe extern "C" fn(D) -> MrStatus>,
    pub vm_granularity: Option<unsafe extern "C" fn(D, *mut u64) -> MrStatus>,
    pub vm_reserve: Option<unsafe extern "C" fn(D, u64, *mut u64) -> MrStatus>,
    pub vm_release: Option<unsafe extern "C" fn(D, u64) -> MrStatus>,
    pub vm_create_physical: Option<unsafe extern "C" fn(D, u64, *mut u64) -> MrStatus>,
    pub vm_release_physical: Option<unsafe extern "C" fn(D, u64) -> MrStatus>,
    pub vm_map: Option<unsafe extern "C" fn(D, u64, u64) -> MrStatus>,
    pub vm_unmap: Option<unsafe extern "C" fn(D, u64, u64) -> MrStatus>,
    pub world_open: Option<unsafe extern "C" fn(*const MrWorldOptions, *mut D, *mut C) -> MrStatus>,
    pub comm_unique_id: Option<unsafe extern "C" fn(*mut u8, usize, *mut usize) -> MrStatus>,
    pub comm_init_rank:
        Option<unsafe extern "C" fn(D, *const u8, usize, u32, u32, u64, *mut C) -> MrStatus>,
    pub comm_rank_size: Option<unsafe extern "C" fn(C, *mut u32, *mut u32) -> MrStatus>,
    pub comm_new_group: Option<unsafe extern "C" fn(C, *const u32, usize, *mut C) -> MrStatus>,
    pub comm_destroy: Option<unsafe extern "C" fn(C)>,
    pub comm_abort: Option<unsafe extern "C" fn(C)>,
    pub comm_async_error: Option<unsafe extern "C" fn(C) -> MrStatus>,
    pub all_reduce: Option<unsafe extern "C" fn(C, u64, u64, MrDType, MrReduceOp, S) -> MrStatus>,
    pub all_gather: Option<unsafe extern "C" fn(C, u64, u64, u64, MrDType, S) -> MrStatus>,
    pub reduce_scatter:
        Option<unsafe extern "C" fn(C, u64, u64, u64, MrDType, MrReduceOp, S) -> MrStatus>,
    pub all_to_all: Option<unsafe extern "C" fn(C, u64, u64, u64, MrDType, S) -> MrStatus>,
    pub broadcast: Option<unsafe extern "C" fn(C, u64, u64, MrDType, u32, S) -> MrStatus>,
    pub send: Option<unsafe extern "C" fn(C, u64, u64, MrDType, u32, S) -> MrStatus>,
    pub recv: Option<unsafe extern "C" fn(C, u64, u64, MrDType, u32, S) -> MrStatus>,
    pub group_start: Option<unsafe extern "C" fn(C) -> MrStatus>,
    pub group_end: Option<unsafe extern "C" fn(C) -> MrStatus>,
    pub barrier: Option<unsafe extern "C" fn(C, S) -> MrStatus>,
    pub annotate_allocation: Option<unsafe extern "C" fn(D, u64, u64, u64)>,
    pub set_op_label: Option<unsafe extern "C" fn(D, *const c_char, usize)>,
    pub race_report_count: Option<unsafe extern "C" fn(D, *mut usize) -> MrStatus>,
    pub race_report_get: Option<unsafe extern "C" fn(D, usize, *mut MrRaceReport) -> MrStatus>,
    pub extensions: *const c_void,
}

/// `struct_size` of an ABI 1.0 table (`MR_API_SIZE_V1_0`: up to `barrier`).
pub const API_SIZE_V1_0: usize = offset_of!(MrBackendApi, barrier) + size_of::<usize>();
/// `struct_size` of an ABI 1.1 table (`MR_API_SIZE_V1_1`: up to `extensions`).
pub const API_SIZE_V1_1: usize = offset_of!(MrBackendApi, extensions) + size_of::<usize>();

// The header's MR_CHECKs, on this side of the boundary.
const _: () = assert!(offset_of!(MrBackendApi, struct_size) == 0);
const _: () = assert!(API_SIZE_V1_1 == size_of::<MrBackendApi>());
const _: () = assert!(API_SIZE_V1_0 == size_of::<usize>() * 57);
const _: () = assert!(API_SIZE_V1_1 == size_of::<usize>() * 62);
const _: () = assert!(size_of::<MrOpenOptions>() == size_of::<usize>() + 24);
const _: () = assert!(size_of::<MrWorldOptions>() == 2 * size_of::<usize>() + 40);
const _: () = assert!(size_of::<MrMemoryInfo>() == size_of::<usize>() + 16);
const _: () = assert!(size_of::<MrCapabilities>() == size_of::<usize>() + 16);
const _: () = assert!(size_of::<MrRaceAccess>() == 2 * size_of::<usize>() + 24);
const _: () =
    assert!(size_of::<MrRaceReport>() == size_of::<usize>() + 24 + 2 * size_of::<MrRaceAccess>());
