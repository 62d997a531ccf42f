//! The host-side resolver a confined gateway uses: a DNS client (hickory-resolver) whose
//! configuration (`/etc/resolv.conf`'s name servers and options, `/etc/hosts`) is read once,
//! when it is made. The gateway process gives up every host file right after (an empty root),
//! so `getaddrinfo`, which reads `/etc/nsswitch.conf`, `/etc/resolv.conf` and loads NSS modules
//! at each call, cannot work there; this one needs only its sockets. Names are looked up as
//! fully qualified (no search domain is appended to what the box asked for).

use std::io;
use std::net::{IpAddr, SocketAddr};

use hickory_resolver::config::{
    NameServerConfig, NameServerConfigGroup, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::TokioResolver;

use crate::name::Name;
use crate::upstream::{Boxed, Resolver};

/// Why the host's resolver configuration could not be read.
#[derive(Debug, thiserror::Error)]
#[error("read the host's resolver configuration (/etc/resolv.conf)")]
pub struct ResolverSetupError(#[source] hickory_resolver::ResolveError);

/// The host's DNS, as configured when it was made (see the module comment).
#[derive(Clone)]
pub struct HostResolver {
    inner: TokioResolver,
}

impl std::fmt::Debug for HostResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostResolver").finish_non_exhaustive()
    }
}

impl HostResolver {
    /// The host's configuration: `/etc/resolv.conf` and `/etc/hosts`, read now.
    pub fn from_system() -> Result<HostResolver, ResolverSetupError> {
        let (config, opts) =
            hickory_resolver::system_conf::read_system_conf().map_err(ResolverSetupError)?;
        Ok(HostResolver::build(config, opts))
    }

    /// Name servers given as addresses (UDP, then TCP for truncated answers), no hosts file:
    /// tests run one on loopback.
    pub fn with_servers(servers: &[SocketAddr]) -> HostResolver {
        let mut group = NameServerConfigGroup::new();
        for s in servers {
            group.push(NameServerConfig::new(*s, Protocol::Udp));
            group.push(NameServerConfig::new(*s, Protocol::Tcp));
        }
        let mut opts = ResolverOpts::default();
        opts.use_hosts_file = ResolveHosts::Never;
        HostResolver::build(ResolverConfig::from_parts(None, Vec::new(), group), opts)
    }

    fn build(config: ResolverConfig, mut opts: ResolverOpts) -> HostResolver {
        // What the box asked for is looked up as it is, never with a search domain appended.
        opts.ndots = 0;
        let mut b = TokioResolver::builder_with_config(config, TokioConnectionProvider::default());
        *b.options_mut() = opts;
        HostResolver { inner: b.build() }
    }
}

impl Resolver for HostResolver {
    fn resolve(&self, name: &Name) -> Boxed<io::Result<Vec<IpAddr>>> {
        let inner = self.inner.clone();
        let fqdn = format!("{}.", name.as_str());
        Box::pin(async move {
            match inner.lookup_ip(fqdn).await {
                Ok(found) => Ok(found.iter().collect()),
                Err(e) if e.is_nx_domain() || e.is_no_records_found() => Ok(Vec::new()),
                Err(e) => Err(io::Error::other(e)),
            }
        })
    }

    fn records(
        &self,
        name: &Name,
        record_type: u16,
    ) -> Boxed<io::Result<Vec<hickory_proto::rr::Record>>> {
        let inner = self.inner.clone();
        let fqdn = format!("{}.", name.as_str());
        Box::pin(async move {
            let t = hickory_proto::rr::RecordType::from(record_type);
            match inner.lookup(fqdn, t).await {
                Ok(found) => Ok(found.records().to_vec()),
                Err(e) if e.is_nx_domain() || e.is_no_records_found() => Ok(Vec::new()),
                Err(e) => Err(io::Error::other(e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{Message, MessageType, ResponseCode};
    use hickory_proto::rr::{rdata::A, RData, Record, RecordType};
    use std::net::Ipv4Addr;

    /// A loopback DNS server answering `api.example.test` A 127.0.0.7 and NXDOMAIN for the
    /// rest; returns its address and how many queries it got.
    async fn server() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = sock.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = seen.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 1500];
            loop {
                let Ok((n, from)) = sock.recv_from(&mut buf).await else {
                    return;
                };
                let Ok(q) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut r = Message::new();
                r.set_id(q.id())
                    .set_message_type(MessageType::Response)
                    .set_recursion_desired(q.recursion_desired())
                    .set_recursion_available(true)
                    .add_queries(q.queries().to_vec());
                let question = &q.queries()[0];
                if question.name().to_ascii() == "api.example.test." {
                    if question.query_type() == RecordType::A {
                        r.add_answer(Record::from_rdata(
                            question.name().clone(),
                            60,
                            RData::A(A(Ipv4Addr::new(127, 0, 0, 7))),
                        ));
                    }
                    if question.query_type() == RecordType::TXT {
                        r.add_answer(Record::from_rdata(
                            question.name().clone(),
                            60,
                            RData::TXT(hickory_proto::rr::rdata::TXT::new(vec!["v=test".into()])),
                        ));
                    }
                } else {
                    r.set_response_code(ResponseCode::NXDomain);
                }
                let _ = sock.send_to(&r.to_vec().unwrap(), from).await;
            }
        });
        (addr, seen)
    }

    #[tokio::test]
    async fn names_resolve_through_the_configured_servers_and_missing_ones_are_empty() {
        let (addr, seen) = server().await;
        let r = HostResolver::with_servers(&[addr]);
        let found = r
            .resolve(&Name::parse("API.example.test.").unwrap())
            .await
            .unwrap();
        assert_eq!(found, vec![IpAddr::V4(Ipv4Addr::new(127, 0, 0, 7))]);
        let none = r
            .resolve(&Name::parse("nowhere.example.test").unwrap())
            .await
            .unwrap();
        assert!(none.is_empty(), "{none:?}");
        assert!(seen.load(std::sync::atomic::Ordering::SeqCst) >= 2);
        // A type that carries no address, as the gateway forwards it.
        let txt = r
            .records(&Name::parse("api.example.test").unwrap(), 16)
            .await
            .unwrap();
        assert_eq!(txt.len(), 1, "{txt:?}");
        assert_eq!(txt[0].data().to_string(), "v=test");
        let none = r
            .records(&Name::parse("nowhere.example.test").unwrap(), 16)
            .await
            .unwrap();
        assert!(none.is_empty(), "{none:?}");
    }
}
