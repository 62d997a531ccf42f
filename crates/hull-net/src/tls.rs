//! The two TLS ends of an intercepted connection: towards the box, a server that reads the
//! ClientHello first (its SNI must be the name the box connected to) and then presents the
//! gateway CA's leaf for that name; towards the real host, a client that verifies the host's
//! chain against public roots, the host's bundle and any extra root (tests inject their own).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{client, server, LazyConfigAcceptor, TlsConnector};

use crate::ca::{Ca, CaError};
use crate::name::Name;

pub const H2: &[u8] = b"h2";
pub const HTTP11: &[u8] = b"http/1.1";

/// How long a box has to send its ClientHello, and the real host to finish its handshake.
pub const FIRST_FLIGHT: Duration = Duration::from_secs(10);

/// Why a TLS end failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("the box's TLS hello did not arrive in time")]
    HelloTimeout,
    #[error("the box's TLS hello")]
    Hello(#[source] std::io::Error),
    #[error("SNI mismatch: the box connected to {expected} but asked TLS for {}", got.as_deref().unwrap_or("no name"))]
    SniMismatch {
        expected: String,
        got: Option<String>,
    },
    #[error("the box's TLS handshake")]
    BoxHandshake(#[source] std::io::Error),
    #[error("TLS to {name}")]
    Upstream {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS to {0} did not complete in time")]
    UpstreamTimeout(String),
    #[error("a leaf for {name}")]
    Leaf {
        name: String,
        #[source]
        source: CaError,
    },
    #[error("cannot read the root bundle {path}")]
    Bundle {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("rustls refused the configuration")]
    Config(#[source] rustls::Error),
}

/// Which roots the upstream side trusts.
#[derive(Debug, Clone)]
pub struct UpstreamTrust {
    /// The Mozilla roots built into hull (webpki-roots).
    pub public_roots: bool,
    /// PEM bundles to add (the host's `/etc/ssl/certs/ca-certificates.crt`, ...).
    pub bundles: Vec<PathBuf>,
    /// PEM bundles already read (a confined gateway reads none itself): what each is called,
    /// for errors, and its text.
    pub pems: Vec<(String, Vec<u8>)>,
    /// More roots, DER (a test's own CA).
    pub extra: Vec<CertificateDer<'static>>,
}

impl Default for UpstreamTrust {
    fn default() -> UpstreamTrust {
        UpstreamTrust {
            public_roots: true,
            bundles: Vec::new(),
            pems: Vec::new(),
            extra: Vec::new(),
        }
    }
}

/// The TLS client towards real hosts.
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    base: Arc<ClientConfig>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl UpstreamTls {
    pub fn new(trust: &UpstreamTrust) -> Result<UpstreamTls, TlsError> {
        let mut roots = RootCertStore::empty();
        if trust.public_roots {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        for path in &trust.bundles {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|source| TlsError::Bundle {
                    path: path.clone(),
                    source,
                })?;
            // A bundle may hold certificates rustls cannot use as roots; the rest still count.
            roots.add_parsable_certificates(certs);
        }
        for (shown, pem) in &trust.pems {
            let certs = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|source| TlsError::Bundle {
                    path: PathBuf::from(shown),
                    source,
                })?;
            roots.add_parsable_certificates(certs);
        }
        for der in &trust.extra {
            roots.add(der.clone()).map_err(TlsError::Config)?;
        }
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(UpstreamTls {
            base: Arc::new(config),
        })
    }

    /// TLS to `name` over `io`, offering `alpn`.
    pub async fn connect<IO>(
        &self,
        io: IO,
        name: &Name,
        alpn: &[&[u8]],
    ) -> Result<client::TlsStream<IO>, TlsError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let mut config = (*self.base).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let server =
            ServerName::try_from(name.as_str().to_string()).map_err(|_| TlsError::Upstream {
                name: name.to_string(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a DNS name"),
            })?;
        TlsConnector::from(Arc::new(config))
            .connect(server, io)
            .await
            .map_err(|source| TlsError::Upstream {
                name: name.to_string(),
                source,
            })
    }
}

/// The box's ClientHello, read before anything is answered.
pub struct BoxHello<IO> {
    start: tokio_rustls::StartHandshake<IO>,
    /// The application protocols the box offered that the broker speaks, in its order.
    pub alpn: Vec<&'static [u8]>,
}

impl<IO> std::fmt::Debug for BoxHello<IO> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoxHello")
            .field("alpn", &self.alpn)
            .finish_non_exhaustive()
    }
}

/// Reads the box's ClientHello; its SNI must be `name` (SNI is mandatory on intercepted names:
/// without it the broker cannot know the box meant this host).
pub async fn read_hello<IO>(io: IO, name: &Name) -> Result<BoxHello<IO>, TlsError>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io);
    let start = tokio::time::timeout(FIRST_FLIGHT, acceptor)
        .await
        .map_err(|_| TlsError::HelloTimeout)?
        .map_err(TlsError::Hello)?;
    let hello = start.client_hello();
    check_sni(&hello, name)?;
    let alpn = hello
        .alpn()
        .map(|it| {
            it.filter_map(|p| match p {
                H2 => Some(H2),
                HTTP11 => Some(HTTP11),
                _ => None,
            })
            .collect()
        })
        .unwrap_or_default();
    Ok(BoxHello { start, alpn })
}

fn check_sni(hello: &ClientHello<'_>, name: &Name) -> Result<(), TlsError> {
    let got = hello.server_name();
    match got.map(Name::parse) {
        Some(Ok(n)) if n == *name => Ok(()),
        _ => Err(TlsError::SniMismatch {
            expected: name.to_string(),
            got: got.map(str::to_string),
        }),
    }
}

/// Finishes the box's handshake with the CA's leaf for `name`, offering only `alpn` (the
/// protocol the upstream chose when the box offered it, so both sides speak the same one).
pub async fn accept_box<IO>(
    hello: BoxHello<IO>,
    ca: &Ca,
    name: &Name,
    alpn: Option<&[u8]>,
) -> Result<server::TlsStream<IO>, TlsError>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let leaf = ca.leaf(name).map_err(|source| TlsError::Leaf {
        name: name.to_string(),
        source,
    })?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(OneLeaf(leaf)));
    config.alpn_protocols = alpn.map(|p| vec![p.to_vec()]).unwrap_or_default();
    hello
        .start
        .into_stream(Arc::new(config))
        .await
        .map_err(TlsError::BoxHandshake)
}

/// The one leaf an intercepted connection presents.
#[derive(Debug)]
struct OneLeaf(Arc<CertifiedKey>);

impl ResolvesServerCert for OneLeaf {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}
