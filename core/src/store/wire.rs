//! The store's wire format: length-prefixed binary frames over one TCP connection.
//!
//! Request: `op: u8`, then
//! - `SET`: key, value;
//! - `GET`: key, `timeout_ms: u64`;
//! - `WAIT`: `n: u32`, `n` keys, `timeout_ms: u64`.
//!
//! Response: `status: u8`, then for `OK` to a `GET` the value, for `TOO_LARGE` the declared
//! length and the limit (`u64` each), for the other errors a message (`u32` length + UTF-8). A key is `u32` length + UTF-8 bytes; a value is `u64`
//! length + bytes. Integers are little-endian. Every length is checked against a limit
//! before anything is allocated, and a frame that ends before its declared length is an
//! error, never a short value.

use std::io::{self, Read, Write};

pub(crate) const OP_SET: u8 = 1;
pub(crate) const OP_GET: u8 = 2;
pub(crate) const OP_WAIT: u8 = 3;

pub(crate) const ST_OK: u8 = 0;
pub(crate) const ST_TIMEOUT: u8 = 1;
pub(crate) const ST_TOO_LARGE: u8 = 2;
pub(crate) const ST_BAD_REQUEST: u8 = 3;

/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// Most keys in one `wait`.
pub const MAX_WAIT_KEYS: usize = 1024;
/// Longest error message a peer may send.
const MAX_MESSAGE_LEN: u32 = 64 * 1024;

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum WireError {
    Io(io::Error),
    /// A declared length above the limit.
    TooLarge {
        declared: u64,
        max: u64,
    },
    /// The peer closed the connection before the declared length arrived.
    Truncated {
        declared: u64,
        received: u64,
    },
    /// Malformed content (bad UTF-8, unknown op or status, too many keys).
    Malformed(String),
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        WireError::Io(e)
    }
}

pub(crate) fn read_u8(r: &mut impl Read) -> Result<u8, WireError> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

pub(crate) fn read_u32(r: &mut impl Read) -> Result<u32, WireError> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

pub(crate) fn read_u64(r: &mut impl Read) -> Result<u64, WireError> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Reads exactly `declared` bytes, or reports how many arrived before the peer closed.
fn read_exactly(r: &mut impl Read, declared: u64) -> Result<Vec<u8>, WireError> {
    let mut buf = Vec::with_capacity(declared as usize);
    r.take(declared).read_to_end(&mut buf)?;
    let received = buf.len() as u64;
    if received != declared {
        return Err(WireError::Truncated { declared, received });
    }
    Ok(buf)
}

pub(crate) fn read_key(r: &mut impl Read) -> Result<String, WireError> {
    let len = read_u32(r)?;
    if len as usize > MAX_KEY_LEN {
        return Err(WireError::TooLarge {
            declared: u64::from(len),
            max: MAX_KEY_LEN as u64,
        });
    }
    let bytes = read_exactly(r, u64::from(len))?;
    String::from_utf8(bytes).map_err(|_| WireError::Malformed("key is not UTF-8".to_owned()))
}

pub(crate) fn read_value(r: &mut impl Read, max: u64) -> Result<Vec<u8>, WireError> {
    let declared = read_u64(r)?;
    if declared > max {
        return Err(WireError::TooLarge { declared, max });
    }
    read_exactly(r, declared)
}

pub(crate) fn read_message(r: &mut impl Read) -> Result<String, WireError> {
    let len = read_u32(r)?;
    if len > MAX_MESSAGE_LEN {
        return Err(WireError::TooLarge {
            declared: u64::from(len),
            max: u64::from(MAX_MESSAGE_LEN),
        });
    }
    let bytes = read_exactly(r, u64::from(len))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

pub(crate) fn put_key(out: &mut Vec<u8>, key: &str) {
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
}

pub(crate) fn put_value(out: &mut Vec<u8>, value: &[u8]) {
    out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    out.extend_from_slice(value);
}

pub(crate) fn put_message(out: &mut Vec<u8>, message: &str) {
    let bytes = &message.as_bytes()[..message.len().min(MAX_MESSAGE_LEN as usize)];
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Writes one whole frame.
pub(crate) fn send(w: &mut impl Write, frame: &[u8]) -> io::Result<()> {
    w.write_all(frame)?;
    w.flush()
}
