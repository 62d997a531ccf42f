//! Upstream connections through the host's HTTP proxy (`HTTPS_PROXY`), for hosts that reach the
//! internet only through one: each allowed connection becomes a `CONNECT address:port` tunnel.
//! The gateway asks for the address it resolved and judged, never a name: what the proxy
//! dials is what the policy allowed (a name handed to the proxy could resolve elsewhere there).
//! Addresses the caller exempts (`NO_PROXY`'s addresses and CIDRs) are dialled directly, and so
//! is loopback (allowed only when a CIDR names it: the host's own services, which a proxy's
//! loopback is not).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine;
use ipnet::IpNet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::upstream::{Boxed, Dialer, TcpDialer, Upstream};

/// The most bytes of a proxy's answer head read (a CONNECT answer is a status line and a few
/// headers).
const MAX_HEAD: usize = 8 << 10;

/// Where the proxy is and how to authenticate to it.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    pub addr: SocketAddr,
    /// `user:password` for `Proxy-Authorization: Basic` (from the proxy URL's user part).
    pub credentials: Option<String>,
    /// Upstream addresses dialled directly, not through the proxy.
    pub direct: Vec<IpNet>,
}

/// The credentials are never printed.
impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("credentials", &self.credentials.as_ref().map(|_| "(set)"))
            .field("direct", &self.direct)
            .finish()
    }
}

/// A `NO_PROXY` entry as the addresses it exempts: an address (one host) or a CIDR; a name is
/// none (the gateway dials addresses, not names).
pub fn direct_entry(s: &str) -> Option<IpNet> {
    let s = s.trim();
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<std::net::IpAddr>().ok().map(IpNet::from))
}

/// Dials through a [`Proxy`]; each connection is given `timeout` to be tunnelled.
#[derive(Debug, Clone)]
pub struct ProxyDialer {
    pub proxy: Proxy,
    pub timeout: Duration,
}

impl ProxyDialer {
    pub fn new(proxy: Proxy) -> ProxyDialer {
        ProxyDialer {
            proxy,
            timeout: TcpDialer::default().timeout,
        }
    }
}

impl Dialer for ProxyDialer {
    fn dial(&self, to: SocketAddr) -> Boxed<io::Result<Box<dyn Upstream>>> {
        if to.ip().is_loopback() || self.proxy.direct.iter().any(|n| n.contains(&to.ip())) {
            return TcpDialer {
                timeout: self.timeout,
            }
            .dial(to);
        }
        let proxy = self.proxy.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, tunnel(&proxy, to)).await {
                Ok(r) => r,
                Err(_) => Err(io::ErrorKind::TimedOut.into()),
            }
        })
    }
}

/// The request line and headers asking `proxy` for a tunnel to `to`.
fn connect_request(proxy: &Proxy, to: SocketAddr) -> String {
    let mut r = format!("CONNECT {to} HTTP/1.1\r\nHost: {to}\r\n");
    if let Some(c) = &proxy.credentials {
        let token = base64::engine::general_purpose::STANDARD.encode(c.as_bytes());
        r.push_str(&format!("Proxy-Authorization: Basic {token}\r\n"));
    }
    r.push_str("\r\n");
    r
}

async fn tunnel(proxy: &Proxy, to: SocketAddr) -> io::Result<Box<dyn Upstream>> {
    let mut s = tokio::net::TcpStream::connect(proxy.addr).await?;
    s.set_nodelay(true)?;
    s.write_all(connect_request(proxy, to).as_bytes()).await?;
    // Byte by byte up to the blank line: nothing of the tunnel's own bytes is read here.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD {
            return Err(io::Error::other(format!(
                "the proxy's answer head is over {MAX_HEAD} bytes"
            )));
        }
        let b = s.read_u8().await?;
        head.push(b);
    }
    match status(&head) {
        Some(200..=299) => Ok(Box::new(s)),
        // The proxy refused this destination (or our credentials): the box sees a refusal.
        Some(code) => Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("the proxy answered {code} to CONNECT {to}"),
        )),
        None => Err(io::Error::other("the proxy's answer is not HTTP")),
    }
}

