//! Handle tables: a vendor's opaque handles (`aclrtStream`, `CUstream`, `ncclComm_t`, ...)
//! are keys of a table, not pointers, so an unknown, destroyed or forged handle is a lookup
//! that fails (an error code), never undefined behaviour.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// The distance between two keys: handles look like aligned pointers.
pub const HANDLE_STRIDE: usize = 0x40;

/// A table of handles of type `H` keyed by pointer-looking integers.
pub struct HandleTable<H> {
    map: Mutex<Option<HashMap<usize, H>>>,
    next: AtomicUsize,
}

impl<H: Clone> HandleTable<H> {
    /// An empty table whose keys start at `first` (a face picks a base no real pointer or
    /// special value it documents can be, e.g. never CUDA's stream 0, 1 or 2).
    #[must_use]
    pub const fn new(first: usize) -> Self {
        Self {
            map: Mutex::new(None),
            next: AtomicUsize::new(first),
        }
    }

    /// A fresh key from the table's sequence (for objects kept in another table, such as
    /// physical memory handles, so no two handles of a library are ever equal).
    pub fn next_key(&self) -> usize {
        self.next.fetch_add(HANDLE_STRIDE, Ordering::Relaxed)
    }

    /// Stores `h` under a fresh key and returns the key.
    pub fn insert(&self, h: H) -> usize {
        let key = self.next_key();
        self.map
            .lock()
            .get_or_insert_with(HashMap::new)
            .insert(key, h);
        key
    }

    /// The handle under `key`.
    pub fn get(&self, key: usize) -> Option<H> {
        self.map.lock().as_ref().and_then(|m| m.get(&key).cloned())
    }

    /// Removes and returns the handle under `key`.
    pub fn remove(&self, key: usize) -> Option<H> {
        self.map.lock().as_mut().and_then(|m| m.remove(&key))
    }

    /// Forgets every handle (a fresh cluster was configured); keys are never reused.
    pub fn clear(&self) {
        self.map.lock().take();
    }

    /// Keeps only the handles `keep` accepts.
    pub fn retain(&self, mut keep: impl FnMut(&H) -> bool) {
        if let Some(m) = self.map.lock().as_mut() {
            m.retain(|_, h| keep(h));
        }
    }

    /// What `pick` takes from each handle.
    pub fn collect<T>(&self, pick: impl FnMut(&H) -> Option<T>) -> Vec<T> {
        self.map
            .lock()
            .as_ref()
            .map_or_else(Vec::new, |m| m.values().filter_map(pick).collect())
    }

    /// How many handles `which` accepts.
    pub fn count(&self, which: impl Fn(&H) -> bool) -> u64 {
        self.map
            .lock()
            .as_ref()
            .map_or(0, |m| m.values().filter(|h| which(h)).count() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_removed_handles_are_unknown() {
        let t: HandleTable<u8> = HandleTable::new(0x1000);
        let a = t.insert(1);
        let b = t.insert(2);
        assert_eq!(b - a, HANDLE_STRIDE);
        assert_eq!(t.get(a), Some(1));
        assert_eq!(t.remove(a), Some(1));
        assert_eq!(t.get(a), None);
        assert_eq!(t.count(|_| true), 1);
        t.clear();
        assert_eq!(t.get(b), None);
        assert!(t.insert(3) > b);
    }
}
