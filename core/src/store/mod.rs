//! A small TCP key-value store for bootstrapping multi-process jobs (std::net only).
//!
//! Rank 0 hosts it ([`TcpStore::host`]), every rank connects ([`TcpStore::connect`]); rank
//! 0 publishes the NCCL unique id (or HCCL root info) with [`TcpStore::set`] and the others
//! fetch it with [`TcpStore::get_exact`], as `torch.distributed.TCPStore` does. Every call
//! has a timeout, every length on the wire is checked before anything is allocated, and
//! every failure is a typed [`StoreError`]. [`LaunchEnv`] parses torchrun's variables.

mod env;
mod server;
#[cfg(test)]
mod tests;
mod wire;

use std::io::{self, ErrorKind};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use thiserror::Error;

pub use env::{EnvError, LaunchEnv};
pub use server::StoreServer;
pub use wire::{MAX_KEY_LEN, MAX_WAIT_KEYS};

/// Default for [`StoreOptions::max_value_len`]: 16 MiB.
pub const DEFAULT_MAX_VALUE_LEN: u64 = 16 << 20;

/// What went wrong in a store call.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A socket call failed.
    #[error("store {addr}: {during} failed: {source}")]
    Io {
        /// What the store was doing.
        during: &'static str,
        /// The server's address.
        addr: SocketAddr,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// No server accepted a connection within the timeout.
    #[error("store {addr}: could not connect within {millis} ms (last error: {last})")]
    Connect {
        /// The server's address.
        addr: SocketAddr,
        /// How long it tried.
        millis: u64,
        /// The last connection error.
        last: String,
    },
    /// The keys were not all set (or the server did not answer) within the timeout.
    #[error("store {addr}: {op} timed out after {millis} ms waiting for {}", keys.join(", "))]
    Timeout {
        /// The server's address.
        addr: SocketAddr,
        /// `get`, `wait` or `set`.
        op: &'static str,
        /// The keys still missing (all asked keys when the server did not answer).
        keys: Vec<String>,
        /// The timeout.
        millis: u64,
    },
    /// A key the store refuses.
    #[error("store: invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The key (truncated to 80 characters).
        key: String,
        /// Why (empty, longer than `MAX_KEY_LEN` bytes).
        reason: String,
    },
    /// A value longer than the limit (refused before sending, or by the server).
    #[error("store: value of key {key:?} is {len} bytes, above the limit of {max}")]
    ValueTooLarge {
        /// The key.
        key: String,
        /// The value's length (as declared on the wire).
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A value whose length is not the one the caller expects (`get_exact`).
    #[error("store: value of key {key:?} is {actual} bytes, expected exactly {expected}")]
    LengthMismatch {
        /// The key.
        key: String,
        /// The length asked for.
        expected: u64,
        /// The length stored.
        actual: u64,
    },
    /// A frame ended before its declared length (the peer closed the connection).
    #[error("store {addr}: {what} declared {declared} bytes but only {received} arrived")]
    Truncated {
        /// The server's address.
        addr: SocketAddr,
        /// What was being read.
        what: &'static str,
        /// The declared length.
        declared: u64,
        /// Bytes that arrived.
        received: u64,
    },
    /// The peer broke the protocol (unknown status, bad request).
    #[error("store {addr}: protocol error: {reason}")]
    Protocol {
        /// The server's address.
        addr: SocketAddr,
        /// What was wrong.
        reason: String,
    },
}

/// Client-side settings of a [`TcpStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// Default timeout of `connect`, `set` and `get` (`wait` takes its own).
    pub timeout: Duration,
    /// Longest value accepted, in bytes (by the hosted server and by this client).
    pub max_value_len: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            timeout: Duration::from_secs(300),
            max_value_len: DEFAULT_MAX_VALUE_LEN,
        }
    }
}

/// Extra time a client waits for the server's own timeout reply: one second plus a tenth
/// of the timeout.
fn reply_grace(timeout: Duration) -> Duration {
    Duration::from_secs(1) + timeout / 10
}

/// A client of the store, and on the hosting rank also its server.
///
/// Calls are serialized over one connection; a connection that failed mid-frame is
/// dropped and re-opened by the next call.
pub struct TcpStore {
    addr: SocketAddr,
    options: StoreOptions,
    conn: Mutex<Option<TcpStream>>,
    server: Option<StoreServer>,
}

