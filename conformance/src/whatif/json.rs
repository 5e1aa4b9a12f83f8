//! Reads a JSON snapshot into a [`Doc`], streaming: only the fields a snapshot's reader uses
//! are kept (the values of other keys, stack frames above all, are parsed and dropped), and
//! every bound of [`ImportLimits`] holds. Nesting is bounded by the JSON parser's own
//! limit (128 levels) as well as [`ImportLimits::depth`].

use std::cell::Cell;
use std::fmt;
use std::io::BufRead;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::doc::{Doc, Ref, Val, is_used_key};
use super::limits::{Fail, Hit, ImportLimits, Limit};

/// Builds one value at nesting `depth`.
struct Seed<'a> {
    doc: &'a mut Doc,
    limits: &'a ImportLimits,
    hit: &'a Cell<Option<Hit>>,
    depth: u64,
}

impl Seed<'_> {
    fn fail<E: de::Error>(&self, limit: Limit) -> E {
        self.hit.set(Some(Hit::new(limit, self.limits)));
        E::custom(format!("the `{}` limit", limit.name()))
    }

    fn push<E: de::Error>(&mut self, val: Val) -> Result<Ref, E> {
        self.doc.push(val).map_err(|h| {
            self.hit.set(Some(h));
            E::custom("the `elements` limit")
        })
    }

    fn child(&mut self) -> Seed<'_> {
        Seed {
            doc: self.doc,
            limits: self.limits,
            hit: self.hit,
            depth: self.depth + 1,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Ref;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Ref, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Ref;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Ref, E> {
        self.visit_i64(i64::from(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ref, E> {
        self.doc.int(v).map_err(|h| {
            self.hit.set(Some(h));
            E::custom("the `elements` limit")
        })
    }

    fn visit_u64<E: de::Error>(mut self, v: u64) -> Result<Ref, E> {
        match i64::try_from(v) {
            Ok(i) => self.visit_i64(i),
            Err(_) => self.push(Val::Other("an integer wider than 63 bits")),
        }
    }

    fn visit_f64<E: de::Error>(mut self, _: f64) -> Result<Ref, E> {
        self.push(Val::Other("a non-integer number"))
    }

    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<Ref, E> {
        if v.len() as u64 > self.limits.string_bytes {
            return Err(self.fail(Limit::StringBytes));
        }
        self.push(Val::Str(v.into()))
    }

    fn visit_unit<E: de::Error>(mut self) -> Result<Ref, E> {
        self.push(Val::Other("null"))
    }

    fn visit_none<E: de::Error>(self) -> Result<Ref, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Ref, A::Error> {
        if self.depth >= self.limits.depth {
            return Err(self.fail(Limit::Depth));
        }
        let mut items = Vec::new();
        while let Some(r) = seq.next_element_seed(self.child())? {
            self.doc.count_item().map_err(|h| {
                self.hit.set(Some(h));
                de::Error::custom("the `elements` limit")
            })?;
            items.push(r);
        }
        self.push(Val::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Ref, A::Error> {
        if self.depth >= self.limits.depth {
            return Err(self.fail(Limit::Depth));
        }
        let dict = self.push(Val::Dict(Vec::new()))?;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if !is_used_key(&key) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let k = self.push(Val::Str(key.as_ref().into()))?;
            let v = map.next_value_seed(self.child())?;
            self.doc.set_item(dict, k, v).map_err(|h| {
                self.hit.set(Some(h));
                de::Error::custom("the `elements` limit")
            })?;
        }
        Ok(dict)
    }
}

/// Reads one JSON value from `input` into a [`Doc`] bounded by `limits`.
pub(super) fn read_json(input: &mut dyn BufRead, limits: &ImportLimits) -> Result<Doc, Fail> {
    let mut doc = Doc::new(limits);
    let hit = Cell::new(None);
    let mut de = serde_json::Deserializer::from_reader(input);
    let seed = Seed {
        doc: &mut doc,
        limits,
        hit: &hit,
        depth: 0,
    };
    let result = seed
        .deserialize(&mut de)
        .and_then(|root| de.end().map(|()| root));
    match result {
        Ok(root) => {
            doc.root = root;
            Ok(doc)
        }
        Err(e) => {
            if let Some(h) = hit.get() {
                return Err(Fail::Limit(h));
            }
            if e.is_io() {
                return Err(Fail::Io(e.into()));
            }
            let message = e.to_string();
            if message.starts_with("recursion limit exceeded") {
                return Err(Fail::Limit(Hit {
                    limit: Limit::Depth,
                    max: 128,
                }));
            }
            Err(Fail::Decode(message))
        }
    }
}
