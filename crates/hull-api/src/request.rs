//! The two requests: one box (`hull run`, `hull serve`'s `run`) and a Sandbox (`sandbox.create`,
//! the SDKs' `Sandbox(...)`, `hull mcp`'s settings). Fields hold real units (bytes, `Duration`);
//! each field's serde reads exactly what the protocol accepts for it (`"64m"` where `run` takes
//! text with a unit, a number of MiB where `sandbox.create` takes `memory_mb`).
//!
//! [`parse`] reads JSON parameters and names the argument at fault by its key; unknown keys are
//! refused, so a typo is never ignored.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::RequestError;
use crate::isolation::Isolation;
use crate::language::Language;
use crate::mount::{Mount, Tmpfs};
use crate::network::{self, Network, Part, Secret};
use crate::{duration, size};

/// The defaults of `hull run` (and of the engine's `BoxSpec::new`, which a test in `hull`
/// checks they match).
pub mod defaults {
    use std::time::Duration;

    pub const TMP_SIZE: u64 = 64 << 20;
    pub const PIDS: u64 = 256;
    pub const TIMEOUT: Duration = Duration::from_secs(30);
    pub const MAX_OUTPUT: u64 = 64 << 20;
}

/// One box: `hull run`'s options, `hull serve`'s `run` parameters (by the same names in
/// snake_case; `mounts` for `--mount`, `argv` for the command).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunRequest {
    /// The program and its arguments (empty with `code`, or to run the image's command).
    pub argv: Vec<String>,
    /// Code to run with `language`'s interpreter instead of `argv`.
    pub code: Option<String>,
    #[serde(deserialize_with = "or_default")]
    pub language: Language,
    /// `host` or an image of the local store.
    #[serde(deserialize_with = "image_name")]
    pub image: String,
    /// An unpacked root filesystem directory (instead of `image`).
    pub rootfs: Option<PathBuf>,
    /// Host directory bound at /workspace; `None` makes a fresh one.
    pub workspace: Option<PathBuf>,
    #[serde(deserialize_with = "tmp_size")]
    pub tmp_size: u64,
    pub tmpfs: Vec<Tmpfs>,
    pub mounts: Vec<Mount>,
    /// `none`, `host`, or a gateway mode with its policy (a name or an object on the wire).
    #[serde(deserialize_with = "network::network_field")]
    pub network: Network,
    /// Secrets the gateway brokers (a gateway mode only).
    #[serde(deserialize_with = "network::secrets_field")]
    pub secrets: Vec<Secret>,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    #[serde(deserialize_with = "size::opt_text")]
    pub memory: Option<u64>,
    /// `None`: no cap (`0` on the wire; absent or `null` is the default, 256).
    #[serde(deserialize_with = "run_pids")]
    pub pids: Option<u64>,
    pub cpus: Option<f64>,
    pub require_limits: bool,
    pub subids: bool,
    #[serde(deserialize_with = "run_timeout")]
    pub timeout: Duration,
    #[serde(deserialize_with = "max_output")]
    pub max_output: u64,
    /// `{name: value}` on the wire (so in name order); in the order given on the command line.
    #[serde(deserialize_with = "env_map")]
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
    /// Give the box the caller's standard input (`hull run -i`; never over a protocol).
    #[serde(skip)]
    pub inherit_stdin: bool,
    /// The box's boundary: `namespace` (default) or `vm`.
    pub isolation: Isolation,
    /// With `vm`: refuse to run emulated where KVM cannot run the guest.
    pub require_kvm: bool,
}