impl std::fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TcpStore({}{})",
            self.addr,
            if self.server.is_some() { ", host" } else { "" }
        )
    }
}

impl TcpStore {
    /// Starts a server on `addr` (port 0 picks one) and connects to it.
    pub fn host(addr: SocketAddr, options: StoreOptions) -> Result<TcpStore, StoreError> {
        let server = StoreServer::bind(addr, options.max_value_len)?;
        let mut store = TcpStore::connect(server.local_addr(), options)?;
        store.server = Some(server);
        Ok(store)
    }

    /// Connects to the server at `addr`, retrying until `options.timeout` (the server may
    /// start after its clients).
    pub fn connect(addr: SocketAddr, options: StoreOptions) -> Result<TcpStore, StoreError> {
        let stream = open(addr, options.timeout)?;
        Ok(TcpStore {
            addr,
            options,
            conn: Mutex::new(Some(stream)),
            server: None,
        })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// True on the rank that hosts the server.
    pub fn is_host(&self) -> bool {
        self.server.is_some()
    }

    /// Sets `key` to `value` (replacing any earlier value) and wakes its waiters.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        check_key(key)?;
        if value.len() as u64 > self.options.max_value_len {
            return Err(StoreError::ValueTooLarge {
                key: key.to_owned(),
                len: value.len() as u64,
                max: self.options.max_value_len,
            });
        }
        let mut frame = vec![wire::OP_SET];
        wire::put_key(&mut frame, key);
        wire::put_value(&mut frame, value);
        self.call("set", &[key], self.options.timeout, &frame, |_, _| Ok(()))
    }

    /// The value of `key`, waiting up to the store's timeout for it to be set.
    pub fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        self.get_timeout(key, self.options.timeout)
    }

    /// The value of `key`, waiting up to `timeout` for it to be set.
    pub fn get_timeout(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        check_key(key)?;
        let mut frame = vec![wire::OP_GET];
        wire::put_key(&mut frame, key);
        frame.extend_from_slice(&millis(timeout).to_le_bytes());
        let max = self.options.max_value_len;
        let addr = self.addr;
        self.call("get", &[key], timeout, &frame, |stream, _| {
            wire::read_value(stream, max).map_err(|e| wire_error(addr, "value", Some(key), e))
        })
    }

    /// The value of `key`, which must be exactly `len` bytes long.
    pub fn get_exact(&self, key: &str, len: usize) -> Result<Vec<u8>, StoreError> {
        let value = self.get(key)?;
        if value.len() != len {
            return Err(StoreError::LengthMismatch {
                key: key.to_owned(),
                expected: len as u64,
                actual: value.len() as u64,
            });
        }
        Ok(value)
    }

    /// Blocks until every key in `keys` is set, or fails with the missing ones after
    /// `timeout`.
    pub fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        if keys.len() > MAX_WAIT_KEYS {
            return Err(StoreError::InvalidKey {
                key: format!("{} keys", keys.len()),
                reason: format!("a wait takes at most {MAX_WAIT_KEYS} keys"),
            });
        }
        let mut frame = vec![wire::OP_WAIT];
        frame.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        for key in keys {
            check_key(key)?;
            wire::put_key(&mut frame, key);
        }
        frame.extend_from_slice(&millis(timeout).to_le_bytes());
        self.call("wait", keys, timeout, &frame, |_, _| Ok(()))
    }

    /// Sends `frame`, reads the status and, on `OK`, the rest with `read_ok`.
    fn call<T>(
        &self,
        op: &'static str,
        keys: &[&str],
        timeout: Duration,
        frame: &[u8],
        read_ok: impl FnOnce(&mut TcpStream, SocketAddr) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut guard = self.conn.lock();
        let stream = match guard.as_mut() {
            Some(s) => s,
            None => guard.insert(open(self.addr, self.options.timeout)?),
        };
        let result = exchange(stream, self.addr, op, keys, timeout, frame, read_ok);
        // Anything but a clean answer leaves the connection out of step: reopen next time.
        if let Err(e) = &result
            && !matches!(
                e,
                StoreError::Timeout { .. } | StoreError::LengthMismatch { .. }
            )
        {
            *guard = None;
        }
        result
    }
}

