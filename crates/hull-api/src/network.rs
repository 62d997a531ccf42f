//! A box's network as a caller asks for it: `none` (loopback only, the default), `host` (the
//! host's network, an explicit relaxation), or one of the gateway's modes (`deny-all`,
//! `allow-all`, `custom`) with its egress policy, published ports and connection cap; and the
//! secrets the gateway brokers.
//!
//! The policy's entries are checked by `hull-net`'s own parser ([`hull_net::Policy::new`]), so a
//! request this crate accepts is a policy the gateway can build, and there is one definition of
//! a host pattern and a CIDR. Each refusal names the part at fault ([`Part`]); every front end
//! spells it as its caller did (`--allow-host` in `hull run`, `allow_hosts` in `hull serve`'s
//! `network` object).
//!
//! A secret's value never leaves through `Debug`, `Display` or `Serialize`: it is printed as
//! `<redacted>`, and serializing one fails, so only a reference (`env`) can be persisted.

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

pub use hull_net::Mode as GatewayMode;

/// The default cap on a box's concurrent TCP connections through the gateway.
pub const DEFAULT_MAX_TCP_CONNECTIONS: u32 = 1024;
/// The largest cap accepted (the gateway keeps per-connection state for each).
pub const MAX_TCP_CONNECTIONS: u32 = 65536;

/// `--network`'s values, `network`'s `mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkMode {
    None,
    Host,
    Gateway(GatewayMode),
}

impl NetworkMode {
    pub const NAMES: &'static str = "none, host, deny-all, allow-all or custom";

    pub fn parse(s: &str) -> Result<NetworkMode, UnknownNetwork> {
        match s {
            "none" => Ok(NetworkMode::None),
            "host" => Ok(NetworkMode::Host),
            other => GatewayMode::parse(other)
                .map(NetworkMode::Gateway)
                .map_err(|_| UnknownNetwork(other.to_string())),
        }
    }
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetworkMode::None => f.write_str("none"),
            NetworkMode::Host => f.write_str("host"),
            NetworkMode::Gateway(m) => write!(f, "{m}"),
        }
    }
}

/// Why a network name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}`: use none, host, deny-all, allow-all or custom")]
pub struct UnknownNetwork(pub String);

/// The box's network.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Network {
    /// A private network namespace with loopback only.
    #[default]
    None,
    /// The host's network: an explicit relaxation of the box.
    Host,
    /// A private network namespace whose only way out is hull-net's gateway.
    Gateway(Box<Gateway>),
}

impl Network {
    pub fn mode(&self) -> NetworkMode {
        match self {
            Network::None => NetworkMode::None,
            Network::Host => NetworkMode::Host,
            Network::Gateway(g) => NetworkMode::Gateway(g.mode()),
        }
    }
}

/// What the gateway is asked for: the policy (checked), its entries as the caller spelled them
/// (what is persisted and shown back), the published ports and the connection cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gateway {
    policy: hull_net::Policy,
    allow_hosts: Vec<String>,
    allow_cidrs: Vec<String>,
    deny_cidrs: Vec<String>,
    ports: Vec<u16>,
    max_tcp_connections: u32,
}

impl Gateway {
    pub fn mode(&self) -> GatewayMode {
        self.policy.mode()
    }
    /// The policy the gateway applies.
    pub fn policy(&self) -> &hull_net::Policy {
        &self.policy
    }
    pub fn allow_hosts(&self) -> &[String] {
        &self.allow_hosts
    }
    pub fn allow_cidrs(&self) -> &[String] {
        &self.allow_cidrs
    }
    pub fn deny_cidrs(&self) -> &[String] {
        &self.deny_cidrs
    }
    /// Box ports to publish on the host's 127.0.0.1, in the order given.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }
    pub fn max_tcp_connections(&self) -> u32 {
        self.max_tcp_connections
    }
}

/// A part of the network request, for the refusal that names it; each front end spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Mode,
    AllowHosts,
    AllowCidrs,
    DenyCidrs,
    Ports,
    MaxTcpConnections,
    Secrets,
}