impl Default for RunRequest {
    fn default() -> RunRequest {
        RunRequest {
            argv: Vec::new(),
            code: None,
            language: Language::Python,
            image: "host".into(),
            rootfs: None,
            workspace: None,
            tmp_size: defaults::TMP_SIZE,
            tmpfs: Vec::new(),
            mounts: Vec::new(),
            network: Network::None,
            secrets: Vec::new(),
            cap_add: Vec::new(),
            cap_drop: Vec::new(),
            memory: None,
            pids: Some(defaults::PIDS),
            cpus: None,
            require_limits: false,
            subids: false,
            timeout: defaults::TIMEOUT,
            max_output: defaults::MAX_OUTPUT,
            env: Vec::new(),
            cwd: None,
            inherit_stdin: false,
            isolation: Isolation::Namespace,
            require_kvm: false,
        }
    }
}

impl RunRequest {
    /// Parses `run` parameters (`null` is every default), naming the argument at fault.
    pub fn from_json(params: &Value) -> Result<RunRequest, RequestError> {
        let r: RunRequest = parse(params)?;
        if r.code.is_some() && !r.argv.is_empty() {
            return Err(RequestError::new(
                "params",
                "give either `code` or `argv`, not both",
            ));
        }
        network::check_secrets_with(&r.network, &r.secrets)
            .map_err(|e| RequestError::new("secrets", e.spelled(Part::param)))?;
        check_isolation(r.isolation, r.require_kvm)?;
        Ok(r)
    }

    /// The command line: `code` through its language's interpreter, else `argv`.
    pub fn command(&self) -> Vec<String> {
        match &self.code {
            Some(code) => self.language.argv(code),
            None => self.argv.clone(),
        }
    }
}

fn or_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn image_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_else(|| "host".into()))
}

fn tmp_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(size::opt_text(d)?.unwrap_or(defaults::TMP_SIZE))
}

fn max_output<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(size::opt_text(d)?.unwrap_or(defaults::MAX_OUTPUT))
}

fn run_pids<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(match Option::<u64>::deserialize(d)? {
        None => Some(defaults::PIDS),
        Some(0) => None,
        Some(n) => Some(n),
    })
}

fn run_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None => Ok(defaults::TIMEOUT),
        Some(v) => duration::seconds_or_text(v, defaults::TIMEOUT).map_err(D::Error::custom),
    }
}

fn env_map<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    let m = Option::<BTreeMap<String, Value>>::deserialize(d)
        .map_err(|_| D::Error::custom("expected a {name: value} mapping of strings"))?;
    m.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| match v {
            Value::String(s)
                if !k.is_empty() && !k.contains('=') && !k.contains('\0') && !s.contains('\0') =>
            {
                Ok((k, s))
            }
            _ => Err(D::Error::custom(format!(
                "`{k}`: names must be non-empty without `=`, values strings"
            ))),
        })
        .collect()
}

/// The only seccomp profile there is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SecurityProfile;

impl<'de> Deserialize<'de> for SecurityProfile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SecurityProfile, D::Error> {
        match Value::deserialize(d)? {
            Value::Null => Ok(SecurityProfile),
            Value::String(s) if s == "default" => Ok(SecurityProfile),
            v => Err(D::Error::custom(format!("{v}: the only profile is \"default\" (the seccomp allowlist in crates/hull-seccomp/policy/default.policy); pass None"))),
        }
    }
}

/// The most prewarmed boxes one Sandbox may keep.
pub const MAX_PREWARM: usize = 16;

