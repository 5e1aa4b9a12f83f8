//! Raw device memory of one mock device: a fake address space, the live raw allocations
//! (optionally backed by host memory), capacity accounting and the injected malloc fault.
//!
//! Addresses are never reused: every allocation gets fresh addresses followed by a guard
//! gap, so a use after `free` or an overrun into the next allocation is an
//! `InvalidArgument`, never a silent access to someone else's bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use memreuse_core::BackendError;
use parking_lot::Mutex;

use crate::config::{FaultKind, MallocFault};
use crate::error::{BACKEND_NAME, injected};

mod vm;

pub(crate) use vm::VM_GRANULARITY;

/// Alignment of every raw allocation (CUDA guarantees 256; 512 is stricter).
pub const ALLOCATION_ALIGNMENT: u64 = 512;
/// Unmapped bytes after every allocation, so overruns hit no other allocation.
const GUARD_GAP: u64 = ALLOCATION_ALIGNMENT;
/// The smallest slice of the fake address space a device gets (16 TiB).
const MIN_ADDRESS_SPACE: u64 = 1 << 44;
/// The largest slice (2^62: two slices still fit below 2^63).
const MAX_ADDRESS_SPACE: u64 = 1 << 62;

/// The slice of the fake address space of a device of `capacity` bytes: 64 times the
/// capacity, rounded up to a power of two, and at least [`MIN_ADDRESS_SPACE`].
///
/// Addresses are never reused and an expandable segment reserves 1.125 times the capacity
/// per (stream, pool), so a fixed 16 TiB made expandable segments fail with a bogus
/// out-of-memory on devices of several TiB or with many streams. Every device of one
/// configuration has the same capacity, hence the same slice size, so the devices of one
/// world never share an address; devices up to 256 GiB keep the 16 TiB slice (and their
/// addresses).
fn address_space(capacity: u64) -> u64 {
    capacity
        .saturating_mul(64)
        .checked_next_power_of_two()
        .unwrap_or(MAX_ADDRESS_SPACE)
        .clamp(MIN_ADDRESS_SPACE, MAX_ADDRESS_SPACE)
}
/// Freshly allocated memory holds this byte: contents are undefined, and a schedule that
/// reads memory it never wrote sees garbage, not conveniently zeroed bytes.
const FILL_BYTE: u8 = 0xA5;

/// Host bytes behind one raw allocation. Ops lock it for the duration of their data
/// movement, which keeps racy schedules free of host-side undefined behaviour while the
/// order in which ops run stays as racy as the schedule.
pub(crate) type Buffer = Arc<Mutex<Vec<u8>>>;

/// One live raw allocation.
pub(crate) struct RawAlloc {
    /// Length in bytes (as requested).
    pub len: u64,
    /// Host memory when the device is backed.
    pub data: Option<Buffer>,
    /// The physical handle when this is a `vm_map` mapping rather than a `malloc`.
    pub mapped: Option<u64>,
}

/// A validated byte range of one raw allocation.
#[derive(Clone)]
pub(crate) struct Span {
    /// Base address of the raw allocation (its identity, and the lock-order key).
    pub base: u64,
    /// Offset of the range inside the allocation.
    pub offset: usize,
    /// Length of the range.
    pub len: usize,
    /// Host bytes of the allocation, when backed.
    pub buf: Option<Buffer>,
}

impl Span {
    /// The device address range `[start, end)`.
    pub(crate) fn range(&self) -> (u64, u64) {
        let start = self.base + self.offset as u64;
        (start, start + self.len as u64)
    }
}

/// The raw memory of one device.
pub(crate) struct Memory {
    backing: bool,
    capacity: u64,
    used: u64,
    next_addr: u64,
    end_addr: u64,
    malloc_calls: u64,
    fault: Option<MallocFault>,
    allocs: BTreeMap<u64, RawAlloc>,
    /// Reserved virtual ranges by base (no device memory behind them; see `vm.rs`).
    reserved: BTreeMap<u64, vm::Reserved>,
    /// Live physical handles: id -> handle (their bytes count in `used`).
    physical: BTreeMap<u64, vm::Physical>,
    next_handle: u64,
}

