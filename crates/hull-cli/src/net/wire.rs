//! What a supervisor and its box's gateway process (`hull __net`) say to each other: JSON lines
//! on the gateway's stdin (the [`Start`] first, then [`Control`]s) and stdout ([`Answer`]s, one
//! per line received). The TAP descriptor and the connection log (when there is one) travel on
//! the socket at the gateway's fd 3 (`SCM_RIGHTS`); nothing of either is ever on a command line.

use serde::{Deserialize, Serialize};

/// An egress policy as the caller spelled it (`hull_net::Policy::new` judges each entry).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySpec {
    /// `deny-all`, `allow-all` or `custom`.
    pub mode: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_cidrs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_cidrs: Vec<String>,
}

impl PolicySpec {
    /// The policy it names, or why not (naming the entry).
    pub fn policy(&self) -> Result<hull_net::Policy, hull_net::PolicyError> {
        hull_net::Policy::new(
            hull_net::Mode::parse(&self.mode)?,
            &self.allow_hosts,
            &self.allow_cidrs,
            &self.deny_cidrs,
        )
    }
}

/// The gateway's first line: everything it needs before it confines itself. Its `broker`
/// holds secrets' values (it crosses only the gateway's stdin pipe): never printed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    pub policy: PolicySpec,
    /// The box's TCP ports to publish on the host's 127.0.0.1.
    #[serde(default)]
    pub ports: Vec<u16>,
    /// Live connections at most (held SYNs, open and published-port ones).
    pub max_tcp_connections: usize,
    /// The TAP's IP MTU.
    pub mtu: usize,
    /// Name servers the gateway resolves through instead of the host's `/etc/resolv.conf`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<std::net::SocketAddr>,
    /// Credential brokering (`hull_net::broker::BrokerSpec`, values and placeholders included):
    /// connections to the hosts it names are intercepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker: Option<serde_json::Value>,
    /// The CA's directory (`$HULL_HOME/ca`): the supervisor opens its two files and hands
    /// them to the gateway, which opens no path (it is confined before its start line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_dir: Option<std::path::PathBuf>,
    /// PEM bundles the gateway trusts upstream besides the public roots and the host's bundle,
    /// read by the supervisor: (the file's path, its text).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_pems: Vec<(String, String)>,
    /// The CA's two files, opened once when the box's brokering was set up (so every box of a
    /// session gets the CA its trust holds, even after `hull ca rotate`): handed over as
    /// descriptors, never on the wire.
    #[serde(skip)]
    pub ca_files: CaFiles,
    /// The host's HTTP proxy the gateway tunnels upstream connections through (`HTTPS_PROXY`,
    /// [`super::proxy_env`]); its credentials cross only this pipe too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyStart>,
}

/// [`Start::ca_files`]: the CA's (certificate, key), open.
#[derive(Clone, Default)]
pub struct CaFiles(pub Option<std::sync::Arc<(std::fs::File, std::fs::File)>>);

/// The same open pair (or none on both sides).
impl PartialEq for CaFiles {
    fn eq(&self, other: &CaFiles) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for CaFiles {}

impl std::fmt::Debug for CaFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "CaFiles(open)"
        } else {
            "CaFiles(none)"
        })
    }
}

/// [`Start::proxy`]: `hull_net::proxy::Proxy` on the wire.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyStart {
    pub addr: std::net::SocketAddr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
    /// Addresses and CIDRs dialled directly (`NO_PROXY`'s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub direct: Vec<String>,
}

impl std::fmt::Debug for ProxyStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyStart")
            .field("addr", &self.addr)
            .field("credentials", &self.credentials.as_ref().map(|_| "(set)"))
            .field("direct", &self.direct)
            .finish()
    }
}

impl std::fmt::Debug for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Start")
            .field("policy", &self.policy)
            .field("ports", &self.ports)
            .field("max_tcp_connections", &self.max_tcp_connections)
            .field("mtu", &self.mtu)
            .field("dns", &self.dns)
            .field("broker", &self.broker.as_ref().map(|_| "<secrets>"))
            .field("ca_dir", &self.ca_dir)
            .field("proxy", &self.proxy)
            .finish_non_exhaustive()
    }
}

/// A request to a running gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Control {
    /// Replace the policy: new connections and DNS queries are judged by it.
    SetPolicy { policy: PolicySpec },
    /// Publish one more box port; answered with its host port.
    Publish { port: u16 },
    /// Withdraw a published port; answered with whether it was published.
    Withdraw { port: u16 },
    /// Replace the broker's request transformations (`hull_net::rules::TransformSpec`s, whose
    /// literal header values can be credentials: never printed); refused when the gateway was
    /// started without brokering.
    SetTransformations { transformations: Hidden },
}

/// A JSON value that may hold credentials: serialized as it is, shown as `<hidden>`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Hidden(pub serde_json::Value);

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

/// One answer line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The gateway serves the box: each published port as (box port, host port).
    Ready { ports: Vec<(u16, u16)> },
    /// A control request done: its value (a host port, whether a port was withdrawn), if any.
    Ok {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<serde_json::Value>,
    },
    /// Why the start or the request failed (the whole cause chain).
    Error { message: String },
}