/// A Sandbox: the SDKs' `Sandbox(...)` arguments, `sandbox.create`'s parameters by the same
/// names. Defaults are those of the Python `Sandbox()`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxRequest {
    /// An image of the local store; `None` (or `host`) is the embedded one.
    #[serde(deserialize_with = "opt_text")]
    pub image: Option<String>,
    /// A shell command run once, with the network, in its own box (`pip install` lands in /deps).
    #[serde(deserialize_with = "opt_text")]
    pub setup: Option<String>,
    #[serde(rename = "setup_timeout_s", deserialize_with = "duration::seconds")]
    pub setup_timeout: Duration,
    /// An absolute host directory to use as /workspace; `None` makes a private one.
    #[serde(deserialize_with = "abs_dir")]
    pub workspace: Option<PathBuf>,
    /// Bytes; `memory_mb` on the wire (at least 16, or `null` for no cap).
    #[serde(rename = "memory_mb", deserialize_with = "memory_mb")]
    pub memory: Option<u64>,
    #[serde(deserialize_with = "cpus")]
    pub cpus: Option<f64>,
    /// `None` (`null` or `0` on the wire): no cap.
    #[serde(deserialize_with = "sandbox_pids")]
    pub pids: Option<u64>,
    #[serde(rename = "timeout_s", deserialize_with = "duration::seconds")]
    pub timeout: Duration,
    /// `true`/`false` (host/none), or as `run`'s `network`.
    #[serde(deserialize_with = "network::network_flag_field")]
    pub network: Network,
    /// Secrets the gateway brokers (a gateway mode only).
    #[serde(deserialize_with = "network::secrets_field")]
    pub secrets: Vec<Secret>,
    #[serde(deserialize_with = "or_default")]
    pub mounts: Vec<Mount>,
    #[serde(deserialize_with = "crate::mount::tmpfs_map_or_list")]
    pub tmpfs: Vec<Tmpfs>,
    #[serde(deserialize_with = "env_map")]
    pub env: Vec<(String, String)>,
    /// `max_output_bytes` on the wire (at least 1; `null`: the default, 64 MiB).
    #[serde(rename = "max_output_bytes", deserialize_with = "max_output_bytes")]
    pub max_output: Option<u64>,
    #[serde(deserialize_with = "flag")]
    pub deps_readonly: bool,
    pub security_profile: SecurityProfile,
    #[serde(deserialize_with = "flag")]
    pub require_limits: bool,
    /// None (the default): every capability dropped. A list (kern's meaning): the box keeps
    /// the default set of a container (`hull_box::caps::CONTAINER_DEFAULT`) less these names
    /// (`ALL` drops them all), inside its user namespace only.
    #[serde(deserialize_with = "opt_cap_names")]
    pub cap_drop: Option<Vec<String>>,
    #[serde(deserialize_with = "flag")]
    pub track_files: bool,
    #[serde(deserialize_with = "prewarm")]
    pub prewarm: usize,
    /// The boundary of the sandbox's boxes: `namespace` (default) or `vm`.
    #[serde(deserialize_with = "or_default")]
    pub isolation: Isolation,
    /// With `vm`: refuse to run emulated where KVM cannot run the guest.
    #[serde(deserialize_with = "flag")]
    pub require_kvm: bool,
}

impl Default for SandboxRequest {
    fn default() -> SandboxRequest {
        SandboxRequest {
            image: None,
            setup: None,
            setup_timeout: Duration::from_secs(600),
            workspace: None,
            memory: Some(512 << 20),
            cpus: None,
            pids: Some(defaults::PIDS),
            timeout: defaults::TIMEOUT,
            network: Network::None,
            secrets: Vec::new(),
            mounts: Vec::new(),
            tmpfs: Vec::new(),
            env: Vec::new(),
            max_output: None,
            deps_readonly: true,
            security_profile: SecurityProfile,
            require_limits: false,
            cap_drop: None,
            track_files: true,
            prewarm: 0,
            isolation: Isolation::Namespace,
            require_kvm: false,
        }
    }
}

impl SandboxRequest {
    /// Parses `sandbox.create` parameters (`null` is every default), naming the argument at
    /// fault.
    pub fn from_json(params: &Value) -> Result<SandboxRequest, RequestError> {
        let r: SandboxRequest = parse(params)?;
        network::check_secrets_with(&r.network, &r.secrets)
            .map_err(|e| RequestError::new("secrets", e.spelled(Part::param)))?;
        check_isolation(r.isolation, r.require_kvm)?;
        if r.isolation == Isolation::Vm {
            // What a VM's sandbox cannot do yet is refused here, never dropped (docs/vm.md).
            if r.prewarm > 0 && matches!(r.network, Network::Gateway(_)) {
                return Err(RequestError::new(
                    "prewarm",
                    "VMs booted ahead are not supported with a gateway network yet (each call's link is its own): give 0",
                ));
            }
            if matches!(r.network, Network::Host) {
                return Err(RequestError::new(
                    "network",
                    "the host's network is refused with isolation vm (a VM has the gateway network or none)",
                ));
            }
            if r.setup.is_some() {
                return Err(RequestError::new(
                    "setup",
                    "a setup (it runs with the host network) is not supported with isolation vm yet",
                ));
            }
        }
        Ok(r)
    }
}

