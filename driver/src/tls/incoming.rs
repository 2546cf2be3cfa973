//! The TLS listener: accepts TCP connections, runs each handshake in its
//! own task with a deadline, and hands finished connections to the gRPC
//! server, each carrying the certificates its client presented.
//!
//! ```text
//!  accept loop ("tls-accept") ──► handshake task (≤ HANDSHAKE_TIMEOUT, at most
//!        │                          MAX_HANDSHAKES at once) ──► channel ──► tonic
//!        └── cancel: stop accepting, abort pending handshakes
//! ```
//!
//! A client that speaks plaintext HTTP/2 to this TLS port (its first byte is
//! not a TLS handshake record) is served in plaintext, but only with a
//! refusal: the auth layer answers every call on such a connection with
//! `UNAUTHENTICATED`, naming `--tls-ca`, and passes nothing on. A failed
//! handshake (an unknown CA on the client's side, a slow client) closes
//! that connection only, with a debug log.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;
use tracing::debug;

/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in flight at once; more connections wait in the backlog.
const MAX_HANDSHAKES: usize = 256;

/// The first byte of a TLS record that carries a handshake.
const TLS_HANDSHAKE: u8 = 0x16;

/// What the auth layer learns about a connection of the TLS port, as a
/// request extension.
#[derive(Debug, Clone)]
pub struct Peer {
    pub remote: Option<SocketAddr>,
    /// False for a plaintext client of this TLS port: refuse everything.
    pub tls: bool,
    /// The chain the client presented, end entity first; unverified.
    pub certs: Option<Arc<[CertificateDer<'static>]>>,
}

enum Stream {
    Tls(Box<TlsStream<TcpStream>>),
    Plain(TcpStream),
}

/// One accepted connection of the TLS port.
pub struct TlsConn {
    stream: Stream,
    peer: Peer,
}

/// Delegates an I/O call to whichever stream the connection is.
macro_rules! delegate {
    ($self:ident, $s:ident => $call:expr) => {
        match &mut $self.stream {
            Stream::Tls(t) => {
                let $s = Pin::new(t.as_mut());
                $call
            }
            Stream::Plain(p) => {
                let $s = Pin::new(p);
                $call
            }
        }
    };
}

impl Connected for TlsConn {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        delegate!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        delegate!(self, s => s.poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        delegate!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        delegate!(self, s => s.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        delegate!(self, s => s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Tls(t) => t.is_write_vectored(),
            Stream::Plain(p) => p.is_write_vectored(),
        }
    }
}

/// Accepts TLS connections on `listener` until `cancel`. The returned
/// stream ends when the accept loop does.
pub fn serve(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    cancel: CancellationToken,
) -> (
    ReceiverStream<std::io::Result<TlsConn>>,
    impl Future<Output = ()>,
) {
    let (tx, rx) = mpsc::channel(64);
    let acceptor = TlsAcceptor::from(config);
    let accept_loop = async move {
        let mut handshakes: JoinSet<()> = JoinSet::new();
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
                accepted = listener.accept(), if handshakes.len() < MAX_HANDSHAKES => {
                    let (tcp, remote) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // Out of file descriptors and the like: pause, go on.
                            debug!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let (acceptor, tx) = (acceptor.clone(), tx.clone());
                    handshakes.spawn(async move {
                        let _ = tcp.set_nodelay(true);
                        let handshake = async {
                            let mut first = [0u8; 1];
                            if tcp.peek(&mut first).await? == 1 && first[0] != TLS_HANDSHAKE {
                                let peer = Peer { remote: Some(remote), tls: false, certs: None };
                                return Ok(TlsConn { stream: Stream::Plain(tcp), peer });
                            }
                            let stream = acceptor.accept(tcp).await?;
                            let certs = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .map(|c| c.iter().map(|c| c.clone().into_owned()).collect());
                            let peer = Peer { remote: Some(remote), tls: true, certs };
                            Ok::<_, std::io::Error>(TlsConn { stream: Stream::Tls(Box::new(stream)), peer })
                        };
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                            Ok(Ok(conn)) => {
                                let _ = tx.send(Ok(conn)).await;
                            }
                            Ok(Err(e)) => debug!(remote = %remote, error = %e, "TLS handshake failed"),
                            Err(_) => debug!(remote = %remote, "TLS handshake timed out"),
                        }
                    });
                }
            }
        }
        handshakes.shutdown().await;
    };
    (ReceiverStream::new(rx), accept_loop)
}
