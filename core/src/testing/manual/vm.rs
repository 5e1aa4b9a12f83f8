//! [`super::ManualBackend`]'s virtual memory (on unless
//! [`super::ManualBackend::without_virtual_memory`]), with the mock's rules: a 2 MiB
//! granularity; every size and address a multiple of it; reserved ranges cost nothing and
//! the capacity limits physical handles (`fail_nth_malloc` counts them too); a map covers
//! one whole unmapped handle inside a reserved range, over unmapped pages; an access is
//! valid when every granule it touches is mapped (it may span several mappings); unmap
//! takes exactly one mapping; a handle is released only unmapped, a range only when
//! nothing in it is mapped.

use std::collections::{BTreeMap, HashMap};

use crate::error::BackendError;
use crate::ids::DevicePtr;
use crate::virtual_memory::PhysicalHandle;

use super::{NAME, State, invalid};

/// The mapping granularity (CUDA's usual 2 MiB).
pub const GRANULARITY: u64 = 2 << 20;

/// Virtual-memory state of a [`super::ManualBackend`].
#[derive(Default)]
pub(super) struct Vm {
    /// Reserved ranges: base -> length.
    reserved: BTreeMap<u64, u64>,
    /// Physical handles: id -> (length, where mapped).
    physical: HashMap<u64, (u64, Option<u64>)>,
    /// Mappings: address -> (length, handle id).
    mappings: BTreeMap<u64, (u64, u64)>,
    next_handle: u64,
    /// `vm_map` and `vm_unmap` calls that succeeded.
    pub maps: u64,
    pub unmaps: u64,
    /// `vm_unmap` calls so far, and the one that fails (see `fail_nth_vm_unmap`).
    unmap_calls: u64,
    pub fail_unmap_at: Option<u64>,
}

fn aligned(call: &'static str, what: &str, v: u64) -> Result<(), BackendError> {
    if v == 0 || v % GRANULARITY != 0 {
        return Err(invalid(
            call,
            format!("{what} {v:#x} is not a non-zero multiple of the granularity {GRANULARITY}"),
        ));
    }
    Ok(())
}

impl Vm {
    /// Makes the `n`-th `vm_unmap` from now fail (`n = 0` clears it).
    pub fn fail_nth_unmap(&mut self, n: u64) {
        self.fail_unmap_at = (n > 0).then(|| self.unmap_calls + n);
    }

    /// True when every byte of `[ptr, ptr + bytes)` is mapped.
    pub fn covers(&self, ptr: u64, bytes: u64) -> bool {
        let end = ptr.saturating_add(bytes.max(1));
        let mut cursor = ptr;
        while cursor < end {
            match self.mappings.range(..=cursor).next_back() {
                Some((&at, &(len, _))) if cursor < at + len => cursor = at + len,
                _ => return false,
            }
        }
        true
    }

    /// Bytes of live physical handles.
    pub fn physical_bytes(&self) -> u64 {
        self.physical.values().map(|p| p.0).sum()
    }
}

impl State {
    pub(super) fn vm_reserve(&mut self, bytes: u64) -> Result<DevicePtr, BackendError> {
        aligned("vm_reserve", "size", bytes)?;
        let base = self.next_addr.next_multiple_of(GRANULARITY);
        let end = base
            .checked_add(bytes)
            .and_then(|e| e.checked_add(GRANULARITY))
            .ok_or_else(|| BackendError::OutOfMemory {
                backend: NAME.to_owned(),
                requested: bytes,
                detail: "address space exhausted".to_owned(),
            })?;
        self.next_addr = end;
        self.vm.reserved.insert(base, bytes);
        Ok(DevicePtr(base))
    }

    pub(super) fn vm_release(&mut self, base: DevicePtr) -> Result<(), BackendError> {
        let Some(&len) = self.vm.reserved.get(&base.addr()) else {
            return Err(invalid(
                "vm_release",
                format!("{base} is not a reserved range"),
            ));
        };
        if self
            .vm
            .mappings
            .range(base.addr()..base.addr() + len)
            .next()
            .is_some()
        {
            return Err(invalid(
                "vm_release",
                format!("{base} still has mapped pages"),
            ));
        }
        self.vm.reserved.remove(&base.addr());
        Ok(())
    }