/// `require_kvm` only means something for a VM.
fn check_isolation(isolation: Isolation, require_kvm: bool) -> Result<(), RequestError> {
    if require_kvm && isolation != Isolation::Vm {
        return Err(RequestError::new(
            "require_kvm",
            "only with isolation \"vm\"",
        ));
    }
    Ok(())
}

fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) if !s.contains('\0') => Ok(Some(s)),
        v => Err(D::Error::custom(format!(
            "expected a string without NUL bytes, or null, got {v}"
        ))),
    }
}

fn abs_dir<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    match opt_text(d)? {
        Some(p) if !p.starts_with('/') => Err(D::Error::custom(format!(
            "{p} must be an absolute host path"
        ))),
        p => Ok(p.map(PathBuf::from)),
    }
}

fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match Value::deserialize(d)? {
        Value::Bool(b) => Ok(b),
        v => Err(D::Error::custom(format!("expected true or false, got {v}"))),
    }
}

fn opt_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::Number(n) if n.as_u64().is_some() => Ok(n.as_u64()),
        v => Err(D::Error::custom(format!(
            "expected a non-negative integer or null, got {v}"
        ))),
    }
}

fn memory_mb<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match opt_count(d)? {
        None => Ok(None),
        Some(mb) if mb < 16 => Err(D::Error::custom(
            "must be at least 16 (MiB) or None for no cap",
        )),
        Some(mb) => mb
            .checked_mul(1 << 20)
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("{mb} MiB is too large"))),
    }
}

fn sandbox_pids<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(opt_count(d)?.filter(|p| *p > 0))
}

fn max_output_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match opt_count(d)? {
        Some(0) => Err(D::Error::custom(
            "must be at least 1, or None for the default (64 MiB)",
        )),
        n => Ok(n),
    }
}

fn cpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => v
            .as_f64()
            .filter(|c| c.is_finite() && *c > 0.0 && *c <= 4096.0)
            .map(Some)
            .ok_or_else(|| {
                D::Error::custom(format!(
                    "expected a positive number of CPUs (e.g. 0.5, 2) or null, got {v}"
                ))
            }),
    }
}

fn opt_cap_names<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    Option::<Vec<String>>::deserialize(d)
        .map_err(|_| D::Error::custom("expected a list of capability names"))
}

fn prewarm<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = opt_count(d)?.unwrap_or(0);
    usize::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_PREWARM)
        .ok_or_else(|| D::Error::custom(format!("{n}: keep at most {MAX_PREWARM} prewarmed boxes")))
}

