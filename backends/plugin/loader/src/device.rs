//! A device of a loaded plugin as an ordinary [`Backend`]: the allocator, the process group,
//! the race-checking adaptor and the contract kits run on it unchanged.

use std::ffi::c_void;
use std::mem::size_of;
use std::sync::Arc;

use memreuse_core::{
    AccessKind, AllocationId, Backend, BackendError, BackendOptions, Capabilities, DevicePtr,
    MemoryInfo, PhysicalHandle, RaceAccess, RaceKind, RaceReport, StreamId,
};

use crate::abi::{
    MR_CAP_DETERMINISTIC_SCHEDULING, MR_CAP_EXACT_DELAYS, MR_CAP_GROUPING, MR_CAP_MEMORY_CAPACITY,
    MR_CAP_NATIVE_RACE_DETECTION, MR_CAP_VIRTUAL_MEMORY, MR_OPEN_DETERMINISTIC_SEED,
    MR_OPEN_MEMORY_CAPACITY, MR_OPEN_NO_NATIVE_RACE_DETECTION, MrCapabilities, MrDevice, MrEvent,
    MrMemoryInfo, MrOpenOptions, MrRaceAccess, MrRaceReport, MrStream,
};
use crate::handles::{DeviceInner, StreamInner};
pub use crate::handles::{PluginEvent, PluginStream};
use crate::library::{Plugin, text};

/// The plugin entry `$field`, or the Unsupported error for a NULL one (required entries are
/// never NULL after loading; optional ones may be).
macro_rules! entry {
    ($plugin:expr, $field:ident) => {
        match $plugin.api.$field {
            Some(f) => f,
            None => return Err($plugin.absent(stringify!($field)).into()),
        }
    };
}
pub(crate) use entry;

/// One device of a loaded plugin.
#[derive(Clone)]
pub struct PluginDevice {
    pub(crate) inner: Arc<DeviceInner>,
    default: PluginStream,
}

impl std::fmt::Debug for PluginDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PluginDevice({}:{})",
            self.inner.plugin.name, self.inner.index
        )
    }
}

/// The ABI's open options for the host's.
pub(crate) fn mr_open_options(options: &BackendOptions) -> MrOpenOptions {
    let mut flags = 0;
    if options.memory_capacity.is_some() {
        flags |= MR_OPEN_MEMORY_CAPACITY;
    }
    if options.deterministic_seed.is_some() {
        flags |= MR_OPEN_DETERMINISTIC_SEED;
    }
    if options.disable_native_race_detection {
        flags |= MR_OPEN_NO_NATIVE_RACE_DETECTION;
    }
    MrOpenOptions {
        struct_size: size_of::<MrOpenOptions>(),
        device: options.device as u32,
        flags,
        memory_capacity: options.memory_capacity.unwrap_or(0),
        deterministic_seed: options.deterministic_seed.unwrap_or(0),
    }
}

impl PluginDevice {
    /// Opens device `options.device` of `plugin`.
    pub fn open(plugin: &Arc<Plugin>, options: &BackendOptions) -> Result<Self, BackendError> {
        let open = entry!(plugin, device_open);
        let mr = mr_open_options(options);
        let mut raw: *mut MrDevice = std::ptr::null_mut();
        // SAFETY: valid options struct and out-pointer; the plugin owns what it returns.
        plugin.check(unsafe { open(&raw const mr, &raw mut raw) }, "device_open")?;
        if raw.is_null() {
            return Err(plugin.null_handle("device_open"));
        }
        Self::from_raw(plugin, raw, options.device)
    }

