//! The gateway's credential brokering: the broker a start line asks for (its CA loaded from
//! `$HULL_HOME/ca`, its upstream trust from the public roots and the host's bundle, read before
//! the gateway confines itself) and the flow handler that intercepts a connection to a host a
//! secret or a rule is for and splices every other one untouched.

use std::io::Write;
use std::sync::{Arc, Mutex};

use hull_net::broker::{Broker, BrokerSpec};
use hull_net::flow::{FlowHandler, FlowMeta};
use hull_net::upstream::{Boxed, Upstream};
use tokio::io::DuplexStream;

use super::wire::Start;

/// The system bundles a host may have, read for the gateway's upstream trust.
const HOST_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Why brokering could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BrokeringError {
    /// The spec is not quoted: it holds the secrets' values.
    #[error("a malformed broker spec (at line {line}, column {column})")]
    Spec { line: usize, column: usize },
    #[error("credential brokering needs the CA's directory")]
    NoCa,
    #[error(transparent)]
    Ca(#[from] hull_net::ca::CaError),
    #[error(transparent)]
    Tls(#[from] hull_net::tls::TlsError),
    #[error(transparent)]
    Broker(#[from] hull_net::broker::BrokerError),
}

/// The broker `start` asks for, if any, logging to `log`. Reads files: before confinement.
pub fn broker_of(
    start: &Start,
    log: Option<std::fs::File>,
) -> Result<Option<Broker>, BrokeringError> {
    let Some(v) = &start.broker else {
        return Ok(None);
    };
    let spec: BrokerSpec = serde_json::from_value(v.clone()).map_err(|e| BrokeringError::Spec {
        line: e.line(),
        column: e.column(),
    })?;
    let dir = start.ca_dir.as_ref().ok_or(BrokeringError::NoCa)?;
    let ca = hull_net::ca::Ca::load_or_create(dir)?;
    let mut bundles: Vec<std::path::PathBuf> = HOST_BUNDLES
        .iter()
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_file())
        .collect();
    bundles.extend(start.upstream_bundles.iter().cloned());
    let upstream = hull_net::tls::UpstreamTls::new(&hull_net::tls::UpstreamTrust {
        public_roots: true,
        bundles,
        extra: Vec::new(),
    })?;
    let log = log.map(Mutex::new);
    let sink: hull_net::broker::LogSink = Arc::new(move |r: &hull_net::reqlog::Record| {
        if let Some(f) = &log {
            let mut f = f.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = f.write_all(r.line().as_bytes());
        }
    });
    Ok(Some(Broker::new(spec, Arc::new(ca), upstream, sink)?))
}

/// Intercepts connections to the broker's hosts, splices the rest.
#[derive(Debug)]
pub struct Brokering(pub Broker);

impl FlowHandler for Brokering {
    fn handle(
        &self,
        mut box_side: DuplexStream,
        mut upstream: Box<dyn Upstream>,
        meta: FlowMeta,
    ) -> Boxed<std::io::Result<()>> {
        let broker = self.0.clone();
        Box::pin(async move {
            match meta.name {
                Some(name) if broker.wants_interception(&name) => {
                    hull_net::broker::intercept(box_side, upstream, &name, &broker)
                        .await
                        .map(drop)
                        .map_err(|e| std::io::Error::other(hull_api::Chain(&e).to_string()))
                }
                _ => tokio::io::copy_bidirectional(&mut box_side, &mut upstream)
                    .await
                    .map(drop),
            }
        })
    }
}