/// Reads a request from JSON parameters. A refusal names the key at fault: when the whole
/// object does not parse, each key is tried on its own (every other field at its default), and
/// the first that fails alone is the one named.
pub fn parse<T: DeserializeOwned>(params: &Value) -> Result<T, RequestError> {
    let empty = Map::new();
    let map = match params {
        Value::Null => &empty,
        Value::Object(m) => m,
        other => {
            return Err(RequestError::new(
                "params",
                format!("expected an object, got {other}"),
            ))
        }
    };
    let whole = match T::deserialize(Value::Object(map.clone())) {
        Ok(t) => return Ok(t),
        Err(e) => e,
    };
    for (k, v) in map {
        let alone = Value::Object(Map::from_iter([(k.clone(), v.clone())]));
        if let Err(e) = T::deserialize(alone) {
            return Err(RequestError::new(k.clone(), e));
        }
    }
    Err(RequestError::new("params", whole))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused_run(v: Value) -> RequestError {
        RunRequest::from_json(&v).unwrap_err()
    }

    fn refused(v: Value) -> String {
        match SandboxRequest::from_json(&v) {
            Err(e) => e.arg,
            Ok(r) => panic!("{v} was not refused: {r:?}"),
        }
    }

    #[test]
    fn run_defaults_and_units() {
        assert_eq!(
            RunRequest::from_json(&Value::Null).unwrap(),
            RunRequest::default()
        );
        let r = RunRequest::from_json(&json!({
            "code": "1", "language": "bash", "tmp_size": "8m", "memory": "1g", "timeout": 2,
            "max_output": "1k", "tmpfs": ["/c=4m"], "mounts": ["/a:/b:ro"], "network": "host",
            "env": {"B": "2", "A": "1"}, "pids": 0, "image": null,
        }))
        .unwrap();
        assert_eq!(r.command(), ["bash", "-c", "1"]);
        assert_eq!(
            (r.tmp_size, r.memory, r.max_output),
            (8 << 20, Some(1 << 30), 1024)
        );
        assert_eq!(r.timeout, Duration::from_secs(2));
        assert_eq!(
            (r.pids, r.network, r.image.as_str()),
            (None, Network::Host, "host")
        );
        assert_eq!(r.env, [("A".into(), "1".into()), ("B".into(), "2".into())]);
        assert_eq!(r.tmpfs[0].size, 4 << 20);
        let r = RunRequest::from_json(&json!({"timeout": "500ms", "pids": null})).unwrap();
        assert_eq!((r.timeout, r.pids), (Duration::from_millis(500), Some(256)));
        assert_eq!(
            RunRequest::from_json(&json!({"timeout": ""}))
                .unwrap()
                .timeout,
            defaults::TIMEOUT
        );
    }

    #[test]
    fn run_refusals_name_the_key() {
        let e = refused_run(json!({"tmp_size": "64", "argv": ["true"]}));
        assert!(e.arg == "tmp_size" && e.why.contains("unit"), "{e}");
        let e = refused_run(json!({"colour": "blue"}));
        assert!(e.arg == "colour" && e.why.contains("unknown field"), "{e}");
        assert_eq!(refused_run(json!({"timeout": "soon"})).arg, "timeout");
        assert_eq!(refused_run(json!({"timeout": [1]})).arg, "timeout");
        assert_eq!(refused_run(json!({"language": "cobol"})).arg, "language");
        assert_eq!(refused_run(json!({"network": "maybe"})).arg, "network");
        assert_eq!(refused_run(json!({"mounts": ["/a"]})).arg, "mounts");
        assert_eq!(
            refused_run(json!({"code": "1", "argv": ["x"]})).arg,
            "params"
        );
        assert_eq!(refused_run(json!([1])).arg, "params");
    }

    #[test]
    fn network_and_secrets_are_read_and_refused_by_key() {
        let r = RunRequest::from_json(&json!({
            "network": {"mode": "custom", "allow_hosts": ["*.example.com"]},
            "secrets": [{"name": "K", "env": "HOME", "hosts": ["api.example.com"]}],
        }))
        .unwrap();
        assert_eq!(r.network.mode().to_string(), "custom");
        assert_eq!(r.secrets[0].name, "K");
        let e = refused_run(json!({"network": {"allow_hosts": ["a..b"]}}));
        assert!(e.arg == "network" && e.why.contains("`a..b`"), "{e}");
        let e = refused_run(json!({"secrets": [{"name": "K", "env": "X", "hosts": ["a.com"]}]}));
        assert!(
            e.arg == "secrets" && e.why.starts_with("network none with secrets"),
            "{e}"
        );
        assert_eq!(refused_run(json!({"secrets": {"K": "v"}})).arg, "secrets");
        let c = SandboxRequest::from_json(&json!({"network": "allow-all"})).unwrap();
        assert_eq!(c.network.mode().to_string(), "allow-all");
        assert_eq!(
            refused(json!({"network": {"mode": "host", "ports": [80]}})),
            "network"
        );
        assert_eq!(
            refused(
                json!({"network": true, "secrets": [{"name": "K", "value": "v", "hosts": ["a.com"]}]})
            ),
            "secrets"
        );
    }

    #[test]
    fn defaults_match_the_python_signature() {
        let c = SandboxRequest::from_json(&Value::Null).unwrap();
        assert_eq!(c.memory, Some(512 << 20));
        assert_eq!(c.pids, Some(256));
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert!(c.network == Network::None && c.deps_readonly && c.track_files);
        assert_eq!(c, SandboxRequest::default());
    }

    #[test]
    fn bad_arguments_are_refused_by_name() {
        assert_eq!(refused(json!({"memory_mb": "lots"})), "memory_mb");
        assert_eq!(refused(json!({"memory_mb": 1})), "memory_mb");
        assert_eq!(refused(json!({"timeout_s": 0})), "timeout_s");
        assert_eq!(refused(json!({"timeout_s": -1})), "timeout_s");
        assert_eq!(refused(json!({"cpus": -1})), "cpus");
        assert_eq!(refused(json!({"network": "maybe"})), "network");
        assert_eq!(refused(json!({"mounts": ["nocolon"]})), "mounts");
        assert_eq!(refused(json!({"env": {"A=B": "x"}})), "env");
        assert_eq!(refused(json!({"prewarm": 99})), "prewarm");
        // What a VM's sandbox cannot do yet is refused naming the argument.
        assert_eq!(
            refused(json!({"isolation": "vm", "prewarm": 1, "network": "deny-all"})),
            "prewarm"
        );
        assert!(SandboxRequest::from_json(&json!({"isolation": "vm", "prewarm": 1})).is_ok());
        assert_eq!(
            refused(json!({"isolation": "vm", "network": "host"})),
            "network"
        );
        assert_eq!(
            refused(json!({"isolation": "vm", "setup": "true"})),
            "setup"
        );
        assert_eq!(refused(json!({"require_kvm": true})), "require_kvm");
        assert_eq!(refused(json!({"isolation": "kvm"})), "isolation");
        let vm =
            SandboxRequest::from_json(&json!({"isolation": "vm", "require_kvm": true})).unwrap();
        assert_eq!((vm.isolation, vm.require_kvm), (Isolation::Vm, true));
        assert_eq!(refused_run(json!({"require_kvm": true})).arg, "require_kvm");
        assert_eq!(
            refused(json!({"security_profile": "lax"})),
            "security_profile"
        );
        assert_eq!(refused(json!({"memroy_mb": 5})), "memroy_mb");
        assert_eq!(refused(json!({"workspace": "relative/dir"})), "workspace");
        assert_eq!(refused(json!({"image": 3, "pids": 4})), "image");
        assert_eq!(refused(json!({"tmpfs": {"/x": "4"}})), "tmpfs");
    }

    #[test]
    fn sandbox_forms_and_nulls() {
        let c = SandboxRequest::from_json(&json!({
            "mounts": ["/a:/b:ro", {"source": "/c", "target": "/d"}],
            "tmpfs": {"/cache": "8m", "/x": 4}, "memory_mb": null, "pids": 0, "network": true,
            "env": null, "cap_drop": null, "max_output_bytes": 1000, "security_profile": "default",
        }))
        .unwrap();
        assert_eq!(c.mounts.len(), 2);
        assert!(c.mounts[0].read_only && !c.mounts[1].read_only);
        assert_eq!(c.tmpfs.len(), 2);
        assert_eq!((c.memory, c.pids, c.network), (None, None, Network::Host));
        assert_eq!(c.max_output, Some(1000));
    }
}