impl Part {
    /// The key in `hull serve`'s `network` object (`secrets` is a parameter of its own).
    pub fn key(self) -> &'static str {
        match self {
            Part::Mode => "mode",
            Part::AllowHosts => "allow_hosts",
            Part::AllowCidrs => "allow_cidrs",
            Part::DenyCidrs => "deny_cidrs",
            Part::Ports => "ports",
            Part::MaxTcpConnections => "max_tcp_connections",
            Part::Secrets => "secrets",
        }
    }

    /// A request's own key: `network` for the mode (a name, or the object's `mode`), else
    /// [`Part::key`] (for refusals about two of a request's parameters, `network` and `secrets`).
    pub fn param(self) -> &'static str {
        match self {
            Part::Mode => "network",
            p => p.key(),
        }
    }

    /// The `hull run`/`hull create` flag.
    pub fn flag(self) -> &'static str {
        match self {
            Part::Mode => "--network",
            Part::AllowHosts => "--allow-host",
            Part::AllowCidrs => "--allow-cidr",
            Part::DenyCidrs => "--deny-cidr",
            Part::Ports => "--publish",
            Part::MaxTcpConnections => "--max-tcp-connections",
            Part::Secrets => "--secret",
        }
    }
}

/// A network request that cannot be built: the part at fault (and the part it contradicts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkError {
    pub part: Part,
    /// The other part of a contradiction (`--network none` with `--allow-host`).
    pub with: Option<(Part, String)>,
    pub why: String,
}

impl NetworkError {
    fn new(part: Part, why: impl fmt::Display) -> NetworkError {
        NetworkError {
            part,
            with: None,
            why: why.to_string(),
        }
    }

    /// The message with each part spelled by `spell` (`hull run`'s flags, the protocol's keys).
    pub fn spelled(&self, spell: fn(Part) -> &'static str) -> String {
        match &self.with {
            None => format!("{}: {}", spell(self.part), self.why),
            Some((mode_part, mode)) => format!(
                "{} {} with {}: {}",
                spell(*mode_part),
                mode,
                spell(self.part),
                self.why
            ),
        }
    }
}

impl fmt::Display for NetworkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spelled(Part::key))
    }
}

impl std::error::Error for NetworkError {}

/// The parts of a network request as a front end collected them, before they are checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkParts {
    /// `None`: not given (custom when hosts or allowed CIDRs are given, else `none`).
    pub mode: Option<NetworkMode>,
    pub allow_hosts: Vec<String>,
    pub allow_cidrs: Vec<String>,
    pub deny_cidrs: Vec<String>,
    pub ports: Vec<u64>,
    pub max_tcp_connections: Option<u64>,
}

/// The text of a policy error with its causes, as one line.
fn said(e: &hull_net::PolicyError) -> String {
    crate::error::Chain(e).to_string()
}