impl Memory {
    /// Memory for the device with index `index`, which picks its address slice.
    ///
    /// Addresses depend only on the device index and the allocation sequence, so a replay
    /// (deterministic mode) reports the same addresses; devices with different indices
    /// never share an address, like the devices of one machine. Two independent devices
    /// opened with the same index do, like GPU 0 seen from two processes.
    pub(crate) fn new(
        index: usize,
        capacity: u64,
        backing: bool,
        fault: Option<MallocFault>,
    ) -> Memory {
        // Slice 0 is skipped so that no device hands out addresses near null. Past the
        // slices that fit below 2^63 (2^19 of 16 TiB) the index wraps, which keeps them
        // valid.
        let len = address_space(capacity);
        let slices = (1u64 << 63) / len;
        let slice = (index as u64 % (slices - 1)) + 1;
        let start = slice * len;
        Memory {
            backing,
            capacity,
            used: 0,
            next_addr: start,
            end_addr: start + len,
            malloc_calls: 0,
            fault,
            allocs: BTreeMap::new(),
            reserved: BTreeMap::new(),
            physical: BTreeMap::new(),
            next_handle: 1,
        }
    }

    /// `(free, total)` bytes.
    pub(crate) fn info(&self) -> (u64, u64) {
        (self.capacity.saturating_sub(self.used), self.capacity)
    }

    /// Replaces the planned malloc fault; `nth` counts from the next call.
    pub(crate) fn set_fault(&mut self, fault: Option<MallocFault>) {
        self.fault = fault.map(|f| MallocFault {
            nth: self.malloc_calls + f.nth,
            kind: f.kind,
        });
    }

