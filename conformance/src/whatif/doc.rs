//! The decoded part of a snapshot: values in one arena, referred to by index, so that a
//! pickle's shared objects (its memo) are shared here too instead of copied, nothing is
//! dropped or walked recursively, and only the fields a snapshot's reader uses are kept.

use super::limits::{Hit, ImportLimits, Limit};

/// Dict keys whose values are kept; every other key's value is skipped while decoding
/// (stack frames above all, most of a real snapshot's bytes).
pub(super) const USED_KEYS: &[&str] = &[
    "action",
    "addr",
    "address",
    "blocks",
    "device",
    "device_total",
    "device_traces",
    "requested_size",
    "segments",
    "size",
    "state",
    "stream",
];

/// Strings kept even inside a skipped value: a pickle may refer back to a string first
/// written there (its memo), and these are the ones a snapshot's reader compares.
const KEPT_STRINGS: &[&str] = &[
    "active_allocated",
    "active_pending_free",
    "alloc",
    "free_completed",
    "free_requested",
    "inactive",
    "oom",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
];

/// Whether `key` is one of [`USED_KEYS`].
pub(super) fn is_used_key(key: &str) -> bool {
    USED_KEYS.contains(&key)
}

/// Whether a string met inside a skipped value must still be kept.
pub(super) fn is_kept_string(s: &[u8]) -> bool {
    s.len() <= 24
        && (USED_KEYS.iter().any(|k| k.as_bytes() == s)
            || KEPT_STRINGS.iter().any(|k| k.as_bytes() == s))
}

/// A value: a non-negative integer inline, else an arena index (top bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ref(u64);

const NODE_BIT: u64 = 1 << 63;

/// The arena index of values that were skipped (never materialised).
pub(super) const SKIPPED: Ref = Ref(NODE_BIT);

/// An arena value.
#[derive(Debug)]
pub(super) enum Val {
    /// A negative integer (non-negative ones are inline in [`Ref`]).
    Int(i64),
    /// A string.
    Str(Box<str>),
    /// A list or tuple.
    List(Vec<Ref>),
    /// A dict's pairs with a string key among [`USED_KEYS`], in insertion order.
    Dict(Vec<(Ref, Ref)>),
    /// Anything else, named (None, a float, bytes, a Python global or call, ...).
    Other(&'static str),
}

/// What a [`Ref`] refers to.
#[derive(Debug, Clone, Copy)]
pub(super) enum View<'a> {
    /// An integer.
    Int(i64),
    /// A string.
    Str(&'a str),
    /// A list or tuple, and its arena index.
    List(&'a [Ref], usize),
    /// A dict, and its arena index.
    Dict(&'a [(Ref, Ref)], usize),
    /// Anything else, named.
    Other(&'static str),
}

impl View<'_> {
    /// What it is, in words.
    pub fn kind(&self) -> &'static str {
        match self {
            View::Int(_) => "an integer",
            View::Str(_) => "a string",
            View::List(..) => "a list",
            View::Dict(..) => "a dict",
            View::Other(what) => what,
        }
    }
}

/// The arena, with the bound on what it holds.
#[derive(Debug)]
pub(super) struct Doc {
    nodes: Vec<Val>,
    elements: u64,
    max_elements: u64,
    /// The top-level value, once decoded.
    pub root: Ref,
}

impl Doc {
    /// An empty arena bounded by `limits`.
    pub fn new(limits: &ImportLimits) -> Doc {
        Doc {
            nodes: vec![Val::Other("a field that is not read (skipped)")],
            elements: 0,
            max_elements: limits.elements,
            root: SKIPPED,
        }
    }

    /// Counts one memo entry (kept until the end of the pickle).
    pub fn count_memo(&mut self) -> Result<(), Hit> {
        self.count()
    }

    /// Counts one item of a container built at once (a tuple, `LIST`).
    pub fn count_item(&mut self) -> Result<(), Hit> {
        self.count()
    }

    fn count(&mut self) -> Result<(), Hit> {
        self.elements += 1;
        if self.elements > self.max_elements {
            return Err(Hit {
                limit: Limit::Elements,
                max: self.max_elements,
            });
        }
        Ok(())
    }

    /// Adds `val`.
    pub fn push(&mut self, val: Val) -> Result<Ref, Hit> {
        self.count()?;
        let index = self.nodes.len() as u64;
        self.nodes.push(val);
        Ok(Ref(NODE_BIT | index))
    }

    /// An integer (inline when non-negative).
    pub fn int(&mut self, i: i64) -> Result<Ref, Hit> {
        match u64::try_from(i) {
            Ok(u) => Ok(Ref(u)),
            Err(_) => self.push(Val::Int(i)),
        }
    }

    /// The arena index of `r`, if it is not an inline integer.
    fn index(r: Ref) -> Option<usize> {
        (r.0 & NODE_BIT != 0).then_some((r.0 & !NODE_BIT) as usize)
    }

    /// Appends `item` to the list `list`; false when `list` is not a list (skipped values
    /// take nothing).
    pub fn append(&mut self, list: Ref, item: Ref) -> Result<bool, Hit> {
        if list == SKIPPED {
            return Ok(true);
        }
        match Doc::index(list).and_then(|i| self.nodes.get(i)) {
            Some(Val::List(_)) => {}
            // An inert placeholder (a Python object never constructed) takes nothing.
            Some(Val::Other(_)) => return Ok(true),
            _ => return Ok(false),
        }
        self.count()?;
        if let Some(Val::List(l)) = Doc::index(list).and_then(|i| self.nodes.get_mut(i)) {
            l.push(item);
        }
        Ok(true)
    }

    /// Sets `key` to `value` in the dict `dict` when `key` is a used key; false when
    /// `dict` is not a dict.
    pub fn set_item(&mut self, dict: Ref, key: Ref, value: Ref) -> Result<bool, Hit> {
        if dict == SKIPPED {
            return Ok(true);
        }
        match Doc::index(dict).and_then(|i| self.nodes.get(i)) {
            Some(Val::Dict(_)) => {}
            Some(Val::Other(_)) => return Ok(true),
            _ => return Ok(false),
        }
        if !matches!(self.view(key), View::Str(k) if is_used_key(k)) {
            return Ok(true);
        }
        self.count()?;
        if let Some(Val::Dict(d)) = Doc::index(dict).and_then(|i| self.nodes.get_mut(i)) {
            d.push((key, value));
        }
        Ok(true)
    }

    /// Number of arena values (for a visited set).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// What `r` refers to.
    pub fn view(&self, r: Ref) -> View<'_> {
        let Some(i) = Doc::index(r) else {
            // Inline integers are below 2^63.
            return View::Int(r.0 as i64);
        };
        match self.nodes.get(i) {
            Some(Val::Int(v)) => View::Int(*v),
            Some(Val::Str(s)) => View::Str(s),
            Some(Val::List(l)) => View::List(l, i),
            Some(Val::Dict(d)) => View::Dict(d, i),
            Some(Val::Other(what)) => View::Other(what),
            None => View::Other("a dangling reference"),
        }
    }

    /// The value of `key` in `pairs` (the last one written, as Python's dict keeps).
    pub fn get(&self, pairs: &[(Ref, Ref)], key: &str) -> Option<Ref> {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| matches!(self.view(*k), View::Str(s) if s == key))
            .map(|&(_, v)| v)
    }
}