impl NetworkParts {
    /// Checks the parts and builds the network. `secrets` says whether secrets were given
    /// (they need a gateway mode too).
    pub fn build(self, secrets: bool) -> Result<Network, NetworkError> {
        use hull_net::{Policy, PolicyError};
        const NONE: [&str; 0] = [];
        let mode = self.mode.unwrap_or(
            if self.allow_hosts.is_empty() && self.allow_cidrs.is_empty() {
                NetworkMode::None
            } else {
                NetworkMode::Gateway(GatewayMode::Custom)
            },
        );
        let given = [
            (Part::AllowHosts, !self.allow_hosts.is_empty()),
            (Part::AllowCidrs, !self.allow_cidrs.is_empty()),
            (Part::DenyCidrs, !self.deny_cidrs.is_empty()),
            (Part::Ports, !self.ports.is_empty()),
            (Part::MaxTcpConnections, self.max_tcp_connections.is_some()),
            (Part::Secrets, secrets),
        ];
        let gateway_mode = match mode {
            NetworkMode::Gateway(m) => m,
            plain => {
                return match given.iter().find(|(_, g)| *g) {
                    Some((part, _)) => Err(NetworkError {
                        part: *part,
                        with: Some((Part::Mode, plain.to_string())),
                        why: "this needs the gateway: use deny-all, allow-all or custom".into(),
                    }),
                    None if plain == NetworkMode::Host => Ok(Network::Host),
                    None => Ok(Network::None),
                }
            }
        };
        // Each list alone through the policy's parser, so a bad entry is named with its list.
        Policy::new(GatewayMode::Custom, &self.allow_hosts, &NONE, &NONE)
            .map_err(|e| NetworkError::new(Part::AllowHosts, said(&e)))?;
        Policy::new(GatewayMode::Custom, &NONE, &self.allow_cidrs, &NONE)
            .map_err(|e| NetworkError::new(Part::AllowCidrs, said(&e)))?;
        Policy::new(GatewayMode::Custom, &NONE, &NONE, &self.deny_cidrs)
            .map_err(|e| NetworkError::new(Part::DenyCidrs, said(&e)))?;
        let policy = Policy::new(
            gateway_mode,
            &self.allow_hosts,
            &self.allow_cidrs,
            &self.deny_cidrs,
        )
        .map_err(|e| {
            let part = match e {
                PolicyError::DenyAllWithAllowances if self.allow_hosts.is_empty() => {
                    Part::AllowCidrs
                }
                _ => Part::AllowHosts,
            };
            NetworkError {
                part,
                with: Some((Part::Mode, gateway_mode.to_string())),
                why: said(&e),
            }
        })?;
        let mut ports = Vec::new();
        for p in self.ports {
            let port = u16::try_from(p).ok().filter(|p| *p != 0).ok_or_else(|| {
                NetworkError::new(Part::Ports, format!("{p}: a port is 1 to 65535"))
            })?;
            if ports.contains(&port) {
                return Err(NetworkError::new(
                    Part::Ports,
                    format!("{port} is given twice: publish each box port once"),
                ));
            }
            ports.push(port);
        }
        let max_tcp_connections = match self.max_tcp_connections {
            None => DEFAULT_MAX_TCP_CONNECTIONS,
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|n| (1..=MAX_TCP_CONNECTIONS).contains(n))
                .ok_or_else(|| {
                    NetworkError::new(
                        Part::MaxTcpConnections,
                        format!("{n}: give 1 to {MAX_TCP_CONNECTIONS} (default {DEFAULT_MAX_TCP_CONNECTIONS})"),
                    )
                })?,
        };
        Ok(Network::Gateway(Box::new(Gateway {
            policy,
            allow_hosts: self.allow_hosts,
            allow_cidrs: self.allow_cidrs,
            deny_cidrs: self.deny_cidrs,
            ports,
            max_tcp_connections,
        })))
    }

    /// The parts of `network`'s object form; an unknown key is refused.
    fn from_object(m: &Map<String, Value>) -> Result<NetworkParts, String> {
        let mut p = NetworkParts::default();
        for (k, v) in m {
            let list = |v: &Value| -> Result<Vec<String>, String> {
                match v {
                    Value::Null => Ok(Vec::new()),
                    Value::Array(a) => a
                        .iter()
                        .map(|x| {
                            x.as_str().map(str::to_string).ok_or_else(|| {
                                format!("{k}: expected a list of strings, got {x} in it")
                            })
                        })
                        .collect(),
                    other => Err(format!("{k}: expected a list of strings, got {other}")),
                }
            };
            match k.as_str() {
                "mode" => {
                    p.mode = match v {
                        Value::Null => None,
                        Value::String(s) => {
                            Some(NetworkMode::parse(s).map_err(|e| format!("mode: {e}"))?)
                        }
                        other => {
                            return Err(format!("mode: expected one of {}, got {other}", NetworkMode::NAMES))
                        }
                    }
                }
                "allow_hosts" => p.allow_hosts = list(v)?,
                "allow_cidrs" => p.allow_cidrs = list(v)?,
                "deny_cidrs" => p.deny_cidrs = list(v)?,
                "ports" => {
                    p.ports = match v {
                        Value::Null => Vec::new(),
                        Value::Array(a) => a
                            .iter()
                            .map(|x| {
                                x.as_u64().ok_or_else(|| {
                                    format!("ports: {x}: a port is a number, 1 to 65535")
                                })
                            })
                            .collect::<Result<_, _>>()?,
                        other => {
                            return Err(format!("ports: expected a list of port numbers, got {other}"))
                        }
                    }
                }
                "max_tcp_connections" => {
                    p.max_tcp_connections = match v {
                        Value::Null => None,
                        other => Some(other.as_u64().ok_or_else(|| {
                            format!("max_tcp_connections: expected a positive integer, got {other}")
                        })?),
                    }
                }
                other => {
                    return Err(format!(
                        "unknown key `{other}` (mode, allow_hosts, allow_cidrs, deny_cidrs, ports, max_tcp_connections)"
                    ))
                }
            }
        }
        Ok(p)
    }
}

