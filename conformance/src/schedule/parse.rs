//! JSON -> [`Schedule`], with errors that name the file, the phase and the op index.
//!
//! Parsing goes through `serde_json::Value` in two stages so that an error inside an op can
//! be attributed to its phase and index (serde alone only knows line and column).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::echo::clip;
use super::{FORMAT, MAX_NAME_BYTES, MAX_SCHEDULE_NAME_BYTES, Op, OpKind, Phase, Schedule};

/// Largest schedule file read (64 MiB): a schedule at the size limits of the validator
/// is far smaller, and the parsed document takes several times its size in memory, so a
/// larger input (`/dev/zero`, a log given by mistake) is refused at this cap instead of
/// filling the machine.
pub const MAX_SCHEDULE_FILE_BYTES: u64 = 64 << 20;

/// Reads the text of a schedule file, at most [`MAX_SCHEDULE_FILE_BYTES`]: a file (or an
/// endless stream) that holds more is refused once the cap is passed, without reading
/// the rest.
pub(super) fn read_bounded(path: &std::path::Path) -> Result<String, ParseErrorKind> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| ParseErrorKind::Io(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_SCHEDULE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ParseErrorKind::Io(e.to_string()))?;
    if bytes.len() as u64 > MAX_SCHEDULE_FILE_BYTES {
        return Err(ParseErrorKind::FileTooLarge {
            limit: MAX_SCHEDULE_FILE_BYTES,
        });
    }
    String::from_utf8(bytes)
        .map_err(|_| ParseErrorKind::Io("stream did not contain valid UTF-8".to_owned()))
}

/// Why a schedule could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    /// The file could not be read.
    #[error("cannot read file: {0}")]
    Io(String),
    /// The file holds more than [`MAX_SCHEDULE_FILE_BYTES`] (read up to the cap, then
    /// refused).
    #[error(
        "the file holds more than {limit} bytes (64 MiB), the limit of a schedule file; \
         schedules at the validator's largest sizes are far smaller"
    )]
    FileTooLarge {
        /// The limit, [`MAX_SCHEDULE_FILE_BYTES`].
        limit: u64,
    },
    /// The text is not JSON.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// The top level is not a JSON object.
    #[error("the schedule is not a JSON object")]
    NotAnObject,
    /// `format` is missing or not `memreuse.schedule/1`.
    #[error("wrong format {0:?}: expected \"memreuse.schedule/1\"")]
    WrongFormat(String),
    /// An op whose `"op"` is not one of the known ops.
    #[error("unknown op {0:?}")]
    UnknownOp(String),
    /// A field that the format does not define.
    #[error("unknown field {0:?}")]
    UnknownField(String),
    /// A required field is absent.
    #[error("missing field {0:?}")]
    MissingField(String),
    /// A field has the wrong type or an out-of-range value.
    #[error("invalid value: {0}")]
    InvalidValue(String),
    /// A JSON object has the same key twice (rejected: JSON leaves it undefined).
    #[error("{0}: every key may appear once per object")]
    DuplicateKey(String),
    /// A name longer than its limit ([`MAX_SCHEDULE_NAME_BYTES`] for the schedule's
    /// `name`, [`MAX_NAME_BYTES`] for the others).
    #[error("{what} {value:?} is {len} bytes long; at most {max} bytes are accepted")]
    NameTooLong {
        /// Which name (`name`, `group`, `stream`, or the op field).
        what: String,
        /// The name, cut to [`MAX_ECHO_CHARS`](super::MAX_ECHO_CHARS) characters.
        value: String,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// Fails on a name longer than its limit.
fn check_name(what: &str, name: &str) -> Result<(), ParseErrorKind> {
    let max = if what == "name" {
        MAX_SCHEDULE_NAME_BYTES
    } else {
        MAX_NAME_BYTES
    };
    if name.len() > max {
        return Err(ParseErrorKind::NameTooLong {
            what: what.to_owned(),
            value: clip(name),
            len: name.len(),
            max,
        });
    }
    Ok(())
}

/// Every string of an op is a name (or `op`/`reduce`, which are short): checks them all,
/// batch members included.
fn check_op_names(field: &str, value: &Value) -> Result<(), ParseErrorKind> {
    match value {
        Value::String(s) => check_name(field, s),
        Value::Array(items) => items.iter().try_for_each(|v| check_op_names(field, v)),
        Value::Object(map) => map.iter().try_for_each(|(k, v)| check_op_names(k, v)),
        _ => Ok(()),
    }
}

/// A parse failure: the file, where in it (when known), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The file (or the name given to [`Schedule::from_json_str`]).
    pub file: String,
    /// The phase of the op at fault, when the error is inside an op.
    pub phase: Option<Phase>,
    /// The index of the op at fault inside its phase.
    pub op_index: Option<usize>,
    /// The reason.
    pub kind: ParseErrorKind,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(phase) = self.phase {
            write!(f, ": {phase}")?;
        }
        if let Some(i) = self.op_index {
            write!(f, " op {i}")?;
        }
        write!(f, ": {}", self.kind)
    }
}

impl std::error::Error for ParseError {}

fn default_iterations() -> u32 {
    1
}

/// The top level with ops still as raw values (see the module doc).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSchedule {
    #[allow(dead_code)] // checked before this struct is built; kept so it is a known field
    format: String,
    name: String,
    #[serde(default)]
    description: Option<String>,
    world_size: usize,
    #[serde(default)]
    groups: BTreeMap<String, Vec<Vec<usize>>>,
    #[serde(default)]
    streams: Vec<String>,
    #[serde(default)]
    device_memory: Option<u64>,
    #[serde(default = "default_iterations")]
    iterations: u32,
    #[serde(default)]
    setup: Vec<Value>,
    body: Vec<Value>,
    #[serde(default)]
    teardown: Vec<Value>,
    #[serde(default)]
    expect_out_of_memory: Vec<super::DeclaredOom>,
}