/// The status code of an HTTP answer head (`HTTP/1.x NNN ...`).
fn status(head: &[u8]) -> Option<u16> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/1."))?;
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, BufReader};

    /// A loopback CONNECT proxy answering `code`; it reports each request head it got.
    async fn proxy(code: u16) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((c, _)) = l.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut c = BufReader::new(c);
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if c.read_line(&mut line).await.unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        head.push_str(&line);
                    }
                    let _ = tx.send(head.clone());
                    let mut c = c.into_inner();
                    let answer = format!("HTTP/1.1 {code} X\r\nVia: test\r\n\r\n");
                    c.write_all(answer.as_bytes()).await.unwrap();
                    // With 200 it plays the upstream itself (an echo): nothing is dialled.
                    if code == 200 {
                        let mut buf = [0u8; 64];
                        let n = c.read(&mut buf).await.unwrap_or(0);
                        let _ = c.write_all(&buf[..n]).await;
                    }
                });
            }
        });
        (addr, rx)
    }

    async fn echo() -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    let n = c.read(&mut buf).await.unwrap_or(0);
                    let _ = c.write_all(&buf[..n]).await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_connection_is_tunnelled_with_the_credentials_and_a_refusal_is_a_refusal() {
        // A documentation address: only the loopback proxy is connected to.
        let up: SocketAddr = "198.51.100.7:443".parse().unwrap();
        let (addr, mut heads) = proxy(200).await;
        let d = ProxyDialer::new(Proxy {
            addr,
            credentials: Some("me:pw".into()),
            direct: Vec::new(),
        });
        let mut s = d.dial(up).await.unwrap();
        s.write_all(b"through").await.unwrap();
        let mut got = [0u8; 7];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"through");
        let head = heads.recv().await.unwrap();
        assert!(
            head.starts_with(&format!("CONNECT {up} HTTP/1.1\r\n")),
            "{head}"
        );
        // base64("me:pw")
        assert!(
            head.contains("Proxy-Authorization: Basic bWU6cHc=\r\n"),
            "{head}"
        );

        let (addr, _heads) = proxy(403).await;
        let d = ProxyDialer::new(Proxy {
            addr,
            credentials: None,
            direct: Vec::new(),
        });
        let e = d.dial(up).await.err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        assert!(e.to_string().contains("403"), "{e}");
    }

    #[tokio::test]
    async fn loopback_is_dialled_directly() {
        let up = echo().await;
        let (addr, mut heads) = proxy(403).await;
        let d = ProxyDialer::new(Proxy {
            addr,
            credentials: None,
            direct: Vec::new(),
        });
        let mut s = d.dial(up).await.unwrap();
        s.write_all(b"direct").await.unwrap();
        let mut got = [0u8; 6];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"direct");
        assert!(heads.try_recv().is_err(), "the proxy was asked");
    }

    #[test]
    fn answer_heads_are_read_for_their_status_only() {
        assert_eq!(
            status(b"HTTP/1.1 200 Connection established\r\n\r\n"),
            Some(200)
        );
        assert_eq!(status(b"HTTP/1.0 407 Auth\r\n\r\n"), Some(407));
        assert_eq!(status(b"SSH-2.0-x\r\n\r\n"), None);
        let p = Proxy {
            addr: "127.0.0.1:1".parse().unwrap(),
            credentials: Some("u:secret".into()),
            direct: Vec::new(),
        };
        assert!(!format!("{p:?}").contains("secret"));
        assert_eq!(
            direct_entry(" 10.0.0.0/8"),
            Some("10.0.0.0/8".parse().unwrap())
        );
        assert_eq!(
            direct_entry("192.0.2.7"),
            Some("192.0.2.7/32".parse().unwrap())
        );
        assert_eq!(direct_entry(".corp.example"), None);
    }
}