/// `network` on the wire: `null` (none), a mode's name, or an object
/// `{mode, allow_hosts, allow_cidrs, deny_cidrs, ports, max_tcp_connections}`; with
/// `booleans`, `true`/`false` too (the Sandbox's `network=` flag: host / none).
pub fn from_value(v: &Value, booleans: bool) -> Result<Network, String> {
    match v {
        Value::Null => Ok(Network::None),
        Value::Bool(true) if booleans => Ok(Network::Host),
        Value::Bool(false) if booleans => Ok(Network::None),
        Value::String(s) => {
            let mode = NetworkMode::parse(s).map_err(|e| e.to_string())?;
            NetworkParts {
                mode: Some(mode),
                ..NetworkParts::default()
            }
            .build(false)
            .map_err(|e| e.to_string())
        }
        Value::Object(m) => NetworkParts::from_object(m)?
            .build(false)
            .map_err(|e| e.to_string()),
        other => Err(format!(
            "expected {}{}, or an object {{mode, allow_hosts, allow_cidrs, deny_cidrs, ports, max_tcp_connections}}, got {other}",
            NetworkMode::NAMES,
            if booleans { ", true/false" } else { "" }
        )),
    }
}

/// The wire form back: `"none"`, `"host"`, or the object with every part (what a named
/// sandbox's configuration holds).
pub fn to_value(n: &Network) -> Value {
    match n {
        Network::None => Value::String("none".into()),
        Network::Host => Value::String("host".into()),
        Network::Gateway(g) => serde_json::json!({
            "mode": g.mode().to_string(),
            "allow_hosts": g.allow_hosts,
            "allow_cidrs": g.allow_cidrs,
            "deny_cidrs": g.deny_cidrs,
            "ports": g.ports,
            "max_tcp_connections": g.max_tcp_connections,
        }),
    }
}