const OP_NAMES: [&str; 23] = [
    "alloc",
    "upload",
    "zero",
    "copy",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "send",
    "recv",
    "batch",
    "barrier",
    "wait",
    "drop_work",
    "free",
    "set_stream",
    "wait_stream",
    "record_stream",
    "sync",
    "check",
    "empty_cache",
    "delay",
];

/// Maps serde's message to a typed kind. `serde_json` reports unknown and missing fields only
/// as text, so the message prefix is the one stable signal available.
fn classify(err: &serde_json::Error) -> ParseErrorKind {
    let msg = err.to_string();
    let quoted = || clip(msg.split('`').nth(1).unwrap_or_default());
    if msg.starts_with("unknown field") {
        ParseErrorKind::UnknownField(quoted())
    } else if msg.starts_with("unknown variant") && msg.contains("expected `send` or `recv`") {
        // Inside a batch, only the member's "op" has these two variants.
        ParseErrorKind::UnknownOp(quoted())
    } else if msg.starts_with("missing field") {
        ParseErrorKind::MissingField(quoted())
    } else if msg.starts_with("unknown dtype")
        || msg.starts_with("unknown reduce")
        || msg.starts_with("reduce \"avg\"")
    {
        // Built by the op model with the given name already clipped: kept whole so that
        // the list of valid names survives.
        ParseErrorKind::InvalidValue(msg)
    } else {
        ParseErrorKind::InvalidValue(clip(&msg))
    }
}

fn parse_op(value: Value) -> Result<Op, ParseErrorKind> {
    let Value::Object(mut map) = value else {
        return Err(ParseErrorKind::InvalidValue(
            "an op must be a JSON object".to_owned(),
        ));
    };
    match map.get("op") {
        None => return Err(ParseErrorKind::MissingField("op".to_owned())),
        Some(Value::String(name)) if !OP_NAMES.contains(&name.as_str()) => {
            return Err(ParseErrorKind::UnknownOp(clip(name)));
        }
        Some(Value::String(_)) => {}
        Some(other) => {
            return Err(ParseErrorKind::InvalidValue(format!(
                "\"op\" must be a string, not {}",
                clip(&other.to_string())
            )));
        }
    }
    for (field, v) in &map {
        check_op_names(field, v)?;
    }
    let ranks = match map.remove("ranks") {
        None => None,
        Some(v) => Some(Vec::<usize>::deserialize(v).map_err(|e| classify(&e))?),
    };
    let kind = OpKind::deserialize(Value::Object(map)).map_err(|e| classify(&e))?;
    Ok(Op { kind, ranks })
}

pub(super) fn parse(file: &str, text: &str) -> Result<Schedule, ParseError> {
    let err = |phase, op_index, kind| ParseError {
        file: file.to_owned(),
        phase,
        op_index,
        kind,
    };
    let value: Value = super::strict_json::from_str(text).map_err(|e| {
        let msg = e.to_string();
        let kind = if msg.starts_with(super::strict_json::DUPLICATE_KEY) {
            ParseErrorKind::DuplicateKey(msg)
        } else {
            ParseErrorKind::NotJson(clip(&msg))
        };
        err(None, None, kind)
    })?;
    let Some(obj) = value.as_object() else {
        return Err(err(None, None, ParseErrorKind::NotAnObject));
    };
    // The format is checked first: a file of another format gets that diagnosis rather than
    // a list of unknown fields.
    match obj.get("format") {
        Some(Value::String(f)) if f == FORMAT => {}
        Some(Value::String(f)) => {
            return Err(err(None, None, ParseErrorKind::WrongFormat(clip(f))));
        }
        Some(other) => {
            return Err(err(
                None,
                None,
                ParseErrorKind::WrongFormat(clip(&other.to_string())),
            ));
        }
        None => {
            return Err(err(
                None,
                None,
                ParseErrorKind::MissingField("format".to_owned()),
            ));
        }
    }
    let raw = RawSchedule::deserialize(value).map_err(|e| err(None, None, classify(&e)))?;
    let names = std::iter::once(("name", &raw.name))
        .chain(raw.groups.keys().map(|g| ("group", g)))
        .chain(raw.streams.iter().map(|s| ("stream", s)));
    for (what, name) in names {
        check_name(what, name).map_err(|k| err(None, None, k))?;
    }
    let mut phases = [raw.setup, raw.body, raw.teardown]
        .into_iter()
        .zip(Phase::ALL)
        .map(|(ops, phase)| {
            ops.into_iter()
                .enumerate()
                .map(|(i, v)| parse_op(v).map_err(|k| err(Some(phase), Some(i), k)))
                .collect::<Result<Vec<Op>, ParseError>>()
        });
    let mut next = || phases.next().unwrap_or_else(|| Ok(Vec::new()));
    let (setup, body, teardown) = (next()?, next()?, next()?);
    for declared in &raw.expect_out_of_memory {
        declared.check().map_err(|e| {
            err(
                None,
                None,
                ParseErrorKind::InvalidValue(format!(
                    "expect_out_of_memory alloc_conf `{}`: {}",
                    clip(&declared.alloc_conf),
                    crate::alloc_conf::detail(&e)
                )),
            )
        })?;
    }
    Ok(Schedule {
        name: raw.name,
        description: raw.description,
        world_size: raw.world_size,
        groups: raw.groups,
        streams: raw.streams,
        device_memory: raw.device_memory,
        iterations: raw.iterations,
        setup,
        body,
        teardown,
        expect_out_of_memory: raw.expect_out_of_memory,
    })
}