    /// Wraps a device handle the plugin returned (device_open, world_open); takes
    /// ownership (closed when the last handle goes).
    pub(crate) fn from_raw(
        plugin: &Arc<Plugin>,
        raw: *mut MrDevice,
        index: usize,
    ) -> Result<Self, BackendError> {
        let mut inner = DeviceInner {
            plugin: Arc::clone(plugin),
            raw,
            index,
            capabilities: Capabilities::default(),
            grouping: false,
        };
        if let Some(caps) = plugin.api.capabilities {
            let mut c = MrCapabilities {
                struct_size: size_of::<MrCapabilities>(),
                ..MrCapabilities::default()
            };
            // SAFETY: a live device and a zeroed struct of the size we declare.
            plugin.check(unsafe { caps(raw, &raw mut c) }, "capabilities")?;
            let has = |bit| c.flags & bit != 0;
            let mut out = Capabilities::default();
            out.deterministic_scheduling = has(MR_CAP_DETERMINISTIC_SCHEDULING);
            out.native_race_detection = has(MR_CAP_NATIVE_RACE_DETECTION);
            out.memory_capacity = has(MR_CAP_MEMORY_CAPACITY);
            out.exact_delays = has(MR_CAP_EXACT_DELAYS);
            out.virtual_memory = has(MR_CAP_VIRTUAL_MEMORY);
            if c.allocation_alignment != 0 {
                if !c.allocation_alignment.is_power_of_two() {
                    return Err(BackendError::invalid_argument(
                        plugin.name.clone(),
                        "capabilities",
                        format!(
                            "plugin {} declares allocation_alignment {}, not a power of two",
                            plugin.path.display(),
                            c.allocation_alignment
                        ),
                    ));
                }
                out.allocation_alignment = c.allocation_alignment;
            }
            inner.capabilities = out;
            inner.grouping = has(MR_CAP_GROUPING);
        }
        let inner = Arc::new(inner);
        let default_stream = entry!(plugin, default_stream);
        let mut s: *mut MrStream = std::ptr::null_mut();
        // SAFETY: a live device and an out-pointer.
        plugin.check(unsafe { default_stream(raw, &raw mut s) }, "default_stream")?;
        if s.is_null() {
            return Err(plugin.null_handle("default_stream"));
        }
        let default = PluginStream(Arc::new(StreamInner {
            raw: s,
            id: stream_id_of(&inner, s),
            device: raw,
            owner: None,
        }));
        Ok(PluginDevice { inner, default })
    }

    pub(crate) fn plugin(&self) -> &Plugin {
        &self.inner.plugin
    }

    /// The stream's handle, when it belongs to this device (a foreign handle is never
    /// passed to the plugin: it could not check it).
    pub(crate) fn raw_stream(
        &self,
        stream: &PluginStream,
        call: &'static str,
    ) -> Result<*mut MrStream, BackendError> {
        if stream.0.device == self.inner.raw {
            Ok(stream.0.raw)
        } else {
            Err(BackendError::invalid_argument(
                self.inner.plugin.name.clone(),
                call,
                "the stream belongs to another device",
            ))
        }
    }

    fn raw_event(
        &self,
        event: &PluginEvent,
        call: &'static str,
    ) -> Result<*mut MrEvent, BackendError> {
        if event.device.raw == self.inner.raw {
            Ok(event.raw)
        } else {
            Err(BackendError::invalid_argument(
                self.inner.plugin.name.clone(),
                call,
                "the event belongs to another device",
            ))
        }
    }
}

fn stream_id_of(inner: &DeviceInner, s: *mut MrStream) -> StreamId {
    match inner.plugin.api.stream_id {
        // SAFETY: a live stream of this live device.
        Some(id) => StreamId(unsafe { id(inner.raw, s) }),
        None => StreamId(s as u64),
    }
}

fn race_access(a: &MrRaceAccess) -> RaceAccess {
    RaceAccess {
        // SAFETY: header rule: (op, op_len) valid until the next race_report_get.
        op: unsafe { text(a.op, a.op_len) }.unwrap_or_default(),
        stream: StreamId(a.stream),
        kind: if a.kind == 0 {
            AccessKind::Read
        } else {
            AccessKind::Write
        },
        allocation: (a.has_allocation != 0).then_some(AllocationId(a.allocation)),
    }
}

impl Backend for PluginDevice {
    type Stream = PluginStream;
    type Event = PluginEvent;

