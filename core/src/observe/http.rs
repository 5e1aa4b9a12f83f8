//! An opt-in `/metrics` endpoint for a process that has no HTTP server of its own.
//!
//! One thread, one connection at a time, bounded requests (8 KiB, 2 s timeouts), loopback
//! unless the caller binds elsewhere. Stops when the [`MetricsServer`] is dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use super::metrics::CONTENT_TYPE;

/// Produces the exposition text at each scrape (e.g. `render_metrics` of fresh stats).
pub type RenderFn = dyn Fn() -> String + Send + Sync;

/// The largest request head the server reads.
const MAX_REQUEST: usize = 8 * 1024;
/// Read and write timeout per connection.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// A running `/metrics` endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `render()` at `GET /metrics` on `127.0.0.1:port` (0: any free port).
    pub fn loopback(port: u16, render: Arc<RenderFn>) -> std::io::Result<Self> {
        Self::bind(SocketAddr::from(([127, 0, 0, 1], port)), render)
    }

    /// Serves on `addr` (binding beyond loopback exposes the metrics to the network: the
    /// caller's explicit choice).
    pub fn bind(addr: SocketAddr, render: Arc<RenderFn>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("memreuse-metrics".to_owned())
            .spawn(move || {
                for conn in listener.incoming() {
                    if flag.load(Ordering::Acquire) {
                        break;
                    }
                    if let Ok(stream) = conn {
                        if let Err(e) = serve(stream, render.as_ref()) {
                            tracing::debug!(%e, "memreuse metrics: connection failed");
                        }
                    }
                }
            })?;
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the blocking accept; the loop sees the flag and ends.
        let _ = TcpStream::connect_timeout(&self.addr, IO_TIMEOUT);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(mut stream: TcpStream, render: &RenderFn) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, ctype, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => ("200 OK", CONTENT_TYPE, render()),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_owned()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())?;
    stream.flush()
}