impl Serialize for Network {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        to_value(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Network {
    /// The persisted form ([`to_value`]): a name or the object, never a boolean.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Network, D::Error> {
        from_value(&Value::deserialize(d)?, false).map_err(D::Error::custom)
    }
}

/// A value that is never printed: `Debug` shows `<redacted>`, and it has no `Display` or
/// `Serialize`. [`Hidden::expose`] is for the one place that hands it to the gateway.
#[derive(Clone, PartialEq, Eq)]
pub struct Hidden(String);

impl Hidden {
    /// A value read elsewhere (a named sandbox's keeper gets its secrets' values from the
    /// process that starts it).
    pub fn new(value: String) -> Hidden {
        Hidden(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Hidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where a secret's value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretValue {
    /// The value itself (over the protocol, from an SDK's memory); never persisted.
    Value(Hidden),
    /// The name of an environment variable of the process that starts the box (`env:NAME`):
    /// the only form a named sandbox persists.
    Env(String),
}

/// The header a secret goes into when none is named.
pub const DEFAULT_SECRET_HEADER: &str = "authorization";

/// A secret the gateway brokers: the box sees a placeholder in the environment variable
/// `name`; on a request to one of `hosts`, the gateway puts the value into `headers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Secret {
    pub name: String,
    pub value: SecretValue,
    pub hosts: Vec<String>,
    pub headers: Vec<String>,
}

/// An environment variable's name: letters, digits and `_`, not starting with a digit.
fn env_name_ok(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// An HTTP header name (a token of RFC 9110).
fn header_ok(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

impl Secret {
    /// A secret from its parts, each checked; `headers` empty means [`DEFAULT_SECRET_HEADER`].
    pub fn new(
        name: &str,
        value: SecretValue,
        hosts: Vec<String>,
        headers: Vec<String>,
    ) -> Result<Secret, String> {
        if !env_name_ok(name) {
            return Err(format!(
                "name `{name}`: the box's environment variable for the placeholder: letters, digits and `_`, not starting with a digit"
            ));
        }
        if let SecretValue::Env(var) = &value {
            if !env_name_ok(var) {
                return Err(format!(
                    "secret {name}: env `{var}` is not an environment variable's name"
                ));
            }
        }
        if let SecretValue::Value(v) = &value {
            if v.0.is_empty() || v.0.contains(['\0', '\r', '\n']) {
                return Err(format!(
                    "secret {name}: the value must be non-empty, without NUL or line breaks (it goes into a header)"
                ));
            }
        }
        if hosts.is_empty() {
            return Err(format!(
                "secret {name}: give the hosts it is for (`api.example.com`, `*.example.com`)"
            ));
        }
        for h in &hosts {
            hull_net::HostPattern::parse(h).map_err(|e| {
                format!("secret {name}: host `{h}` is not a host name or `*.` pattern: {e}")
            })?;
        }
        for h in &headers {
            if !header_ok(h) {
                return Err(format!("secret {name}: `{h}` is not an HTTP header name"));
            }
        }
        let headers = if headers.is_empty() {
            vec![DEFAULT_SECRET_HEADER.to_string()]
        } else {
            headers
        };
        Ok(Secret {
            name: name.to_string(),
            value,
            hosts,
            headers,
        })
    }

    /// `hull run --secret`'s form: `NAME[=env:VAR]@HOST[,HOST...][:HEADER[,HEADER...]]`. A
    /// value itself is refused on a command line (`ps` shows it): only a reference.
    pub fn parse_flag(text: &str) -> Result<Secret, String> {
        let (left, right) = text
            .split_once('@')
            .ok_or_else(|| format!("`{text}`: write NAME=env:VAR@HOST[,HOST...][:HEADER,...]"))?;
        let (name, var) = match left.split_once('=') {
            None => (left, left),
            Some((n, v)) => match v.strip_prefix("env:") {
                Some(var) => (n, var),
                None => {
                    return Err(format!(
                        "`{n}=...`: a value on the command line is visible to every user (`ps`); export it and write {n}=env:VAR"
                    ))
                }
            },
        };
        let (hosts, headers) = match right.split_once(':') {
            Some((h, hd)) => (h, hd),
            None => (right, ""),
        };
        let split = |s: &str| -> Vec<String> {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect()
        };
        Secret::new(
            name,
            SecretValue::Env(var.to_string()),
            split(hosts),
            split(headers),
        )
    }

    /// The value, read from the environment for an `env` reference (the variable must be set).
    pub fn resolve(&self) -> Result<Hidden, String> {
        match &self.value {
            SecretValue::Value(v) => Ok(v.clone()),
            SecretValue::Env(var) => std::env::var(var).map(Hidden).map_err(|_| {
                format!(
                    "secret {}: no variable {var} in this environment (or not UTF-8): export it first",
                    self.name
                )
            }),
        }
    }
}

/// `secrets` on the wire: a list of `{name, value | env, hosts, headers}`.
pub fn secrets_from_value(v: &Value) -> Result<Vec<Secret>, String> {
    let list = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(a) => a,
        other => {
            return Err(format!(
                "expected a list of {{name, value or env, hosts, headers}}, got {}",
                kind(other)
            ))
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, s)| {
            let m = s
                .as_object()
                .ok_or_else(|| format!("[{i}]: expected {{name, value or env, hosts, headers}}"))?;
            if let Some(k) = m
                .keys()
                .find(|k| !["name", "value", "env", "hosts", "headers"].contains(&k.as_str()))
            {
                return Err(format!("[{i}]: unknown key `{k}` (name, value, env, hosts, headers)"));
            }
            let text = |k: &str| -> Result<Option<String>, String> {
                match m.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(other) => Err(format!("[{i}].{k}: expected a string, got {}", kind(other))),
                }
            };
            let texts = |k: &str| -> Result<Vec<String>, String> {
                match m.get(k) {
                    None | Some(Value::Null) => Ok(Vec::new()),
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|x| {
                            x.as_str().map(str::to_string).ok_or_else(|| {
                                format!("[{i}].{k}: expected a list of strings")
                            })
                        })
                        .collect(),
                    Some(_) => Err(format!("[{i}].{k}: expected a list of strings")),
                }
            };
            let name = text("name")?.ok_or_else(|| format!("[{i}]: `name` is missing"))?;
            let value = match (text("value")?, text("env")?) {
                (Some(v), None) => SecretValue::Value(Hidden(v)),
                (None, Some(e)) => SecretValue::Env(e),
                _ => {
                    return Err(format!(
                        "[{i}] ({name}): give exactly one of `value` (the secret) and `env` (the name of a variable of hull's environment)"
                    ))
                }
            };
            Secret::new(&name, value, texts("hosts")?, texts("headers")?)
                .map_err(|e| format!("[{i}]: {e}"))
        })
        .collect()
}

/// A JSON value's kind, for a refusal that must not echo a secret back.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

impl Serialize for Secret {
    /// Only a reference is ever written: serializing a secret that holds its value fails.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeMap};
        let SecretValue::Env(var) = &self.value else {
            return Err(S::Error::custom(format!(
                "secret {}: its value is never written out (only an env reference is)",
                self.name
            )));
        };
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("env", var)?;
        m.serialize_entry("hosts", &self.hosts)?;
        m.serialize_entry("headers", &self.headers)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        let v = Value::deserialize(d)?;
        let mut list = secrets_from_value(&Value::Array(vec![v])).map_err(D::Error::custom)?;
        Ok(list.remove(0))
    }
}

