//! Raw device memory: one `VkDeviceMemory` + `VkBuffer` per raw allocation, persistently
//! mapped, behind deterministic synthetic device addresses.
//!
//! Addresses are not the driver's (lavapipe's buffer device address equals a host pointer
//! and changes every run): each device hands out `(index + 1) << 40` upwards, in
//! allocation order, never reusing one, so a replay gets the same addresses every run and a
//! stale address is refused instead of hitting newer memory. Capacity is the backend's own
//! (lavapipe never fails an allocation and has no memory-budget extension).

use std::collections::BTreeMap;
use std::sync::Arc;

use ash::vk;
use memreuse_core::{BackendError, DevicePtr};

use crate::raw::RawDevice;
use crate::result::{BACKEND, vk_alloc_check, vk_check};

/// Alignment of every synthetic address (and so of every raw allocation).
pub const ADDRESS_ALIGNMENT: u64 = 4096;

/// Bytes of synthetic address space of one device.
const ADDRESS_SPAN: u64 = 1 << 40;

/// One raw allocation. The memory is freed when the last `Arc` drops, so enqueued work and
/// the communicator's proxy keep what they touch alive even past a (buggy) early `free`.
pub struct Allocation {
    raw: Arc<RawDevice>,
    memory: vk::DeviceMemory,
    /// The buffer covering the whole allocation (transfer source and destination).
    pub buffer: vk::Buffer,
    /// Host address of the persistent mapping.
    mapped: usize,
    /// Bytes asked for.
    pub size: u64,
    /// Its synthetic device address.
    pub base: u64,
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Allocation({:#x}, {} bytes)", self.base, self.size)
    }
}

impl Allocation {
    /// Allocates `size` bytes of the context's memory type, binds a buffer over them and
    /// maps them.
    pub fn new(raw: &Arc<RawDevice>, size: u64, base: u64) -> Result<Allocation, BackendError> {
        let d = &raw.device;
        let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid device and create info.
        let buffer = unsafe { d.create_buffer(&info, None) }
            .map_err(|e| vk_alloc_check(e, "vkCreateBuffer", size))?;
        // SAFETY: `buffer` was created from `d`.
        let needs = unsafe { d.get_buffer_memory_requirements(buffer) };
        let memory_type = raw.context.facts.memory_type;
        if needs.memory_type_bits & (1 << memory_type) == 0 {
            // SAFETY: unused buffer of `d`.
            unsafe { d.destroy_buffer(buffer, None) };
            return Err(BackendError::invalid_argument(
                BACKEND,
                "malloc",
                format!("memory type {memory_type} cannot back a transfer buffer"),
            ));
        }
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(needs.size)
            .memory_type_index(memory_type);
        // SAFETY: valid device and allocate info.
        let memory = match unsafe { d.allocate_memory(&alloc, None) } {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: unused buffer of `d`.
                unsafe { d.destroy_buffer(buffer, None) };
                return Err(vk_alloc_check(e, "vkAllocateMemory", size));
            }
        };
        let release = |e: BackendError| {
            // SAFETY: both objects are unused and belong to `d`.
            unsafe {
                d.destroy_buffer(buffer, None);
                d.free_memory(memory, None);
            }
            e
        };
        // SAFETY: `memory` is large enough for `buffer` (its requirements) and unbound.
        unsafe { d.bind_buffer_memory(buffer, memory, 0) }
            .map_err(|e| release(vk_check(e, "vkBindBufferMemory")))?;
        // SAFETY: the memory type is host visible; the whole range is mapped once.
        let mapped =
            unsafe { d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
                .map_err(|e| release(vk_alloc_check(e, "vkMapMemory", size)))?;
        Ok(Allocation {
            raw: Arc::clone(raw),
            memory,
            buffer,
            mapped: mapped as usize,
            size,
            base,
        })
    }

    /// Copies `dst.len()` bytes at `offset` to `dst` through the mapping.
    ///
    /// The caller has ordered the device's writes before this (a waited timeline value).
    pub fn read(&self, offset: u64, dst: &mut [u8]) {
        assert!(offset + dst.len() as u64 <= self.size, "read past the end");
        // SAFETY: the range lies inside the mapping (checked above); the mapping lives as
        // long as `self`; raw copies (no reference into device-visible memory is formed).
        unsafe {
            std::ptr::copy_nonoverlapping(
                (self.mapped as *const u8).add(offset as usize),
                dst.as_mut_ptr(),
                dst.len(),
            );
        }
    }

    /// Copies `src` to `offset` through the mapping (coherent memory: visible to work
    /// submitted afterwards).
    pub fn write(&self, offset: u64, src: &[u8]) {
        assert!(offset + src.len() as u64 <= self.size, "write past the end");
        // SAFETY: as for `read`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                (self.mapped as *mut u8).add(offset as usize),
                src.len(),
            );
        }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: the last reference is gone, so no enqueued work uses the buffer any more
        // (in-flight work holds an `Arc`); freeing the memory unmaps it.
        unsafe {
            self.raw.device.destroy_buffer(self.buffer, None);
            self.raw.device.free_memory(self.memory, None);
        }
    }
}