    pub(super) fn vm_create_physical(
        &mut self,
        bytes: u64,
    ) -> Result<PhysicalHandle, BackendError> {
        aligned("vm_create_physical", "size", bytes)?;
        self.malloc_calls += 1;
        if self.fail_at_call == Some(self.malloc_calls) {
            self.fail_at_call = None;
            self.counters.failed_mallocs += 1;
            return Err(BackendError::Injected {
                backend: NAME.to_owned(),
                what: format!("physical allocation #{}", self.malloc_calls),
            });
        }
        if self.used.saturating_add(bytes) > self.capacity {
            self.counters.failed_mallocs += 1;
            return Err(BackendError::OutOfMemory {
                backend: NAME.to_owned(),
                requested: bytes,
                detail: format!("{} of {} bytes in use", self.used, self.capacity),
            });
        }
        self.vm.next_handle += 1;
        let id = self.vm.next_handle;
        self.vm.physical.insert(id, (bytes, None));
        self.used += bytes;
        Ok(PhysicalHandle(id))
    }

    pub(super) fn vm_release_physical(&mut self, h: PhysicalHandle) -> Result<(), BackendError> {
        match self.vm.physical.get(&h.0) {
            None => Err(invalid("vm_release_physical", format!("{h:?} is not live"))),
            Some((_, Some(at))) => Err(invalid(
                "vm_release_physical",
                format!("{h:?} is still mapped at {at:#x}"),
            )),
            Some(&(len, None)) => {
                self.vm.physical.remove(&h.0);
                self.used -= len;
                Ok(())
            }
        }
    }

    pub(super) fn vm_map(&mut self, at: DevicePtr, h: PhysicalHandle) -> Result<(), BackendError> {
        let at = at.addr();
        aligned("vm_map", "address", at)?;
        let len = match self.vm.physical.get(&h.0) {
            None => return Err(invalid("vm_map", format!("{h:?} is not live"))),
            Some((_, Some(other))) => {
                return Err(invalid(
                    "vm_map",
                    format!("{h:?} is already mapped at {other:#x}"),
                ));
            }
            Some(&(len, None)) => len,
        };
        let end = at.saturating_add(len);
        let inside = self
            .vm
            .reserved
            .range(..=at)
            .next_back()
            .is_some_and(|(&b, &l)| end <= b + l);
        if !inside {
            return Err(invalid(
                "vm_map",
                format!("[{at:#x}, {end:#x}) is not inside one reserved range"),
            ));
        }
        let overlaps = self
            .vm
            .mappings
            .range(..end)
            .next_back()
            .is_some_and(|(&b, &(l, _))| b + l > at);
        if overlaps {
            return Err(invalid(
                "vm_map",
                format!("[{at:#x}, {end:#x}) overlaps a mapping"),
            ));
        }
        self.vm.mappings.insert(at, (len, h.0));
        if let Some(p) = self.vm.physical.get_mut(&h.0) {
            p.1 = Some(at);
        }
        self.vm.maps += 1;
        Ok(())
    }

    pub(super) fn vm_unmap(&mut self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        self.vm.unmap_calls += 1;
        if self.vm.fail_unmap_at == Some(self.vm.unmap_calls) {
            self.vm.fail_unmap_at = None;
            return Err(BackendError::Injected {
                backend: NAME.to_owned(),
                what: format!("vm_unmap #{} at {at}", self.vm.unmap_calls),
            });
        }
        let id = match self.vm.mappings.get(&at.addr()) {
            Some(&(len, id)) if len == bytes => id,
            _ => {
                return Err(invalid(
                    "vm_unmap",
                    format!("no mapping of exactly {bytes} bytes starts at {at}"),
                ));
            }
        };
        self.vm.mappings.remove(&at.addr());
        if let Some(p) = self.vm.physical.get_mut(&id) {
            p.1 = None;
        }
        self.vm.unmaps += 1;
        Ok(())
    }
}
