//! The device entries: each forwards to [`MockDevice`]'s `Backend` method.
//!
//! Handles are boxes: an `MrDevice` is a [`Dev`], an `MrStream` a `MockStream`, an
//! `MrEvent` a `MockEvent`; the host passes back only handles this plugin returned and
//! releases each once (header rules), which is what every `SAFETY` below relies on.

use std::ffi::{c_char, c_void};

use memreuse_core::{AllocationId, Backend, DevicePtr, PhysicalHandle, RaceKind, RaceReport};
use memreuse_mock::{DEFAULT_CAPACITY, MockConfig, MockDevice, MockEvent, MockStream};
use memreuse_plugin::abi::{
    MR_CAP_DETERMINISTIC_SCHEDULING, MR_CAP_EXACT_DELAYS, MR_CAP_GROUPING, MR_CAP_MEMORY_CAPACITY,
    MR_CAP_NATIVE_RACE_DETECTION, MR_CAP_VIRTUAL_MEMORY, MR_ERR_INVALID_ARGUMENT, MR_OK,
    MR_OPEN_DETERMINISTIC_SEED, MR_OPEN_MEMORY_CAPACITY, MR_OPEN_NO_NATIVE_RACE_DETECTION,
    MrCapabilities, MrDevice, MrEvent, MrMemoryInfo, MrOpenOptions, MrRaceAccess, MrRaceReport,
    MrStatus, MrStream,
};
use parking_lot::Mutex;

use crate::status::{backend_status, done, fail, guard, null_argument};

/// Simulated devices exist in any number (as the mock's own registration says).
const MOCK_DEVICE_COUNT: usize = 1024;

/// One open mock device and what the plugin keeps for it.
pub(crate) struct Dev {
    pub(crate) device: MockDevice,
    default: Box<MockStream>,
    /// The race reports of the last `race_report_count`, whose strings `race_report_get`
    /// lends to the host.
    races: Mutex<Vec<RaceReport>>,
}

impl Dev {
    pub(crate) fn new(device: MockDevice) -> Dev {
        let default = Box::new(device.default_stream());
        Dev {
            device,
            default,
            races: Mutex::new(Vec::new()),
        }
    }
}

/// The mock configuration the host's open options ask for (as the mock's registry does).
pub(crate) fn config(o: &MrOpenOptions) -> MockConfig {
    MockConfig {
        capacity: if o.flags & MR_OPEN_MEMORY_CAPACITY != 0 {
            o.memory_capacity
        } else {
            DEFAULT_CAPACITY
        },
        deterministic_seed: (o.flags & MR_OPEN_DETERMINISTIC_SEED != 0)
            .then_some(o.deterministic_seed),
        first_device_index: o.device as usize,
        race_detection: o.flags & MR_OPEN_NO_NATIVE_RACE_DETECTION == 0,
        ..MockConfig::default()
    }
}

/// # Safety
/// `d` is NULL or a device handle of this plugin, live for `'a`.
pub(crate) unsafe fn dev<'a>(d: *mut MrDevice) -> Option<&'a Dev> {
    // SAFETY: per the contract above.
    unsafe { d.cast::<Dev>().as_ref() }
}

/// # Safety
/// `s` is NULL or a stream handle of this plugin, live for `'a`.
pub(crate) unsafe fn stream<'a>(s: *mut MrStream) -> Option<&'a MockStream> {
    // SAFETY: per the contract above.
    unsafe { s.cast::<MockStream>().as_ref() }
}

/// # Safety
/// `e` is NULL or an event handle of this plugin, live for `'a`.
unsafe fn event<'a>(e: *mut MrEvent) -> Option<&'a MockEvent> {
    // SAFETY: per the contract above.
    unsafe { e.cast::<MockEvent>().as_ref() }
}

/// Fills a struct the host handed out, writing only the fields its `struct_size` says it
/// has (header rule), and leaving `struct_size` as the host set it.
macro_rules! fill {
    ($call:literal, $ptr:expr, $value:expr) => {{
        let ptr = $ptr;
        if ptr.is_null() {
            return null_argument($call);
        }
        let value = $value;
        let head = size_of::<usize>();
        // SAFETY: a non-NULL struct of the host beginning with its `size_t struct_size`.
        let host = unsafe { ptr.cast::<usize>().read() };
        let n = host.min(size_of_val(&value)).saturating_sub(head);
        // SAFETY: we copy only bytes after struct_size that lie inside both structs.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&raw const value).cast::<u8>().add(head),
                ptr.cast::<u8>().add(head),
                n,
            );
        }
        MR_OK
    }};
}

