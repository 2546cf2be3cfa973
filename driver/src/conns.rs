//! The connections of the driver's HTTP port and plaintext gRPC port: how
//! many each serves at once, and how long a connection may take before
//! it says anything.
//!
//! ```text
//!  start ─► soft fd limit raised to the hard one ─► cap per port = (soft − RESERVE) / 4
//!  accept ─► a permit of the port (none free: wait; the kernel's backlog holds the rest)
//!         ─► Conn: the permit, and a deadline for the first bytes ─► served ─► permit back
//! ```
//!
//! Invariant: both ports together hold at most half of the descriptors
//! past [`RESERVE`], so a flood of idle sockets (slowloris) can never take
//! the descriptors that checkpoint writes, etcd and executors' streams
//! need. A connection that has not sent [`FIRST_BYTES`] bytes (an HTTP/2
//! preface, or a request line) within [`FIRST_BYTES_WITHIN`] is closed;
//! the HTTP port also times out a request's headers (see `http.rs`).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tracing::{info, warn};

/// Descriptors kept out of the ports' reach.
pub const RESERVE: u64 = 256;
/// The most connections one port serves at once, whatever the fd limit.
pub const MAX_PER_PORT: usize = 10_000;
/// The fewest, whatever the fd limit.
pub const MIN_PER_PORT: usize = 16;
/// The bytes a new connection must send within [`FIRST_BYTES_WITHIN`].
pub const FIRST_BYTES: usize = 24;
pub const FIRST_BYTES_WITHIN: Duration = Duration::from_secs(10);

/// Raises the soft limit on open files to the hard one, where allowed;
/// the soft limit in force after.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        warn!("cannot read the limit on open files; assuming 1024");
        return 1024;
    };
    if soft >= hard {
        return soft;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            info!(
                from = soft,
                to = hard,
                "raised the soft limit on open files"
            );
            hard
        }
        Err(e) => {
            warn!(soft, hard, error = %e, "cannot raise the soft limit on open files");
            soft
        }
    }
}

/// The connections one port may hold under the fd limit `soft`.
pub fn per_port(soft: u64) -> usize {
    let share = soft.saturating_sub(RESERVE) / 4;
    usize::try_from(share)
        .unwrap_or(MAX_PER_PORT)
        .clamp(MIN_PER_PORT, MAX_PER_PORT)
}

/// A listener that accepts while fewer than its cap of connections are
/// open.
pub struct Capped {
    listener: TcpListener,
    permits: Arc<Semaphore>,
}

impl Capped {
    pub fn new(listener: TcpListener, cap: usize) -> Self {
        Capped {
            listener,
            permits: Arc::new(Semaphore::new(cap)),
        }
    }

    /// The next connection, once one of the port's permits is free.
    /// Accept errors (out of descriptors, a reset) are waited out.
    pub async fn accept(&self) -> (Conn, SocketAddr) {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("a port's semaphore is never closed");
        loop {
            match self.listener.accept().await {
                Ok((stream, addr)) => {
                    if let Err(e) = stream.set_nodelay(true) {
                        warn!(error = %e, "cannot set TCP_NODELAY");
                    }
                    return (Conn::new(stream, permit), addr);
                }
                Err(e) => {
                    warn!(error = %e, "accept failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// An accepted connection: it holds its port's permit until it closes.
pub struct Conn {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    /// Bytes read so far, up to [`FIRST_BYTES`], and the deadline for them.
    read: usize,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl Conn {
    fn new(stream: TcpStream, permit: OwnedSemaphorePermit) -> Self {
        Conn {
            stream,
            _permit: permit,
            read: 0,
            deadline: Some(Box::pin(tokio::time::sleep(FIRST_BYTES_WITHIN))),
        }
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        this.read += buf.filled().len() - before;
        if this.read >= FIRST_BYTES {
            this.deadline = None;
        }
        let expired = polled.is_pending()
            && this
                .deadline
                .as_mut()
                .is_some_and(|d| d.as_mut().poll(cx).is_ready());
        if expired {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection sent too little in its first 10 s",
            )));
        }
        polled
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// The connections of `listener`, capped, as the stream tonic serves.
pub fn incoming(
    listener: Capped,
) -> impl tokio_stream::Stream<Item = Result<Conn, io::Error>> + Send + 'static {
    futures::stream::unfold(listener, |l| async move {
        let (conn, _) = l.accept().await;
        Some((Ok(conn), l))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_port_gets_a_quarter_of_what_is_past_the_reserve() {
        assert_eq!(per_port(1024), 192);
        assert_eq!(per_port(256), MIN_PER_PORT);
        assert_eq!(per_port(1 << 20), MAX_PER_PORT);
        // Both ports together hold at most half of what is past the reserve.
        assert!(2 * per_port(1024) as u64 <= (1024 - RESERVE) / 2);
    }
}