    fn name(&self) -> &str {
        &self.inner.plugin.name
    }
    fn device_index(&self) -> usize {
        self.inner.index
    }
    fn memory_info(&self) -> Result<MemoryInfo, BackendError> {
        let p = self.plugin();
        let f = entry!(p, memory_info);
        let mut info = MrMemoryInfo {
            struct_size: size_of::<MrMemoryInfo>(),
            ..MrMemoryInfo::default()
        };
        // SAFETY: live device, zeroed struct of the declared size.
        p.check(unsafe { f(self.inner.raw, &raw mut info) }, "memory_info")?;
        Ok(MemoryInfo {
            free: info.free_bytes,
            total: info.total_bytes,
        })
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities
    }
    fn async_error(&self) -> Option<BackendError> {
        let p = self.plugin();
        let f = p.api.device_async_error?;
        // SAFETY: live device.
        let status = unsafe { f(self.inner.raw) };
        p.check(status, "device_async_error").err()
    }
    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        let p = self.plugin();
        let f = entry!(p, malloc);
        let mut ptr = 0u64;
        // SAFETY: live device and an out-pointer.
        let status = unsafe { f(self.inner.raw, bytes, &raw mut ptr) };
        if status != crate::abi::MR_OK {
            return Err(p.backend_error(status, "malloc", bytes));
        }
        if ptr == 0 {
            return Err(p.null_handle("malloc"));
        }
        Ok(DevicePtr(ptr))
    }
    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, free);
        // SAFETY: live device; the plugin checks the address.
        p.check(unsafe { f(self.inner.raw, ptr.0) }, "free")
    }
    fn default_stream(&self) -> PluginStream {
        self.default.clone()
    }
    fn create_stream(&self) -> Result<PluginStream, BackendError> {
        let p = self.plugin();
        let f = entry!(p, stream_create);
        let mut s: *mut MrStream = std::ptr::null_mut();
        // SAFETY: live device and an out-pointer.
        p.check(unsafe { f(self.inner.raw, &raw mut s) }, "stream_create")?;
        if s.is_null() {
            return Err(p.null_handle("stream_create"));
        }
        Ok(PluginStream(Arc::new(StreamInner {
            raw: s,
            id: stream_id_of(&self.inner, s),
            device: self.inner.raw,
            owner: Some(Arc::clone(&self.inner)),
        })))
    }
    fn stream_id(&self, stream: &PluginStream) -> StreamId {
        stream.0.id
    }
    fn owns_stream(&self, stream: &PluginStream) -> bool {
        stream.0.device == self.inner.raw
    }
    fn create_event(&self) -> Result<PluginEvent, BackendError> {
        let p = self.plugin();
        let f = entry!(p, event_create);
        let mut e: *mut MrEvent = std::ptr::null_mut();
        // SAFETY: live device and an out-pointer.
        p.check(unsafe { f(self.inner.raw, &raw mut e) }, "event_create")?;
        if e.is_null() {
            return Err(p.null_handle("event_create"));
        }
        Ok(PluginEvent {
            device: Arc::clone(&self.inner),
            raw: e,
        })
    }
    fn record_event(&self, event: &PluginEvent, stream: &PluginStream) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, event_record);
        let (e, s) = (
            self.raw_event(event, "record_event")?,
            self.raw_stream(stream, "record_event")?,
        );
        // SAFETY: live device, its own event and stream.
        p.check(unsafe { f(self.inner.raw, e, s) }, "event_record")
    }
    fn query_event(&self, event: &PluginEvent) -> Result<bool, BackendError> {
        let p = self.plugin();
        let f = entry!(p, event_query);
        let e = self.raw_event(event, "query_event")?;
        let mut done = 0i32;
        // SAFETY: live device, its own event, an out-pointer.
        let status = unsafe { f(self.inner.raw, e, &raw mut done) };
        p.check(status, "event_query")?;
        Ok(done != 0)
    }
    fn synchronize_event(&self, event: &PluginEvent) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, event_synchronize);
        let e = self.raw_event(event, "synchronize_event")?;
        // SAFETY: live device, its own event.
        p.check(unsafe { f(self.inner.raw, e) }, "event_synchronize")
    }
    fn stream_wait_event(
        &self,
        stream: &PluginStream,
        event: &PluginEvent,
    ) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, stream_wait_event);
        let (s, e) = (
            self.raw_stream(stream, "stream_wait_event")?,
            self.raw_event(event, "stream_wait_event")?,
        );
        // SAFETY: live device, its own stream and event.
        p.check(unsafe { f(self.inner.raw, s, e) }, "stream_wait_event")
    }
    fn synchronize_stream(&self, stream: &PluginStream) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, stream_synchronize);
        let s = self.raw_stream(stream, "synchronize_stream")?;
        // SAFETY: live device, its own stream.
        p.check(unsafe { f(self.inner.raw, s) }, "stream_synchronize")
    }
    fn synchronize_device(&self) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, device_synchronize);
        // SAFETY: live device.
        p.check(unsafe { f(self.inner.raw) }, "device_synchronize")
    }
    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &PluginStream,
    ) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, memset_zero);
        let s = self.raw_stream(stream, "memset_zero")?;
        // SAFETY: live device, its own stream; the plugin checks the range.
        p.check(unsafe { f(self.inner.raw, ptr.0, bytes, s) }, "memset_zero")
    }
    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &PluginStream,
    ) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, copy_host_to_device);
        let s = self.raw_stream(stream, "copy_host_to_device")?;
        // SAFETY: `src` is valid for its length for the call, which stages it before
        // returning (header rule); the plugin checks the device range.
        let status = unsafe {
            f(
                self.inner.raw,
                dst.0,
                src.as_ptr().cast::<c_void>(),
                src.len(),
                s,
            )
        };
        p.check(status, "copy_host_to_device")
    }
    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &PluginStream,
    ) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, copy_device_to_host);
        let s = self.raw_stream(stream, "copy_device_to_host")?;
        // SAFETY: `dst` is writable for its length and the call blocks until the bytes are
        // written (header rule), so nothing writes it after we return.
        let status = unsafe {
            f(
                self.inner.raw,
                dst.as_mut_ptr().cast::<c_void>(),
                src.0,
                dst.len(),
                s,
            )
        };
        p.check(status, "copy_device_to_host")
    }
    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &PluginStream,
    ) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, copy_device_to_device);
        let s = self.raw_stream(stream, "copy_device_to_device")?;
        // SAFETY: live device, its own stream; the plugin checks both ranges.
        p.check(
            unsafe { f(self.inner.raw, dst.0, src.0, bytes, s) },
            "copy_device_to_device",
        )
    }
    fn delay(&self, micros: u64, stream: &PluginStream) -> Result<(), BackendError> {
        let p = self.plugin();
        let s = self.raw_stream(stream, "delay")?;
        let Some(f) = p.api.delay else {
            return Ok(()); // best effort: a plugin without delays runs without them
        };
        // SAFETY: live device, its own stream.
        p.check(unsafe { f(self.inner.raw, micros, s) }, "delay")
    }
    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        if let Some(f) = self.plugin().api.annotate_allocation {
            // SAFETY: live device; plain values.
            unsafe { f(self.inner.raw, ptr.0, bytes, id.0) };
        }
    }
    fn set_op_label(&self, label: &str) {
        if let Some(f) = self.plugin().api.set_op_label {
            // SAFETY: live device; the string is valid for the call and copied by the plugin.
            unsafe { f(self.inner.raw, label.as_ptr().cast(), label.len()) };
        }
    }
    fn race_reports(&self) -> Option<Vec<RaceReport>> {
        let p = self.plugin();
        if !self.inner.capabilities.native_race_detection {
            return None;
        }
        let (count, get) = (p.api.race_report_count?, p.api.race_report_get?);
        let mut n = 0usize;
        // SAFETY: live device and an out-pointer.
        if unsafe { count(self.inner.raw, &raw mut n) } != crate::abi::MR_OK {
            return Some(Vec::new());
        }
        let mut out = Vec::with_capacity(n.min(1 << 16));
        for i in 0..n {
            let mut r = MrRaceReport {
                struct_size: size_of::<MrRaceReport>(),
                ..MrRaceReport::default()
            };
            // SAFETY: live device, an index below the count, a zeroed struct of our size.
            if unsafe { get(self.inner.raw, i, &raw mut r) } != crate::abi::MR_OK {
                break;
            }
            out.push(RaceReport {
                kind: if r.kind == 0 {
                    RaceKind::Schedule
                } else {
                    RaceKind::Reuse
                },
                range: r.range_start..r.range_end,
                earlier: race_access(&r.earlier),
                later: race_access(&r.later),
            });
        }
        Some(out)
    }
    fn vm_granularity(&self) -> Result<u64, BackendError> {
        let p = self.plugin();
        let f = entry!(p, vm_granularity);
        let mut g = 0u64;
        // SAFETY: live device and an out-pointer.
        p.check(unsafe { f(self.inner.raw, &raw mut g) }, "vm_granularity")?;
        Ok(g)
    }
    fn vm_reserve(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        let p = self.plugin();
        let f = entry!(p, vm_reserve);
        let mut base = 0u64;
        // SAFETY: live device and an out-pointer.
        let status = unsafe { f(self.inner.raw, bytes, &raw mut base) };
        if status != crate::abi::MR_OK {
            return Err(p.backend_error(status, "vm_reserve", bytes));
        }
        Ok(DevicePtr(base))
    }
    fn vm_release(&self, base: DevicePtr) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, vm_release);
        // SAFETY: live device; the plugin checks the address.
        p.check(unsafe { f(self.inner.raw, base.0) }, "vm_release")
    }
    fn vm_create_physical(&self, bytes: u64) -> Result<PhysicalHandle, BackendError> {
        let p = self.plugin();
        let f = entry!(p, vm_create_physical);
        let mut h = 0u64;
        // SAFETY: live device and an out-pointer.
        let status = unsafe { f(self.inner.raw, bytes, &raw mut h) };
        if status != crate::abi::MR_OK {
            return Err(p.backend_error(status, "vm_create_physical", bytes));
        }
        Ok(PhysicalHandle(h))
    }
    fn vm_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, vm_release_physical);
        // SAFETY: live device; the plugin checks the handle.
        p.check(
            unsafe { f(self.inner.raw, handle.0) },
            "vm_release_physical",
        )
    }
    fn vm_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, vm_map);
        // SAFETY: live device; the plugin checks address and handle.
        p.check(unsafe { f(self.inner.raw, at.0, handle.0) }, "vm_map")
    }
    fn vm_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        let p = self.plugin();
        let f = entry!(p, vm_unmap);
        // SAFETY: live device; the plugin checks the range.
        p.check(unsafe { f(self.inner.raw, at.0, bytes) }, "vm_unmap")
    }
}