/// Runs `body` on the device (and stream) the host passed, with a NULL refused.
macro_rules! on_dev {
    ($call:literal, $d:expr, |$dev:ident| $body:expr) => {
        guard($call, || {
            // SAFETY: the host passes device handles this plugin returned (header rule).
            let Some($dev) = (unsafe { dev($d) }) else {
                return null_argument($call);
            };
            $body
        })
    };
    ($call:literal, $d:expr, $s:expr, |$dev:ident, $st:ident| $body:expr) => {
        guard($call, || {
            // SAFETY: the host passes device and stream handles this plugin returned.
            let (Some($dev), Some($st)) = (unsafe { dev($d) }, unsafe { stream($s) }) else {
                return null_argument($call);
            };
            $body
        })
    };
}

/// Writes `value` through an out-pointer the host passed (NULL refused).
macro_rules! out {
    ($call:literal, $ptr:expr, $value:expr) => {{
        if $ptr.is_null() {
            return null_argument($call);
        }
        // SAFETY: a non-NULL out-pointer of the host, valid for the call.
        unsafe { $ptr.write($value) };
        MR_OK
    }};
}

pub(crate) unsafe extern "C" fn device_count(count: *mut usize) -> MrStatus {
    guard("device_count", || {
        out!("device_count", count, MOCK_DEVICE_COUNT)
    })
}

pub(crate) unsafe extern "C" fn device_open(
    o: *const MrOpenOptions,
    d: *mut *mut MrDevice,
) -> MrStatus {
    guard("device_open", || {
        // SAFETY: the host passes its options struct (or NULL, refused).
        let Some(o) = (unsafe { o.as_ref() }) else {
            return null_argument("device_open");
        };
        if o.struct_size < size_of::<MrOpenOptions>() {
            return fail(
                MR_ERR_INVALID_ARGUMENT,
                format!("device_open: options of {} bytes", o.struct_size),
            );
        }
        match MockDevice::new(config(o)) {
            Ok(device) => out!(
                "device_open",
                d,
                Box::into_raw(Box::new(Dev::new(device))).cast()
            ),
            Err(e) => backend_status(&e),
        }
    })
}

pub(crate) unsafe extern "C" fn device_close(d: *mut MrDevice) {
    let _ = guard("device_close", || {
        if !d.is_null() {
            // SAFETY: the host closes each device it opened once, after its streams,
            // events and communicators (header rule).
            drop(unsafe { Box::from_raw(d.cast::<Dev>()) });
        }
        MR_OK
    });
}

pub(crate) unsafe extern "C" fn memory_info(d: *mut MrDevice, info: *mut MrMemoryInfo) -> MrStatus {
    on_dev!("memory_info", d, |dev| match dev.device.memory_info() {
        Ok(m) => fill!(
            "memory_info",
            info,
            MrMemoryInfo {
                struct_size: size_of::<MrMemoryInfo>(),
                free_bytes: m.free,
                total_bytes: m.total,
            }
        ),
        Err(e) => backend_status(&e),
    })
}

pub(crate) unsafe extern "C" fn capabilities(
    d: *mut MrDevice,
    caps: *mut MrCapabilities,
) -> MrStatus {
    on_dev!("capabilities", d, |dev| {
        let c = dev.device.capabilities();
        let mut flags = MR_CAP_GROUPING;
        for (on, bit) in [
            (c.deterministic_scheduling, MR_CAP_DETERMINISTIC_SCHEDULING),
            (c.native_race_detection, MR_CAP_NATIVE_RACE_DETECTION),
            (c.memory_capacity, MR_CAP_MEMORY_CAPACITY),
            (c.exact_delays, MR_CAP_EXACT_DELAYS),
            (c.virtual_memory, MR_CAP_VIRTUAL_MEMORY),
        ] {
            if on {
                flags |= bit;
            }
        }
        fill!(
            "capabilities",
            caps,
            MrCapabilities {
                struct_size: size_of::<MrCapabilities>(),
                flags,
                allocation_alignment: c.allocation_alignment,
            }
        )
    })
}

