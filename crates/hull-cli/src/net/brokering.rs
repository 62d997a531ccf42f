//! The gateway's credential brokering: the broker a start line asks for (its CA from the files
//! of `$HULL_HOME/ca` the supervisor handed over, its upstream trust from the public roots and
//! the host's bundles, read before the gateway confines itself) and the flow handler that intercepts a connection to a host a
//! secret or a rule is for and splices every other one untouched.

use std::io::Write;
use std::sync::{Arc, Mutex};

use hull_net::broker::{Broker, BrokerSpec};
use hull_net::flow::{FlowHandler, FlowMeta};
use hull_net::rules::TransformSpec;
use hull_net::upstream::{Boxed, Upstream};
use tokio::io::DuplexStream;

use super::wire::Start;

/// Why brokering could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BrokeringError {
    /// The spec is not quoted: it holds the secrets' values.
    #[error("a malformed broker spec (at line {line}, column {column})")]
    Spec { line: usize, column: usize },
    #[error("transformations must be a list")]
    NotAList,
    /// Not quoted: it can hold a credential.
    #[error("transformation {index} is not one (hosts, path, method, query and headers to match; action; headers to set)")]
    Transformation { index: usize },
    #[error("credential brokering needs the CA's files")]
    NoCa,
    #[error(transparent)]
    Ca(#[from] hull_net::ca::CaError),
    #[error(transparent)]
    Tls(#[from] hull_net::tls::TlsError),
    #[error(transparent)]
    Broker(#[from] hull_net::broker::BrokerError),
}

/// The broker `start` asks for, if any, logging to `log`. Reads files: before confinement.
/// The host's system bundles (the distributions' paths, [`super::bundles::SYSTEM_BUNDLES`]),
/// read now (before the gateway confines itself): (path, text).
pub fn host_bundles() -> Vec<(String, Vec<u8>)> {
    super::bundles::SYSTEM_BUNDLES
        .iter()
        .map(|rel| format!("/{rel}"))
        .filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b)))
        .collect()
}

/// The broker `start` asks for, with the CA's files (`ca`: certificate, key) and the host's
/// bundles read ahead.
pub fn broker_of(
    start: &Start,
    log: Option<std::fs::File>,
    ca: Option<(std::fs::File, std::fs::File)>,
    host: Vec<(String, Vec<u8>)>,
) -> Result<Option<Broker>, BrokeringError> {
    let Some(v) = &start.broker else {
        return Ok(None);
    };
    let spec: BrokerSpec = serde_json::from_value(v.clone()).map_err(|e| BrokeringError::Spec {
        line: e.line(),
        column: e.column(),
    })?;
    let (cert, key) = ca.ok_or(BrokeringError::NoCa)?;
    let shown = start.ca_dir.clone().unwrap_or_default();
    let ca = hull_net::ca::Ca::from_files(&cert, &key, &shown)?;
    let mut pems = host;
    pems.extend(
        start
            .upstream_pems
            .iter()
            .map(|(p, t)| (p.clone(), t.as_bytes().to_vec())),
    );
    let upstream = hull_net::tls::UpstreamTls::new(&hull_net::tls::UpstreamTrust {
        public_roots: true,
        bundles: Vec::new(),
        pems,
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

/// Intercepts connections to the broker's hosts, splices the rest. Its rules can be replaced
/// while the gateway runs (`set_transformations`): every later request takes the new ones.
#[derive(Debug)]
pub struct Brokering(Broker);

impl Brokering {
    pub fn new(broker: Broker) -> Brokering {
        Brokering(broker)
    }

    /// Replaces the transformations (`TransformSpec`s as JSON), keeping the secrets. A spec
    /// that does not parse is named by its index only: its literal values can be credentials,
    /// which a parse error could quote.
    pub fn set_transformations(&self, v: serde_json::Value) -> Result<(), BrokeringError> {
        let serde_json::Value::Array(list) = v else {
            return Err(BrokeringError::NotAList);
        };
        let specs = list
            .into_iter()
            .enumerate()
            .map(|(index, t)| {
                serde_json::from_value::<TransformSpec>(t)
                    .map_err(|_| BrokeringError::Transformation { index })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.0.set_rules(specs).map_err(BrokeringError::Broker)
    }
}

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

/// `current` with `added` merged in, as the AI SDK's `addRequestTransformations` merges: a
/// transformation with the same match and the same header names (case aside) replaces the one
/// there; others are appended in order.
pub fn merge_transformations(
    current: &[serde_json::Value],
    added: Vec<serde_json::Value>,
) -> Vec<serde_json::Value> {
    let mut out = current.to_vec();
    for a in added {
        let id = identity(&a);
        match out.iter().position(|c| identity(c) == id) {
            Some(i) => out[i] = a,
            None => out.push(a),
        }
    }
    out
}

/// A transformation's identity: its match (keys sorted at every level) and its header names,
/// lower-cased and sorted.
fn identity(t: &serde_json::Value) -> (String, Vec<String>) {
    fn canonical(v: &serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => {
                let sorted: std::collections::BTreeMap<&String, serde_json::Value> =
                    m.iter().map(|(k, v)| (k, canonical(v))).collect();
                serde_json::to_value(sorted).unwrap_or(serde_json::Value::Null)
            }
            serde_json::Value::Array(a) => a.iter().map(canonical).collect(),
            other => other.clone(),
        }
    }
    let matched = canonical(t.get("match").unwrap_or(&serde_json::Value::Null)).to_string();
    let mut names: Vec<String> = t
        .get("headers")
        .and_then(serde_json::Value::as_object)
        .map(|h| h.keys().map(|k| k.to_ascii_lowercase()).collect())
        .unwrap_or_default();
    names.sort();
    (matched, names)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn add_replaces_the_same_match_and_header_names_and_appends_the_rest() {
        let a = json!({"match": {"hosts": ["a.test"], "method": "GET"}, "headers": {"X-Key": "1"}});
        let b = json!({"match": {"hosts": ["b.test"]}, "headers": {"x-key": "2"}});
        // The same match written in another key order, the header name in another case.
        let a2 =
            json!({"match": {"method": "GET", "hosts": ["a.test"]}, "headers": {"x-key": "3"}});
        let a_other =
            json!({"match": {"hosts": ["a.test"], "method": "GET"}, "headers": {"x-other": "4"}});
        let got = super::merge_transformations(&[a, b.clone()], vec![a2.clone(), a_other.clone()]);
        assert_eq!(got, vec![a2, b, a_other]);
    }
}