/// A checked range: the allocation and the offset of the range's first byte in it.
#[derive(Clone, Debug)]
pub struct Span {
    /// The allocation holding the range.
    pub alloc: Arc<Allocation>,
    /// Offset of the range in it.
    pub offset: u64,
    /// Length of the range.
    pub len: u64,
}

impl Span {
    /// Reads the whole span.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len as usize];
        self.alloc.read(self.offset, &mut v);
        v
    }

    /// Overwrites the span with `bytes` (exactly `len` of them).
    pub fn store(&self, bytes: &[u8]) {
        debug_assert_eq!(bytes.len() as u64, self.len);
        self.alloc.write(self.offset, bytes);
    }
}

/// The live allocations of one device by synthetic address, and its capacity.
pub struct AddressSpace {
    live: BTreeMap<u64, Arc<Allocation>>,
    next: u64,
    end: u64,
    /// Bytes the device may hand out in total.
    pub capacity: u64,
    /// Bytes handed out and not freed.
    pub used: u64,
}

impl AddressSpace {
    /// The address space of device `index`, with `capacity` bytes.
    pub fn new(index: usize, capacity: u64) -> AddressSpace {
        let start = (index as u64 + 1).saturating_mul(ADDRESS_SPAN);
        AddressSpace {
            live: BTreeMap::new(),
            next: start,
            end: start.saturating_add(ADDRESS_SPAN),
            capacity,
            used: 0,
        }
    }

    /// Checks `bytes` against capacity and the driver's limit and reserves an address.
    pub fn reserve(&mut self, bytes: u64, max_allocation: u64) -> Result<u64, BackendError> {
        if bytes == 0 {
            return Err(BackendError::invalid_argument(
                BACKEND,
                "malloc",
                "0 bytes requested; ask for at least 1",
            ));
        }
        if bytes > max_allocation {
            return Err(BackendError::out_of_memory(
                BACKEND,
                bytes,
                format!(
                    "larger than the driver's maxMemoryAllocationSize of {max_allocation} bytes"
                ),
            ));
        }
        if self.used.saturating_add(bytes) > self.capacity {
            return Err(BackendError::out_of_memory(
                BACKEND,
                bytes,
                format!("capacity {} bytes, {} in use", self.capacity, self.used),
            ));
        }
        let size = bytes.div_ceil(ADDRESS_ALIGNMENT) * ADDRESS_ALIGNMENT;
        if self.end - self.next < size {
            return Err(BackendError::out_of_memory(
                BACKEND,
                bytes,
                "the device's synthetic address space (1 TiB) is used up".to_owned(),
            ));
        }
        let base = self.next;
        self.next += size;
        Ok(base)
    }

    /// Records a new allocation (its address came from [`AddressSpace::reserve`]).
    pub fn insert(&mut self, alloc: Allocation) -> DevicePtr {
        let base = alloc.base;
        self.used += alloc.size;
        self.live.insert(base, Arc::new(alloc));
        DevicePtr(base)
    }

    /// Forgets the allocation starting at `ptr` (its memory goes when the last user drops).
    pub fn remove(&mut self, ptr: DevicePtr) -> Result<Arc<Allocation>, BackendError> {
        let alloc = self.live.remove(&ptr.addr()).ok_or_else(|| {
            BackendError::invalid_argument(
                BACKEND,
                "free",
                format!("{ptr} is not the start of a live allocation of this device"),
            )
        })?;
        self.used -= alloc.size;
        Ok(alloc)
    }

    /// The allocation holding `[ptr, ptr + len)` entirely (`len` may be 0), or an error
    /// naming `call`.
    pub fn span(&self, call: &'static str, ptr: DevicePtr, len: u64) -> Result<Span, BackendError> {
        let addr = ptr.addr();
        let found = self.live.range(..=addr).next_back().map(|(_, a)| a);
        match found {
            Some(a)
                if addr
                    .checked_add(len)
                    .is_some_and(|end| end <= a.base + a.size) =>
            {
                Ok(Span {
                    alloc: Arc::clone(a),
                    offset: addr - a.base,
                    len,
                })
            }
            Some(a) if addr < a.base + a.size => Err(BackendError::invalid_argument(
                BACKEND,
                call,
                format!(
                    "[{ptr}, +{len}) runs past the end of the allocation [{:#x}, +{})",
                    a.base, a.size
                ),
            )),
            _ => Err(BackendError::invalid_argument(
                BACKEND,
                call,
                format!("{ptr} is not inside a live allocation of this device"),
            )),
        }
    }

    /// Number of live allocations.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// True when nothing is allocated.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}