pub(crate) unsafe extern "C" fn malloc(d: *mut MrDevice, bytes: u64, ptr: *mut u64) -> MrStatus {
    on_dev!("malloc", d, |dev| match dev.device.malloc(bytes) {
        Ok(p) => out!("malloc", ptr, p.0),
        Err(e) => backend_status(&e),
    })
}

pub(crate) unsafe extern "C" fn free(d: *mut MrDevice, ptr: u64) -> MrStatus {
    on_dev!("free", d, |dev| done(dev.device.free(DevicePtr(ptr))))
}

pub(crate) unsafe extern "C" fn default_stream(
    d: *mut MrDevice,
    s: *mut *mut MrStream,
) -> MrStatus {
    on_dev!("default_stream", d, |dev| {
        let raw: *const MockStream = &raw const *dev.default;
        out!("default_stream", s, raw.cast_mut().cast())
    })
}

pub(crate) unsafe extern "C" fn stream_create(d: *mut MrDevice, s: *mut *mut MrStream) -> MrStatus {
    on_dev!("stream_create", d, |dev| match dev.device.create_stream() {
        Ok(stream) => out!("stream_create", s, Box::into_raw(Box::new(stream)).cast()),
        Err(e) => backend_status(&e),
    })
}

pub(crate) unsafe extern "C" fn stream_destroy(d: *mut MrDevice, s: *mut MrStream) {
    let _ = on_dev!("stream_destroy", d, |dev| {
        if !s.is_null()
            && !std::ptr::eq(s.cast_const().cast::<MockStream>(), &raw const *dev.default)
        {
            // SAFETY: a stream from stream_create, destroyed once (header rule).
            drop(unsafe { Box::from_raw(s.cast::<MockStream>()) });
        }
        MR_OK
    });
}

pub(crate) unsafe extern "C" fn stream_id(d: *mut MrDevice, s: *const MrStream) -> u64 {
    let mut id = 0;
    let _ = on_dev!("stream_id", d, s.cast_mut(), |dev, st| {
        id = dev.device.stream_id(st).0;
        MR_OK
    });
    id
}

pub(crate) unsafe extern "C" fn event_create(d: *mut MrDevice, e: *mut *mut MrEvent) -> MrStatus {
    on_dev!("event_create", d, |dev| match dev.device.create_event() {
        Ok(ev) => out!("event_create", e, Box::into_raw(Box::new(ev)).cast()),
        Err(err) => backend_status(&err),
    })
}

pub(crate) unsafe extern "C" fn event_destroy(_d: *mut MrDevice, e: *mut MrEvent) {
    let _ = guard("event_destroy", || {
        if !e.is_null() {
            // SAFETY: an event from event_create, destroyed once (header rule).
            drop(unsafe { Box::from_raw(e.cast::<MockEvent>()) });
        }
        MR_OK
    });
}

/// Runs `body` on the device and the event (NULL refused).
macro_rules! on_event {
    ($call:literal, $d:expr, $e:expr, |$dev:ident, $ev:ident| $body:expr) => {
        on_dev!($call, $d, |$dev| {
            // SAFETY: the host passes event handles this plugin returned.
            let Some($ev) = (unsafe { event($e) }) else {
                return null_argument($call);
            };
            $body
        })
    };
}

pub(crate) unsafe extern "C" fn event_record(
    d: *mut MrDevice,
    e: *mut MrEvent,
    s: *mut MrStream,
) -> MrStatus {
    on_event!("event_record", d, e, |dev, ev| {
        // SAFETY: a stream handle of this plugin.
        let Some(st) = (unsafe { stream(s) }) else {
            return null_argument("event_record");
        };
        done(dev.device.record_event(ev, st))
    })
}

pub(crate) unsafe extern "C" fn event_query(
    d: *mut MrDevice,
    e: *mut MrEvent,
    complete: *mut i32,
) -> MrStatus {
    on_event!(
        "event_query",
        d,
        e,
        |dev, ev| match dev.device.query_event(ev) {
            Ok(c) => out!("event_query", complete, i32::from(c)),
            Err(err) => backend_status(&err),
        }
    )
}

pub(crate) unsafe extern "C" fn event_synchronize(d: *mut MrDevice, e: *mut MrEvent) -> MrStatus {
    on_event!("event_synchronize", d, e, |dev, ev| done(
        dev.device.synchronize_event(ev)
    ))
}