fn exchange<T>(
    stream: &mut TcpStream,
    addr: SocketAddr,
    op: &'static str,
    keys: &[&str],
    timeout: Duration,
    frame: &[u8],
    read_ok: impl FnOnce(&mut TcpStream, SocketAddr) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let timed_out = || StoreError::Timeout {
        addr,
        op,
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        millis: millis(timeout),
    };
    let deadline = timeout + reply_grace(timeout);
    stream
        .set_write_timeout(Some(deadline))
        .and_then(|()| stream.set_read_timeout(Some(deadline)))
        .map_err(|e| server::io_error("configure the socket", addr, e))?;
    wire::send(stream, frame).map_err(|e| match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => timed_out(),
        _ => server::io_error(op, addr, e),
    })?;
    let status = match wire::read_u8(stream) {
        Ok(s) => s,
        Err(wire::WireError::Io(e))
            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
        {
            return Err(timed_out());
        }
        Err(e) => return Err(wire_error(addr, "status", None, e)),
    };
    match status {
        wire::ST_OK => read_ok(stream, addr),
        wire::ST_TIMEOUT => {
            let missing =
                wire::read_message(stream).map_err(|e| wire_error(addr, "message", None, e))?;
            Err(StoreError::Timeout {
                addr,
                op,
                keys: missing.split(", ").map(str::to_owned).collect(),
                millis: millis(timeout),
            })
        }
        wire::ST_TOO_LARGE => {
            let declared =
                wire::read_u64(stream).map_err(|e| wire_error(addr, "length", None, e))?;
            let max = wire::read_u64(stream).map_err(|e| wire_error(addr, "length", None, e))?;
            Err(StoreError::ValueTooLarge {
                key: keys.first().map_or_else(String::new, |k| (*k).to_owned()),
                len: declared,
                max,
            })
        }
        wire::ST_BAD_REQUEST => {
            let message =
                wire::read_message(stream).map_err(|e| wire_error(addr, "message", None, e))?;
            Err(StoreError::Protocol {
                addr,
                reason: format!("server refused the request: {message}"),
            })
        }
        other => Err(StoreError::Protocol {
            addr,
            reason: format!("unknown status byte {other}"),
        }),
    }
}

fn wire_error(
    addr: SocketAddr,
    what: &'static str,
    key: Option<&str>,
    e: wire::WireError,
) -> StoreError {
    match e {
        wire::WireError::Io(source) if source.kind() == ErrorKind::UnexpectedEof => {
            StoreError::Protocol {
                addr,
                reason: format!("connection closed while reading the {what}"),
            }
        }
        wire::WireError::Io(source) => server::io_error("read the reply", addr, source),
        wire::WireError::TooLarge { declared, max } => StoreError::ValueTooLarge {
            key: key.unwrap_or(what).to_owned(),
            len: declared,
            max,
        },
        wire::WireError::Truncated { declared, received } => StoreError::Truncated {
            addr,
            what,
            declared,
            received,
        },
        wire::WireError::Malformed(reason) => StoreError::Protocol { addr, reason },
    }
}

fn check_key(key: &str) -> Result<(), StoreError> {
    let reason = if key.is_empty() {
        "keys must not be empty".to_owned()
    } else if key.len() > MAX_KEY_LEN {
        format!("{} bytes, above the limit of {MAX_KEY_LEN}", key.len())
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey {
        key: key.chars().take(80).collect(),
        reason,
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Connects, retrying with a growing pause until `timeout` has passed.
fn open(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, StoreError> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = TcpStream::connect_timeout(
            &addr,
            left.clamp(Duration::from_millis(1), Duration::from_secs(2)),
        );
        match attempt {
            Ok(s) => {
                s.set_nodelay(true)
                    .map_err(|e| server::io_error("configure the socket", addr, e))?;
                return Ok(s);
            }
            Err(e) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(StoreError::Connect {
                        addr,
                        millis: millis(timeout),
                        last: e.to_string(),
                    });
                }
                std::thread::sleep(pause.min(left));
                pause = (pause * 2).min(Duration::from_millis(250));
            }
        }
    }
}
