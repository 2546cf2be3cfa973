//! A TCP forwarder on a fixed loopback port, for a server that must look
//! down to its clients: [`Proxy::down`] closes the port and every
//! connection through it (clients get "connection refused" or a reset),
//! [`Proxy::up`] opens it again towards a backend.
//!
//! The tasks run on the test's runtime and stop with [`Proxy::down`] or
//! when the proxy is dropped.

use std::sync::Mutex;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// A forwarder from `127.0.0.1:port` to a backend port on 127.0.0.1.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    /// The accept loop and its connections, while up.
    tasks: Mutex<Option<JoinSet<()>>>,
}

impl Proxy {
    /// A proxy on `port`, down until [`Proxy::up`].
    pub fn new(port: u16) -> Proxy {
        Proxy {
            port,
            tasks: Mutex::new(None),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Opens the port, forwarding each connection to `backend`.
    pub async fn up(&self, backend: u16) {
        self.down();
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .await
            .unwrap_or_else(|e| panic!("proxy cannot bind 127.0.0.1:{}: {e}", self.port));
        let mut tasks = JoinSet::new();
        tasks.spawn(accept(listener, backend));
        *self.tasks.lock().expect("proxy lock poisoned") = Some(tasks);
    }

    /// Closes the port and drops every connection through it.
    pub fn down(&self) {
        // Dropping the JoinSet aborts the accept loop, which drops the
        // listener and the connections' JoinSet with their sockets.
        drop(self.tasks.lock().expect("proxy lock poisoned").take());
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.down();
    }
}

/// Accepts until aborted; each connection is copied both ways in a task
/// owned by this one, so aborting the loop ends them too.
async fn accept(listener: TcpListener, backend: u16) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        connections.spawn(async move {
            if let Ok(mut server) = TcpStream::connect(("127.0.0.1", backend)).await {
                let mut client = client;
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            }
        });
        // Reap finished connections as we go.
        while connections.try_join_next().is_some() {}
    }
}