pub(crate) unsafe extern "C" fn stream_wait_event(
    d: *mut MrDevice,
    s: *mut MrStream,
    e: *mut MrEvent,
) -> MrStatus {
    on_event!("stream_wait_event", d, e, |dev, ev| {
        // SAFETY: a stream handle of this plugin.
        let Some(st) = (unsafe { stream(s) }) else {
            return null_argument("stream_wait_event");
        };
        done(dev.device.stream_wait_event(st, ev))
    })
}

pub(crate) unsafe extern "C" fn stream_synchronize(d: *mut MrDevice, s: *mut MrStream) -> MrStatus {
    on_dev!("stream_synchronize", d, s, |dev, st| done(
        dev.device.synchronize_stream(st)
    ))
}

pub(crate) unsafe extern "C" fn device_synchronize(d: *mut MrDevice) -> MrStatus {
    on_dev!("device_synchronize", d, |dev| done(
        dev.device.synchronize_device()
    ))
}

pub(crate) unsafe extern "C" fn memset_zero(
    d: *mut MrDevice,
    ptr: u64,
    bytes: u64,
    s: *mut MrStream,
) -> MrStatus {
    on_dev!("memset_zero", d, s, |dev, st| done(dev.device.memset_zero(
        DevicePtr(ptr),
        bytes,
        st
    )))
}

pub(crate) unsafe extern "C" fn copy_host_to_device(
    d: *mut MrDevice,
    dst: u64,
    src: *const c_void,
    bytes: usize,
    s: *mut MrStream,
) -> MrStatus {
    on_dev!("copy_host_to_device", d, s, |dev, st| {
        if src.is_null() && bytes > 0 {
            return null_argument("copy_host_to_device");
        }
        let data = if bytes == 0 {
            &[][..]
        } else {
            // SAFETY: the host's buffer of `bytes` bytes, valid for the call (the mock
            // stages it before returning).
            unsafe { std::slice::from_raw_parts(src.cast::<u8>(), bytes) }
        };
        done(dev.device.copy_host_to_device(DevicePtr(dst), data, st))
    })
}

pub(crate) unsafe extern "C" fn copy_device_to_host(
    d: *mut MrDevice,
    dst: *mut c_void,
    src: u64,
    bytes: usize,
    s: *mut MrStream,
) -> MrStatus {
    on_dev!("copy_device_to_host", d, s, |dev, st| {
        if dst.is_null() && bytes > 0 {
            return null_argument("copy_device_to_host");
        }
        let out = if bytes == 0 {
            &mut [][..]
        } else {
            // SAFETY: the host's writable buffer of `bytes` bytes; the mock blocks until
            // it is written, so nothing writes it after the call.
            unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), bytes) }
        };
        done(dev.device.copy_device_to_host(out, DevicePtr(src), st))
    })
}

pub(crate) unsafe extern "C" fn copy_device_to_device(
    d: *mut MrDevice,
    dst: u64,
    src: u64,
    bytes: u64,
    s: *mut MrStream,
) -> MrStatus {
    on_dev!("copy_device_to_device", d, s, |dev, st| {
        done(
            dev.device
                .copy_device_to_device(DevicePtr(dst), DevicePtr(src), bytes, st),
        )
    })
}

pub(crate) unsafe extern "C" fn delay(d: *mut MrDevice, micros: u64, s: *mut MrStream) -> MrStatus {
    on_dev!("delay", d, s, |dev, st| done(dev.device.delay(micros, st)))
}

pub(crate) unsafe extern "C" fn device_async_error(d: *mut MrDevice) -> MrStatus {
    on_dev!(
        "device_async_error",
        d,
        |dev| match dev.device.async_error() {
            None => MR_OK,
            Some(e) => backend_status(&e),
        }
    )
}

