//! [`VmLedger`]: what one device reserved, created and mapped, and the misuse the
//! [module rules](super) say a port must refuse, kept apart from any driver so that the
//! rules are written and tested once. A backend calls each `check_*` before its driver
//! call (a refusal is [`BackendError::InvalidArgument`] naming the rule, and changes
//! nothing) and the matching `record_*` only after the driver succeeded, so a refused or
//! failed call leaves the ledger as it was.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};

use crate::error::BackendError;
use crate::ids::DevicePtr;

use super::PhysicalHandle;

/// One physical handle: its size and where it is mapped.
#[derive(Clone, Copy, Debug)]
struct Physical {
    bytes: u64,
    mapped_at: Option<u64>,
}

/// Reserved ranges, physical handles and mappings of one device, with the checks of the
/// [`crate::virtual_memory`] rules. Addresses and handles are the driver's values; the
/// ledger never touches memory.
#[derive(Debug)]
pub struct VmLedger {
    /// The backend named in every refusal.
    backend: &'static str,
    /// Base -> bytes.
    reserved: BTreeMap<u64, u64>,
    /// Handle -> its size and where it is mapped.
    handles: HashMap<u64, Physical>,
    /// Address -> (bytes, handle).
    mappings: BTreeMap<u64, (u64, u64)>,
}

/// What [`VmLedger::take_all`] hands over, in the order it must be released: mappings
/// first, then handles, then ranges.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct VmHeld {
    /// (address, bytes) of each mapping.
    pub mappings: Vec<(DevicePtr, u64)>,
    /// Each physical handle.
    pub handles: Vec<PhysicalHandle>,
    /// (base, bytes) of each reserved range.
    pub ranges: Vec<(DevicePtr, u64)>,
}

impl VmLedger {
    /// An empty ledger whose refusals name `backend`.
    pub fn new(backend: &'static str) -> VmLedger {
        VmLedger {
            backend,
            reserved: BTreeMap::new(),
            handles: HashMap::new(),
            mappings: BTreeMap::new(),
        }
    }

    fn invalid(&self, call: &'static str, reason: String) -> BackendError {
        BackendError::InvalidArgument {
            backend: self.backend.to_owned(),
            call,
            reason,
        }
    }

    /// Records a range of `bytes` the driver reserved at `base`.
    pub fn record_reserve(&mut self, base: DevicePtr, bytes: u64) {
        self.reserved.insert(base.addr(), bytes);
    }

    /// The size of the reserved range at `base`, if `base` is a range's base and nothing
    /// in the range is mapped.
    pub fn check_release(&self, base: DevicePtr) -> Result<u64, BackendError> {
        let Some(&len) = self.reserved.get(&base.addr()) else {
            return Err(self.invalid(
                "vm_release",
                format!("{base} is not the base of a range vm_reserve returned on this device"),
            ));
        };
        if let Some((&at, _)) = self.mappings.range(base.addr()..base.addr() + len).next() {
            return Err(self.invalid(
                "vm_release",
                format!("range {base} still has a mapping at {at:#x}: vm_unmap it first"),
            ));
        }
        Ok(len)
    }

    /// Forgets a range the driver released.
    pub fn record_release(&mut self, base: DevicePtr) {
        self.reserved.remove(&base.addr());
    }

    /// Records a handle of `bytes` the driver created.
    pub fn record_create(&mut self, handle: PhysicalHandle, bytes: u64) {
        self.handles.insert(
            handle.0,
            Physical {
                bytes,
                mapped_at: None,
            },
        );
    }

