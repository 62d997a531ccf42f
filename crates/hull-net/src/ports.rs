//! Published ports: a box's TCP port reachable from the host as `127.0.0.1:<free port>` (never
//! another interface). The gateway binds the listener; each connection it accepts becomes a
//! connection from the gateway (`10.0.2.2`) into the box, spliced like any other. A port can
//! be withdrawn while the box runs (its listener closes; connections already open stay); every
//! listener closes with the gateway.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::task::{Context, Poll};

use tokio::net::{TcpListener, TcpStream};

/// Why a port could not be published.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error("binding 127.0.0.1 for the box's port {port} failed")]
    Bind {
        port: u16,
        #[source]
        source: io::Error,
    },
    #[error("port {0} is already published")]
    Taken(u16),
    #[error("the gateway has stopped")]
    Stopped,
}

/// The first local port of the gateway's connections into the box.
const FIRST_LOCAL: u16 = 49152;

/// A box's published ports (see the module comment).
#[derive(Debug)]
pub struct Ports {
    /// Box port -> its host listener.
    listeners: HashMap<u16, TcpListener>,
    next_local: u16,
}

impl Default for Ports {
    fn default() -> Ports {
        Ports {
            listeners: HashMap::new(),
            next_local: FIRST_LOCAL,
        }
    }
}

impl Ports {
    /// Listens for the box's `port` on a free port of `127.0.0.1` and returns that port.
    /// Must run inside the gateway's runtime.
    pub fn publish(&mut self, port: u16) -> Result<u16, PortError> {
        if self.listeners.contains_key(&port) {
            return Err(PortError::Taken(port));
        }
        let bind = |source| PortError::Bind { port, source };
        let std = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(bind)?;
        std.set_nonblocking(true).map_err(bind)?;
        let l = TcpListener::from_std(std).map_err(bind)?;
        let host = l.local_addr().map_err(bind)?.port();
        self.listeners.insert(port, l);
        Ok(host)
    }

    /// Closes the listener of `port`; false when it was not published.
    pub fn withdraw(&mut self, port: u16) -> bool {
        self.listeners.remove(&port).is_some()
    }

    /// The next connection a listener accepted: (box port, stream, peer).
    pub fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<(u16, TcpStream, SocketAddr)> {
        for (port, l) in &self.listeners {
            // An accept error (a connection reset before it was taken, no fds) loses that
            // connection only.
            if let Poll::Ready(Ok((s, peer))) = l.poll_accept(cx) {
                return Poll::Ready((*port, s, peer));
            }
        }
        Poll::Pending
    }

    /// A local port for the gateway's next connection into the box (cycling through the
    /// dynamic range; smoltcp tells the box's connections apart by the whole 4-tuple).
    pub fn local_port(&mut self) -> u16 {
        let p = self.next_local;
        self.next_local = if p == u16::MAX { FIRST_LOCAL } else { p + 1 };
        p
    }
}