pub(crate) unsafe extern "C" fn vm_granularity(d: *mut MrDevice, g: *mut u64) -> MrStatus {
    on_dev!(
        "vm_granularity",
        d,
        |dev| match dev.device.vm_granularity() {
            Ok(v) => out!("vm_granularity", g, v),
            Err(e) => backend_status(&e),
        }
    )
}
pub(crate) unsafe extern "C" fn vm_reserve(
    d: *mut MrDevice,
    bytes: u64,
    base: *mut u64,
) -> MrStatus {
    on_dev!("vm_reserve", d, |dev| match dev.device.vm_reserve(bytes) {
        Ok(p) => out!("vm_reserve", base, p.0),
        Err(e) => backend_status(&e),
    })
}
pub(crate) unsafe extern "C" fn vm_release(d: *mut MrDevice, base: u64) -> MrStatus {
    on_dev!("vm_release", d, |dev| done(
        dev.device.vm_release(DevicePtr(base))
    ))
}
pub(crate) unsafe extern "C" fn vm_create_physical(
    d: *mut MrDevice,
    bytes: u64,
    h: *mut u64,
) -> MrStatus {
    on_dev!(
        "vm_create_physical",
        d,
        |dev| match dev.device.vm_create_physical(bytes) {
            Ok(p) => out!("vm_create_physical", h, p.0),
            Err(e) => backend_status(&e),
        }
    )
}
pub(crate) unsafe extern "C" fn vm_release_physical(d: *mut MrDevice, h: u64) -> MrStatus {
    on_dev!("vm_release_physical", d, |dev| done(
        dev.device.vm_release_physical(PhysicalHandle(h))
    ))
}
pub(crate) unsafe extern "C" fn vm_map(d: *mut MrDevice, at: u64, h: u64) -> MrStatus {
    on_dev!("vm_map", d, |dev| done(
        dev.device.vm_map(DevicePtr(at), PhysicalHandle(h))
    ))
}
pub(crate) unsafe extern "C" fn vm_unmap(d: *mut MrDevice, at: u64, bytes: u64) -> MrStatus {
    on_dev!("vm_unmap", d, |dev| done(
        dev.device.vm_unmap(DevicePtr(at), bytes)
    ))
}

pub(crate) unsafe extern "C" fn annotate_allocation(
    d: *mut MrDevice,
    ptr: u64,
    bytes: u64,
    id: u64,
) {
    let _ = on_dev!("annotate_allocation", d, |dev| {
        dev.device
            .annotate_allocation(DevicePtr(ptr), bytes, AllocationId(id));
        MR_OK
    });
}

pub(crate) unsafe extern "C" fn set_op_label(d: *mut MrDevice, label: *const c_char, len: usize) {
    let _ = on_dev!("set_op_label", d, |dev| {
        if label.is_null() {
            return null_argument("set_op_label");
        }
        // SAFETY: the host's (pointer, length) string, valid for the call.
        let bytes = unsafe { std::slice::from_raw_parts(label.cast::<u8>(), len) };
        dev.device.set_op_label(&String::from_utf8_lossy(bytes));
        MR_OK
    });
}

pub(crate) unsafe extern "C" fn race_report_count(d: *mut MrDevice, count: *mut usize) -> MrStatus {
    on_dev!("race_report_count", d, |dev| {
        let races = dev.device.race_reports().unwrap_or_default();
        let n = races.len();
        *dev.races.lock() = races;
        out!("race_report_count", count, n)
    })
}

fn access(a: &memreuse_core::RaceAccess) -> MrRaceAccess {
    MrRaceAccess {
        op: a.op.as_ptr().cast(),
        op_len: a.op.len(),
        stream: a.stream.0,
        kind: u32::from(a.kind == memreuse_core::AccessKind::Write),
        has_allocation: u32::from(a.allocation.is_some()),
        allocation: a.allocation.map_or(0, |x| x.0),
    }
}

pub(crate) unsafe extern "C" fn race_report_get(
    d: *mut MrDevice,
    index: usize,
    report: *mut MrRaceReport,
) -> MrStatus {
    on_dev!("race_report_get", d, |dev| {
        let races = dev.races.lock();
        let Some(r) = races.get(index) else {
            return fail(
                MR_ERR_INVALID_ARGUMENT,
                format!("race_report_get: index {index} of {}", races.len()),
            );
        };
        // The strings point into the cached reports, replaced only by the next count
        // (the host copies them at once).
        fill!(
            "race_report_get",
            report,
            MrRaceReport {
                struct_size: size_of::<MrRaceReport>(),
                kind: u32::from(r.kind == RaceKind::Reuse),
                reserved: 0,
                range_start: r.range.start,
                range_end: r.range.end,
                earlier: access(&r.earlier),
                later: access(&r.later),
            }
        )
    })
}
