//! The gateway's two doors to the host's network, each a trait so tests (and later the
//! sandboxed `hull net` process) choose what is behind it: a [`Resolver`] answers a name's
//! addresses on the host side (the answers the policy filters at connect time), a [`Dialer`]
//! opens the upstream connection. Tests map names like `api.example.test` to loopback servers
//! they run, and record where a public destination would have been dialled without sending a
//! packet. [`SystemResolver`] and [`TcpDialer`] are the real ones.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::name::Name;

/// A boxed future the gateway's event loop can spawn.
pub type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// An upstream connection (a TCP stream, a test's in-memory pipe, a TLS stream).
pub trait Upstream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Upstream for T {}

/// Resolves names on the host side.
pub trait Resolver: Send + Sync + 'static {
    /// The name's addresses (an empty list is "no such name").
    fn resolve(&self, name: &Name) -> Boxed<io::Result<Vec<IpAddr>>>;

    /// The name's records of a type that carries no address (TXT, MX, SRV, CAA...: what the
    /// gateway forwards for an allowed name; an empty list is "none"). A resolver that cannot
    /// look them up says `Unsupported` (the box gets SERVFAIL).
    fn records(
        &self,
        name: &Name,
        record_type: u16,
    ) -> Boxed<io::Result<Vec<hickory_proto::rr::Record>>> {
        let _ = (name, record_type);
        Box::pin(async { Err(io::ErrorKind::Unsupported.into()) })
    }
}

/// Opens upstream connections. A refusal is an error of kind `ConnectionRefused` (the box is
/// reset); `TimedOut` leaves the box's SYN unanswered (it times out itself); any other error
/// resets the box too.
pub trait Dialer: Send + Sync + 'static {
    fn dial(&self, to: SocketAddr) -> Boxed<io::Result<Box<dyn Upstream>>>;
}

/// The host's own resolver (`getaddrinfo` on tokio's blocking pool).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, name: &Name) -> Boxed<io::Result<Vec<IpAddr>>> {
        let host = format!("{}:0", name.as_str());
        Box::pin(async move {
            Ok(tokio::net::lookup_host(host)
                .await?
                .map(|a| a.ip())
                .collect())
        })
    }
}

/// Real TCP connections, each given `timeout` to complete.
#[derive(Debug, Clone, Copy)]
pub struct TcpDialer {
    pub timeout: Duration,
}

impl Default for TcpDialer {
    fn default() -> TcpDialer {
        TcpDialer {
            timeout: Duration::from_secs(30),
        }
    }
}

impl Dialer for TcpDialer {
    fn dial(&self, to: SocketAddr) -> Boxed<io::Result<Box<dyn Upstream>>> {
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(to)).await {
                Ok(Ok(s)) => {
                    s.set_nodelay(true)?;
                    Ok(Box::new(s) as Box<dyn Upstream>)
                }
                Ok(Err(e)) => Err(e),
                Err(_) => Err(io::ErrorKind::TimedOut.into()),
            }
        })
    }
}