    /// `handle` is live and unmapped.
    pub fn check_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError> {
        match self.handles.get(&handle.0) {
            None => Err(self.invalid(
                "vm_release_physical",
                format!("{handle:?} is not a live handle of this device"),
            )),
            Some(Physical {
                mapped_at: Some(at),
                ..
            }) => Err(self.invalid(
                "vm_release_physical",
                format!("{handle:?} is still mapped at {at:#x}: vm_unmap it first"),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Forgets a handle the driver released.
    pub fn record_release_physical(&mut self, handle: PhysicalHandle) {
        self.handles.remove(&handle.0);
    }

    /// The handle's size, if it is live and unmapped and its whole size fits at `at`
    /// inside one reserved range over no mapping. `at` being aligned is the caller's
    /// check ([`super::check_aligned`]), as only it knows the granularity.
    pub fn check_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<u64, BackendError> {
        let bytes = match self.handles.get(&handle.0) {
            None => {
                return Err(self.invalid(
                    "vm_map",
                    format!("{handle:?} is not a live handle of this device"),
                ));
            }
            Some(Physical {
                mapped_at: Some(other),
                ..
            }) => {
                return Err(self.invalid(
                    "vm_map",
                    format!("{handle:?} is already mapped at {other:#x}"),
                ));
            }
            Some(p) => p.bytes,
        };
        let end = at
            .addr()
            .checked_add(bytes)
            .ok_or_else(|| self.invalid("vm_map", format!("{at}+{bytes} overflows")))?;
        let inside = self
            .reserved
            .range(..=at.addr())
            .next_back()
            .is_some_and(|(&base, &len)| end <= base + len);
        if !inside {
            return Err(self.invalid(
                "vm_map",
                format!("{bytes} bytes at {at} are not inside one range vm_reserve returned"),
            ));
        }
        let below = self.mappings.range(..at.addr()).next_back();
        if below.is_some_and(|(&m, &(len, _))| m + len > at.addr())
            || self.mappings.range(at.addr()..end).next().is_some()
        {
            return Err(self.invalid(
                "vm_map",
                format!("{bytes} bytes at {at} overlap a mapping: vm_unmap it first"),
            ));
        }
        Ok(bytes)
    }

    /// Records a mapping of `bytes` (the handle's size, from [`VmLedger::check_map`]) the
    /// driver made at `at`.
    pub fn record_map(&mut self, at: DevicePtr, handle: PhysicalHandle, bytes: u64) {
        self.mappings.insert(at.addr(), (bytes, handle.0));
        if let Some(p) = self.handles.get_mut(&handle.0) {
            p.mapped_at = Some(at.addr());
        }
    }

    /// `at` is exactly one mapping of `bytes`.
    pub fn check_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        match self.mappings.get(&at.addr()) {
            Some(&(len, _)) if len == bytes => Ok(()),
            Some(&(len, _)) => Err(self.invalid(
                "vm_unmap",
                format!("the mapping at {at} is {len} bytes, not {bytes}: unmap whole mappings"),
            )),
            None => Err(self.invalid(
                "vm_unmap",
                format!("{at} is not the address of a vm_map on this device"),
            )),
        }
    }

    /// Forgets a mapping the driver removed; its handle is unmapped again.
    pub fn record_unmap(&mut self, at: DevicePtr) {
        if let Some((_, handle)) = self.mappings.remove(&at.addr()) {
            if let Some(p) = self.handles.get_mut(&handle) {
                p.mapped_at = None;
            }
        }
    }

    /// True when every byte of `[start, end)` is mapped, possibly by several adjacent
    /// mappings (one access may span them, as on the device), never across a hole. An
    /// empty range is covered where a mapping holds its address or ends there (as an
    /// access check treats an allocation), not anywhere at all.
    pub fn covers(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return self
                .mappings
                .range(..=start)
                .next_back()
                .is_some_and(|(&m, &(len, _))| start <= m + len);
        }
        let mut at = start;
        while at < end {
            match self.mappings.range(..=at).next_back() {
                Some((&m, &(len, _))) if m + len > at => at = m + len,
                _ => return false,
            }
        }
        true
    }

    /// True when nothing is reserved, created or mapped.
    pub fn is_empty(&self) -> bool {
        self.reserved.is_empty() && self.handles.is_empty() && self.mappings.is_empty()
    }

    /// (address, bytes) of each mapping, lowest address first.
    pub fn mappings(&self) -> impl Iterator<Item = (DevicePtr, u64)> + '_ {
        self.mappings
            .iter()
            .map(|(&at, &(len, _))| (DevicePtr(at), len))
    }

    /// Each live physical handle, in no particular order.
    pub fn handles(&self) -> impl Iterator<Item = PhysicalHandle> + '_ {
        self.handles.keys().map(|&h| PhysicalHandle(h))
    }

    /// (base, bytes) of each reserved range, lowest base first.
    pub fn ranges(&self) -> impl Iterator<Item = (DevicePtr, u64)> + '_ {
        self.reserved
            .iter()
            .map(|(&base, &len)| (DevicePtr(base), len))
    }

    /// Everything still held, for a teardown that releases it without the checks (the
    /// device is idle); the ledger is left empty.
    pub fn take_all(&mut self) -> VmHeld {
        let held = VmHeld {
            mappings: self.mappings().collect(),
            handles: self.handles().collect(),
            ranges: self.ranges().collect(),
        };
        self.mappings.clear();
        self.handles.clear();
        self.reserved.clear();
        held
    }
}

#[cfg(test)]
mod tests;