/// `secrets` as a serde field: the list form of [`secrets_from_value`].
pub fn secrets_field<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Secret>, D::Error> {
    secrets_from_value(&Value::deserialize(d)?).map_err(D::Error::custom)
}

/// `network` as a serde field of `run` (a name or the object).
pub fn network_field<'de, D: Deserializer<'de>>(d: D) -> Result<Network, D::Error> {
    from_value(&Value::deserialize(d)?, false).map_err(D::Error::custom)
}

/// `network` as a serde field of `sandbox.create` (also `true`/`false`).
pub fn network_flag_field<'de, D: Deserializer<'de>>(d: D) -> Result<Network, D::Error> {
    from_value(&Value::deserialize(d)?, true).map_err(D::Error::custom)
}

/// Secrets need a gateway mode: refused naming both keys otherwise.
pub fn check_secrets_with(network: &Network, secrets: &[Secret]) -> Result<(), NetworkError> {
    match network {
        Network::Gateway(_) => Ok(()),
        _ if secrets.is_empty() => Ok(()),
        other => Err(NetworkError {
            part: Part::Secrets,
            with: Some((Part::Mode, other.mode().to_string())),
            why: "secrets are brokered by the gateway: use deny-all, allow-all or custom".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn net(v: Value) -> Result<Network, String> {
        from_value(&v, false)
    }

    fn gateway(v: Value) -> Gateway {
        match net(v.clone()) {
            Ok(Network::Gateway(g)) => *g,
            other => panic!("{v}: {other:?}"),
        }
    }

    #[test]
    fn names_and_objects_read_as_the_modes() {
        assert_eq!(net(Value::Null), Ok(Network::None));
        assert_eq!(net(json!("none")), Ok(Network::None));
        assert_eq!(net(json!("host")), Ok(Network::Host));
        assert_eq!(from_value(&json!(true), true), Ok(Network::Host));
        assert!(net(json!(true)).is_err(), "run takes no boolean");
        let g = gateway(json!("deny-all"));
        assert_eq!(
            (g.mode(), g.max_tcp_connections()),
            (GatewayMode::DenyAll, DEFAULT_MAX_TCP_CONNECTIONS)
        );
        let g = gateway(json!({
            "mode": "custom", "allow_hosts": ["api.example.com", "*.pypi.org"],
            "allow_cidrs": ["203.0.113.0/24"], "deny_cidrs": ["203.0.113.7"],
            "ports": [8080, 3000], "max_tcp_connections": 16,
        }));
        assert_eq!(g.mode(), GatewayMode::Custom);
        assert_eq!(g.allow_hosts(), ["api.example.com", "*.pypi.org"]);
        assert_eq!(
            (g.ports(), g.max_tcp_connections()),
            (&[8080, 3000][..], 16)
        );
        // The policy carries both lists; which wins is the policy's business.
        assert_eq!(g.deny_cidrs(), ["203.0.113.7"]);
        assert!(!g
            .policy()
            .judge_literal("203.0.113.7".parse().unwrap(), &[])
            .allowed());
        // Hosts without a mode are custom; a mode's name in the object alone is that mode.
        assert_eq!(
            gateway(json!({"allow_hosts": ["a.com"]})).mode(),
            GatewayMode::Custom
        );
        assert_eq!(net(json!({"mode": "host"})), Ok(Network::Host));
        assert_eq!(net(json!({})), Ok(Network::None));
    }

    #[test]
    fn each_bad_entry_is_refused_naming_its_key_and_the_entry() {
        for (v, said) in [
            (json!("maybe"), "`maybe`: use none, host, deny-all"),
            (json!({"mode": "allow_all"}), "mode: `allow_all`"),
            (
                json!({"allow_hosts": ["ok.com", "a..b"]}),
                "allow_hosts: allowed host `a..b`",
            ),
            (
                json!({"allow_hosts": ["*.*.com"]}),
                "allow_hosts: allowed host `*.*.com`",
            ),
            (
                json!({"allow_hosts": ["api.*.com"]}),
                "allow_hosts: allowed host `api.*.com`",
            ),
            (
                json!({"allow_hosts": "a.com"}),
                "allow_hosts: expected a list of strings",
            ),
            (
                json!({"mode": "custom", "allow_cidrs": ["10.0.0.0/33"]}),
                "allow_cidrs: CIDR `10.0.0.0/33`",
            ),
            (
                json!({"mode": "allow-all", "deny_cidrs": ["10.0.0.x"]}),
                "deny_cidrs: CIDR `10.0.0.x`",
            ),
            (
                json!({"mode": "deny-all", "ports": [0]}),
                "ports: 0: a port is 1 to 65535",
            ),
            (
                json!({"mode": "deny-all", "ports": [70000]}),
                "ports: 70000",
            ),
            (
                json!({"mode": "deny-all", "ports": [80, 80]}),
                "ports: 80 is given twice",
            ),
            (
                json!({"mode": "deny-all", "ports": ["80"]}),
                "ports: \"80\"",
            ),
            (
                json!({"mode": "deny-all", "max_tcp_connections": 0}),
                "max_tcp_connections: 0: give 1 to",
            ),
            (
                json!({"mode": "deny-all", "colour": 1}),
                "unknown key `colour`",
            ),
            (
                json!({"mode": "none", "allow_hosts": ["a.com"]}),
                "mode none with allow_hosts: this needs the gateway",
            ),
            (
                json!({"mode": "host", "ports": [80]}),
                "mode host with ports",
            ),
            (
                json!({"mode": "deny-all", "allow_hosts": ["a.com"]}),
                "mode deny-all with allow_hosts: deny-all allows nothing",
            ),
            (
                json!({"mode": "deny-all", "allow_cidrs": ["1.2.3.4"]}),
                "mode deny-all with allow_cidrs",
            ),
            (
                json!({"mode": "allow-all", "allow_hosts": ["a.com"]}),
                "mode allow-all with allow_hosts: allowed hosts need the custom mode",
            ),
        ] {
            let e = net(v.clone()).unwrap_err();
            assert!(e.starts_with(said) || e.contains(said), "{v}: {e}");
        }
        // A custom mode with nothing allowed is a valid (if closed) policy.
        assert_eq!(gateway(json!("custom")).mode(), GatewayMode::Custom);
    }

    #[test]
    fn flags_spell_the_parts_as_flags() {
        let e = NetworkParts {
            mode: Some(NetworkMode::None),
            allow_hosts: vec!["x.com".into()],
            ..NetworkParts::default()
        }
        .build(false)
        .unwrap_err();
        assert_eq!(
            e.spelled(Part::flag),
            "--network none with --allow-host: this needs the gateway: use deny-all, allow-all or custom"
        );
        let e = NetworkParts {
            mode: Some(NetworkMode::Host),
            ..NetworkParts::default()
        }
        .build(true)
        .unwrap_err();
        assert!(
            e.spelled(Part::flag)
                .starts_with("--network host with --secret"),
            "{e}"
        );
    }

    #[test]
    fn the_persisted_form_reads_back_as_itself() {
        for v in [
            json!("none"),
            json!("host"),
            json!({"mode": "custom", "allow_hosts": ["*.example.com"], "allow_cidrs": [], "deny_cidrs": ["10.0.0.0/8"], "ports": [8080], "max_tcp_connections": 1024}),
        ] {
            let n = net(v.clone()).unwrap();
            assert_eq!(to_value(&n), v);
            let back: Network = serde_json::from_value(serde_json::to_value(&n).unwrap()).unwrap();
            assert_eq!(back, n);
        }
    }

    #[test]
    fn a_secret_value_is_never_printed_or_serialized() {
        let list = secrets_from_value(&json!([
            {"name": "OPENAI_API_KEY", "value": "sk-live-123", "hosts": ["api.openai.com"]},
            {"name": "GH", "env": "GH_TOKEN", "hosts": ["*.github.com"], "headers": ["X-Token"]},
        ]))
        .unwrap();
        assert_eq!(list[0].headers, [DEFAULT_SECRET_HEADER]);
        let debug = format!("{list:?}");
        assert!(
            !debug.contains("sk-live-123") && debug.contains("<redacted>"),
            "{debug}"
        );
        let e = serde_json::to_string(&list).unwrap_err().to_string();
        assert!(
            !e.contains("sk-live-123") && e.contains("never written"),
            "{e}"
        );
        assert_eq!(
            serde_json::to_value(&list[1]).unwrap(),
            json!({"name": "GH", "env": "GH_TOKEN", "hosts": ["*.github.com"], "headers": ["X-Token"]})
        );
        // A refusal of a bad value does not echo it.
        let e = secrets_from_value(&json!([{"name": "K", "value": 12345678, "hosts": ["a.com"]}]))
            .unwrap_err();
        assert!(!e.contains("12345678"), "{e}");
    }

    #[test]
    fn bad_secrets_are_refused_naming_the_entry() {
        for (v, said) in [
            (
                json!({"name": "1X", "env": "A", "hosts": ["a.com"]}),
                "name `1X`",
            ),
            (
                json!({"name": "K", "hosts": ["a.com"]}),
                "give exactly one of `value`",
            ),
            (
                json!({"name": "K", "env": "A", "value": "v", "hosts": ["a.com"]}),
                "give exactly one of",
            ),
            (json!({"name": "K", "env": "A"}), "give the hosts"),
            (
                json!({"name": "K", "env": "A", "hosts": ["a..b"]}),
                "host `a..b`",
            ),
            (
                json!({"name": "K", "env": "A", "hosts": ["a.com"], "headers": ["bad header"]}),
                "`bad header` is not an HTTP header",
            ),
            (
                json!({"name": "K", "env": "A-B", "hosts": ["a.com"]}),
                "env `A-B`",
            ),
            (
                json!({"name": "K", "env": "A", "hosts": ["a.com"], "path": "/"}),
                "unknown key `path`",
            ),
        ] {
            let e = secrets_from_value(&json!([v.clone()])).unwrap_err();
            assert!(e.contains(said), "{v}: {e}");
        }
    }

    #[test]
    fn the_secret_flag_takes_references_only() {
        let s = Secret::parse_flag(
            "OPENAI_API_KEY=env:MY_KEY@api.openai.com,*.openai.com:authorization,x-api-key",
        )
        .unwrap();
        assert_eq!(s.value, SecretValue::Env("MY_KEY".into()));
        assert_eq!(s.hosts, ["api.openai.com", "*.openai.com"]);
        assert_eq!(s.headers, ["authorization", "x-api-key"]);
        let s = Secret::parse_flag("TOKEN@a.com").unwrap();
        assert_eq!(
            (s.value, s.headers),
            (
                SecretValue::Env("TOKEN".into()),
                vec![DEFAULT_SECRET_HEADER.to_string()]
            )
        );
        let e = Secret::parse_flag("TOKEN=sk-live@a.com").unwrap_err();
        assert!(
            e.contains("visible to every user") && !e.contains("sk-live"),
            "{e}"
        );
        assert!(Secret::parse_flag("TOKEN")
            .unwrap_err()
            .contains("NAME=env:VAR@HOST"));
        assert!(Secret::parse_flag("TOKEN@")
            .unwrap_err()
            .contains("give the hosts"));
    }
}
