//! The store server: one accept thread and one thread per connection, all bounded and all
//! stopped (and joined) when the [`StoreServer`] is dropped.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::StoreError;
use super::wire::{self, WireError};

/// How often idle threads look at the shutdown flag.
const POLL: Duration = Duration::from_millis(20);
/// Most connections served at once; more are closed at accept.
const MAX_CONNECTIONS: usize = 1024;
/// How long the rest of a frame may take once its first byte arrived.
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

struct Shared {
    data: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    shutdown: AtomicBool,
    max_value_len: u64,
}

/// A running key-value store server (rank 0 hosts one). Dropping it stops every thread.
pub struct StoreServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for StoreServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreServer({})", self.addr)
    }
}

impl StoreServer {
    /// Binds `addr` (port 0 picks a free port) and starts serving.
    ///
    /// The listener is bound with `SO_REUSEADDR` (what `std::net::TcpListener::bind` sets
    /// on Unix), so a new server can bind the port of one that just stopped even while
    /// its old connections sit in `TIME_WAIT`. Values longer than `max_value_len` bytes
    /// are refused.
    pub fn bind(addr: SocketAddr, max_value_len: u64) -> Result<StoreServer, StoreError> {
        let listener = TcpListener::bind(addr).map_err(|source| StoreError::Io {
            during: "bind",
            addr,
            source,
        })?;
        let local = listener.local_addr().map_err(|source| StoreError::Io {
            during: "bind",
            addr,
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| StoreError::Io {
                during: "bind",
                addr,
                source,
            })?;
        let shared = Arc::new(Shared {
            data: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            shutdown: AtomicBool::new(false),
            max_value_len,
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("memreuse-store-accept".to_owned())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .map_err(|source| StoreError::Io {
                during: "spawn the accept thread",
                addr: local,
                source,
            })?;
        Ok(StoreServer {
            addr: local,
            shared,
            accept: Some(accept),
        })
    }

    /// The address it listens on (with the actual port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        if let Some(h) = self.accept.take() {
            // A panicking server thread has already reported itself; nothing to add.
            let _ = h.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut connections: Vec<JoinHandle<()>> = Vec::new();
    while !shared.shutdown.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                connections.retain(|h| !h.is_finished());
                if connections.len() >= MAX_CONNECTIONS {
                    drop(stream);
                    continue;
                }
                let conn_shared = Arc::clone(shared);
                if let Ok(h) = std::thread::Builder::new()
                    .name("memreuse-store-conn".to_owned())
                    .spawn(move || serve(stream, &conn_shared))
                {
                    connections.push(h);
                }
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
    for h in connections {
        let _ = h.join();
    }
}

/// Waits for the first byte of a request, waking up to look at the shutdown flag.
/// `None` when the connection closed or the server stops.
fn next_op(stream: &mut TcpStream, shared: &Shared) -> Option<u8> {
    let mut b = [0u8; 1];
    loop {
        if shared.shutdown.load(Ordering::SeqCst) {
            return None;
        }
        match stream.read(&mut b) {
            Ok(0) => return None,
            Ok(_) => return Some(b[0]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

fn serve(mut stream: TcpStream, shared: &Shared) {
    if stream.set_nonblocking(false).is_err() || stream.set_nodelay(true).is_err() {
        return;
    }
    let _ = stream.set_write_timeout(Some(FRAME_TIMEOUT));
    loop {
        if stream.set_read_timeout(Some(POLL)).is_err() {
            return;
        }
        let Some(op) = next_op(&mut stream, shared) else {
            return;
        };
        if stream.set_read_timeout(Some(FRAME_TIMEOUT)).is_err() {
            return;
        }
        let (reply, keep_open) = match handle(op, &mut stream, shared) {
            Ok(reply) => (reply, true),
            // The stream is out of step after a bad frame: answer, then close it.
            Err(WireError::TooLarge { declared, max }) => {
                let mut out = vec![wire::ST_TOO_LARGE];
                out.extend_from_slice(&declared.to_le_bytes());
                out.extend_from_slice(&max.to_le_bytes());
                (out, false)
            }
            Err(WireError::Truncated { declared, received }) => (
                status_reply(
                    wire::ST_BAD_REQUEST,
                    &format!("frame declared {declared} bytes but only {received} arrived"),
                ),
                false,
            ),
            Err(WireError::Malformed(why)) => (status_reply(wire::ST_BAD_REQUEST, &why), false),
            Err(WireError::Io(_)) => return,
        };
        if wire::send(&mut stream, &reply).is_err() || !keep_open {
            return;
        }
    }
}

fn status_reply(status: u8, message: &str) -> Vec<u8> {
    let mut out = vec![status];
    wire::put_message(&mut out, message);
    out
}

fn handle(op: u8, stream: &mut TcpStream, shared: &Shared) -> Result<Vec<u8>, WireError> {
    match op {
        wire::OP_SET => {
            let key = wire::read_key(stream)?;
            let value = wire::read_value(stream, shared.max_value_len)?;
            shared.data.lock().insert(key, value);
            shared.changed.notify_all();
            Ok(vec![wire::ST_OK])
        }
        wire::OP_GET => {
            let key = wire::read_key(stream)?;
            let timeout = Duration::from_millis(wire::read_u64(stream)?);
            let keys = [key];
            Ok(match wait_for(shared, &keys, timeout) {
                Ok(data) => {
                    let mut out = vec![wire::ST_OK];
                    wire::put_value(&mut out, &data[0]);
                    out
                }
                Err(missing) => status_reply(wire::ST_TIMEOUT, &missing.join(", ")),
            })
        }
        wire::OP_WAIT => {
            let n = wire::read_u32(stream)? as usize;
            if n > wire::MAX_WAIT_KEYS {
                return Err(WireError::TooLarge {
                    declared: n as u64,
                    max: wire::MAX_WAIT_KEYS as u64,
                });
            }
            let keys = (0..n)
                .map(|_| wire::read_key(stream))
                .collect::<Result<Vec<_>, _>>()?;
            let timeout = Duration::from_millis(wire::read_u64(stream)?);
            Ok(match wait_for(shared, &keys, timeout) {
                Ok(_) => vec![wire::ST_OK],
                Err(missing) => status_reply(wire::ST_TIMEOUT, &missing.join(", ")),
            })
        }
        other => Err(WireError::Malformed(format!("unknown op {other}"))),
    }
}

/// Blocks until every key is set (their values) or the timeout passes (the missing keys).
fn wait_for(
    shared: &Shared,
    keys: &[String],
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, Vec<String>> {
    let deadline = Instant::now() + timeout;
    let mut data = shared.data.lock();
    loop {
        let missing: Vec<String> = keys
            .iter()
            .filter(|k| !data.contains_key(*k))
            .cloned()
            .collect();
        if missing.is_empty() {
            return Ok(keys.iter().map(|k| data[k].clone()).collect());
        }
        let now = Instant::now();
        if now >= deadline || shared.shutdown.load(Ordering::SeqCst) {
            return Err(missing);
        }
        shared
            .changed
            .wait_for(&mut data, (deadline - now).min(POLL * 5));
    }
}

/// Maps an I/O error of a socket call to the store's error.
pub(crate) fn io_error(during: &'static str, addr: SocketAddr, source: io::Error) -> StoreError {
    StoreError::Io {
        during,
        addr,
        source,
    }
}