    /// A new raw allocation of `bytes` bytes; returns its address.
    pub(crate) fn malloc(&mut self, bytes: u64) -> Result<u64, BackendError> {
        self.planned_fault(bytes)?;
        if bytes == 0 {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "malloc",
                "zero-byte allocation",
            ));
        }
        let free = self.capacity.saturating_sub(self.used);
        if bytes > free {
            return Err(BackendError::out_of_memory(
                BACKEND_NAME,
                bytes,
                format!("{free} bytes free of {} total", self.capacity),
            ));
        }
        let span = bytes
            .checked_next_multiple_of(ALLOCATION_ALIGNMENT)
            .and_then(|s| s.checked_add(GUARD_GAP))
            .ok_or_else(|| {
                BackendError::out_of_memory(
                    BACKEND_NAME,
                    bytes,
                    "request exceeds the address space",
                )
            })?;
        if span > self.end_addr - self.next_addr {
            return Err(BackendError::out_of_memory(
                BACKEND_NAME,
                bytes,
                "fake address space exhausted",
            ));
        }
        let data = if self.backing {
            let len = usize::try_from(bytes).map_err(|_| {
                BackendError::out_of_memory(BACKEND_NAME, bytes, "larger than host address space")
            })?;
            let mut v = Vec::new();
            v.try_reserve_exact(len).map_err(|e| {
                BackendError::out_of_memory(BACKEND_NAME, bytes, format!("host memory: {e}"))
            })?;
            v.resize(len, FILL_BYTE);
            Some(Arc::new(Mutex::new(v)))
        } else {
            None
        };
        let addr = self.next_addr;
        self.next_addr += span;
        self.used += bytes;
        self.allocs.insert(
            addr,
            RawAlloc {
                len: bytes,
                data,
                mapped: None,
            },
        );
        Ok(addr)
    }

    /// Counts one device allocation (`malloc` or `vm_create_physical`) and fails it when
    /// it is the one the planned fault names.
    fn planned_fault(&mut self, bytes: u64) -> Result<(), BackendError> {
        self.malloc_calls += 1;
        if let Some(f) = self.fault
            && f.nth == self.malloc_calls
        {
            self.fault = None;
            let what = format!("raw malloc #{} of {bytes} bytes", self.malloc_calls);
            return Err(match f.kind {
                FaultKind::OutOfMemory => BackendError::out_of_memory(
                    BACKEND_NAME,
                    bytes,
                    format!("injected fault: {what}"),
                ),
                FaultKind::Injected => injected(what),
            });
        }
        Ok(())
    }

    /// The live allocation starting exactly at `ptr`, for `free` to check first.
    pub(crate) fn exact(&self, ptr: u64) -> Result<&RawAlloc, BackendError> {
        match self.allocs.get(&ptr) {
            Some(a) if a.mapped.is_some() => Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "free",
                format!("{ptr:#x} is a vm_map mapping: vm_unmap it instead"),
            )),
            Some(a) => Ok(a),
            None => Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "free",
                format!("{ptr:#x} is not the start of a live raw allocation"),
            )),
        }
    }

    /// Removes the allocation starting at `ptr`.
    pub(crate) fn remove(&mut self, ptr: u64) -> Option<RawAlloc> {
        let a = self.allocs.remove(&ptr)?;
        self.used -= a.len;
        Some(a)
    }

    /// Validates that `[ptr, ptr + bytes)` lies inside one live allocation.
    pub(crate) fn span(
        &self,
        call: &'static str,
        ptr: u64,
        bytes: u64,
    ) -> Result<Span, BackendError> {
        let end = ptr.checked_add(bytes).ok_or_else(|| {
            BackendError::invalid_argument(
                BACKEND_NAME,
                call,
                format!("range {ptr:#x} + {bytes} overflows the address space"),
            )
        })?;
        let Some((&base, alloc)) = self.allocs.range(..=ptr).next_back() else {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                call,
                format!("{ptr:#x} is not in a live raw allocation"),
            ));
        };
        if alloc.mapped.is_some() && ptr < base + alloc.len {
            // A mapping: the range may continue into the next mapping of the same
            // reserved range.
            return self.vm_span(call, ptr, end);
        }
        if end > base + alloc.len || ptr >= base + alloc.len.max(1) {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                call,
                format!(
                    "range [{ptr:#x}, {end:#x}) is not inside one live raw allocation \
                     (nearest: [{base:#x}, {:#x}))",
                    base + alloc.len
                ),
            ));
        }
        Ok(Span {
            base,
            offset: (ptr - base) as usize,
            len: bytes as usize,
            buf: alloc.data.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_space_is_sized_from_the_capacity() {
        // Up to 256 GiB: the 16 TiB slices and addresses of before.
        assert_eq!(address_space(1 << 30), 1 << 44);
        assert_eq!(address_space(256 << 30), 1 << 44);
        assert_eq!(Memory::new(0, 1 << 30, false, None).next_addr, 1 << 44);
        assert_eq!(Memory::new(3, 1 << 30, false, None).next_addr, 4 << 44);
        // An 8 TiB device reserves 1.125 x its capacity per (stream, pool): several fit.
        let tib = 1u64 << 40;
        let mut m = Memory::new(0, 8 * tib, false, None);
        for _ in 0..4 {
            m.vm_reserve(9 * tib).unwrap();
        }
        // An unlimited device gets the largest slice, still below 2^63.
        let m = Memory::new(5, u64::MAX, false, None);
        assert_eq!((m.next_addr, m.end_addr), (1 << 62, 1 << 63));
    }

    #[test]
    fn spans_are_validated_and_addresses_aligned() {
        let mut m = Memory::new(1, 4096, true, None);
        let a = m.malloc(100).unwrap();
        let b = m.malloc(100).unwrap();
        assert_eq!(a % ALLOCATION_ALIGNMENT, 0);
        assert_eq!(b % ALLOCATION_ALIGNMENT, 0);
        assert!(m.span("t", a, 100).is_ok());
        assert!(m.span("t", a + 99, 1).is_ok());
        assert!(m.span("t", a, 101).is_err());
        assert!(m.span("t", a + 100, 0).is_err());
        assert!(m.span("t", a - 1, 1).is_err());
        assert!(m.span("t", u64::MAX, 2).is_err());
        assert!(m.malloc(4000).is_err());
        assert_eq!(m.info(), (4096 - 200, 4096));
    }
}
