//! What a caller asks of a Sandbox (`SandboxConfig`), parsed from the JSON parameters of
//! `sandbox.create` by the names of the Python `Sandbox(...)` arguments. Every refusal names the
//! argument and the fix, before anything is created.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use hull_box::spec::BindMount;
use serde_json::{Map, Value};

use crate::error::SandboxError;

/// Where a setup command installs: `/deps` in the box, `<session>/deps` on the host.
///
/// hull-box refuses mounts inside `/workspace` (the workspace is one bind), so the deps live in a
/// sibling mount rather than `/workspace/.deps`; `HULL_DEPS`, `PYTHONPATH` and `PATH` point there.
pub const DEPS_DIR: &str = "/deps";

/// A Sandbox's settings. Defaults are those of the Python `Sandbox()`.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    pub image: Option<String>,
    pub setup: Option<String>,
    pub setup_timeout: Duration,
    pub workspace: Option<PathBuf>,
    pub memory_mb: Option<u64>,
    pub cpus: Option<f64>,
    pub pids: Option<u64>,
    pub timeout: Duration,
    pub network: bool,
    pub mounts: Vec<BindMount>,
    pub tmpfs: Vec<(String, u64)>,
    pub env: BTreeMap<String, String>,
    pub max_output_bytes: Option<u64>,
    pub deps_readonly: bool,
    pub require_limits: bool,
    pub cap_drop: Vec<String>,
    pub track_files: bool,
    pub prewarm: usize,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            image: None,
            setup: None,
            setup_timeout: Duration::from_secs(600),
            workspace: None,
            memory_mb: Some(512),
            cpus: None,
            pids: Some(256),
            timeout: Duration::from_secs(30),
            network: false,
            mounts: Vec::new(),
            tmpfs: Vec::new(),
            env: BTreeMap::new(),
            max_output_bytes: None,
            deps_readonly: true,
            require_limits: false,
            cap_drop: Vec::new(),
            track_files: true,
            prewarm: 0,
        }
    }
}

/// The most prewarmed boxes one Sandbox may keep.
pub const MAX_PREWARM: usize = 16;

fn type_err(arg: &str, want: &str, got: &Value) -> SandboxError {
    SandboxError::invalid(arg, format!("expected {want}, got {got}"))
}

fn opt_u64(arg: &str, v: &Value) -> Result<Option<u64>, SandboxError> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| type_err(arg, "a non-negative integer or null", v)),
        _ => Err(type_err(arg, "a non-negative integer or null", v)),
    }
}

fn seconds(arg: &str, v: &Value) -> Result<Duration, SandboxError> {
    let s = v
        .as_f64()
        .ok_or_else(|| type_err(arg, "a number of seconds", v))?;
    // At least 1 ms: shorter is no use as a deadline, and under 1 ns it would round to zero.
    if !(s.is_finite() && (0.001..=7.0 * 86400.0).contains(&s)) {
        return Err(SandboxError::invalid(
            arg,
            format!("{s} must be at least 0.001 (1 ms) and at most 7 days (604800)"),
        ));
    }
    Ok(Duration::from_secs_f64(s))
}

fn boolean(arg: &str, v: &Value) -> Result<bool, SandboxError> {
    v.as_bool().ok_or_else(|| type_err(arg, "true or false", v))
}

fn opt_string(arg: &str, v: &Value) -> Result<Option<String>, SandboxError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if !s.contains('\0') => Ok(Some(s.clone())),
        _ => Err(type_err(arg, "a string without NUL bytes, or null", v)),
    }
}

/// MiB as bytes; `None` when they do not fit (more than 2^44 MiB).
fn mib(mb: u64) -> Option<u64> {
    mb.checked_mul(1 << 20)
}

fn size_value(arg: &str, v: &Value) -> Result<u64, SandboxError> {
    match v {
        // Checked as a written size is (`parse_size`): zero would be a tmpfs without any limit,
        // and MiB that do not fit in bytes would wrap to a small size.
        Value::Number(n) => match n.as_u64() {
            Some(0) => Err(SandboxError::invalid(
                arg,
                "a size of 0 MiB; give a positive size",
            )),
            Some(mb) => {
                mib(mb).ok_or_else(|| SandboxError::invalid(arg, format!("{mb} MiB is too large")))
            }
            None => Err(type_err(arg, "a size in MiB or a string like \"64m\"", v)),
        },
        Value::String(s) => {
            hull_box::size::parse_size(s).map_err(|e| SandboxError::invalid(arg, e.to_string()))
        }
        _ => Err(type_err(arg, "a size in MiB or a string like \"64m\"", v)),
    }
}

fn mount(v: &Value) -> Result<BindMount, SandboxError> {
    let arg = "mounts";
    let (src, dst, ro) = match v {
        Value::String(s) => {
            let parts: Vec<&str> = s.split(':').collect();
            match parts.as_slice() {
                [s, d] => ((*s).to_string(), (*d).to_string(), false),
                [s, d, "ro"] => ((*s).to_string(), (*d).to_string(), true),
                [s, d, "rw"] => ((*s).to_string(), (*d).to_string(), false),
                _ => {
                    return Err(SandboxError::invalid(
                        arg,
                        format!("`{s}`: write a mount as \"SRC:DST\" or \"SRC:DST:ro\""),
                    ))
                }
            }
        }
        Value::Object(m) => {
            let get = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
            let src = get("source").ok_or_else(|| {
                SandboxError::invalid(
                    arg,
                    format!("{v}: a mount object needs \"source\" and \"target\""),
                )
            })?;
            let dst = get("target").ok_or_else(|| {
                SandboxError::invalid(
                    arg,
                    format!("{v}: a mount object needs \"source\" and \"target\""),
                )
            })?;
            let ro = m
                .get("read_only")
                .map(|r| boolean("mounts[].read_only", r))
                .transpose()?
                .unwrap_or(false);
            (src, dst, ro)
        }
        _ => {
            return Err(type_err(
                arg,
                "\"SRC:DST[:ro]\" strings or {source, target, read_only} objects",
                v,
            ))
        }
    };
    if src.is_empty() || dst.is_empty() {
        return Err(SandboxError::invalid(
            arg,
            format!("{v}: both source and target are needed"),
        ));
    }
    Ok(BindMount {
        source: PathBuf::from(src),
        target: dst,
        read_only: ro,
    })
}

impl SandboxConfig {
    /// Parses `sandbox.create` parameters. Unknown names are refused, so a typo is never ignored.
    pub fn from_json(params: &Value) -> Result<SandboxConfig, SandboxError> {
        let mut c = SandboxConfig::default();
        let empty = Map::new();
        let map = match params {
            Value::Null => &empty,
            Value::Object(m) => m,
            other => return Err(type_err("params", "an object", other)),
        };
        for (k, v) in map {
            let arg = k.as_str();
            match arg {
                "image" => c.image = opt_string(arg, v)?,
                "setup" => c.setup = opt_string(arg, v)?,
                "setup_timeout_s" => c.setup_timeout = seconds(arg, v)?,
                "workspace" => c.workspace = opt_string(arg, v)?.map(PathBuf::from),
                "memory_mb" => {
                    c.memory_mb = opt_u64(arg, v)?;
                    if c.memory_mb.is_some_and(|m| m < 16) {
                        return Err(SandboxError::invalid(arg, "must be at least 16 (MiB) or None for no cap"));
                    }
                    if let Some(m) = c.memory_mb.filter(|m| mib(*m).is_none()) {
                        return Err(SandboxError::invalid(arg, format!("{m} MiB is too large; give at most 2^44 - 1 or None for no cap")));
                    }
                }
                "cpus" => {
                    c.cpus = match v {
                        Value::Null => None,
                        _ => Some(v.as_f64().filter(|c| c.is_finite() && *c > 0.0 && *c <= 4096.0).ok_or_else(|| type_err(arg, "a positive number of CPUs (e.g. 0.5, 2) or null", v))?),
                    }
                }
                "pids" => c.pids = opt_u64(arg, v)?.filter(|p| *p > 0),
                "timeout_s" => c.timeout = seconds(arg, v)?,
                "network" => {
                    c.network = match v {
                        Value::Bool(b) => *b,
                        Value::String(s) if s == "host" => true,
                        Value::String(s) if s == "none" => false,
                        _ => return Err(type_err(arg, "true/false (or \"host\"/\"none\")", v)),
                    }
                }
                "mounts" => {
                    c.mounts = match v {
                        Value::Null => Vec::new(),
                        Value::Array(a) => a.iter().map(mount).collect::<Result<_, _>>()?,
                        _ => return Err(type_err(arg, "a list of mounts", v)),
                    }
                }
                "tmpfs" => {
                    c.tmpfs = match v {
                        Value::Null => Vec::new(),
                        Value::Object(m) => m.iter().map(|(p, s)| Ok((p.clone(), size_value("tmpfs", s)?))).collect::<Result<_, SandboxError>>()?,
                        Value::Array(a) => a
                            .iter()
                            .map(|e| {
                                let s = e.as_str().ok_or_else(|| type_err(arg, "\"PATH=SIZE\" strings", e))?;
                                let (p, sz) = s.split_once('=').ok_or_else(|| SandboxError::invalid(arg, format!("`{s}`: write PATH=SIZE, e.g. /cache=128m")))?;
                                Ok((p.to_string(), size_value("tmpfs", &Value::String(sz.into()))?))
                            })
                            .collect::<Result<_, SandboxError>>()?,
                        _ => return Err(type_err(arg, "a {path: size} mapping or a list of \"PATH=SIZE\"", v)),
                    }
                }
                "env" => {
                    c.env = match v {
                        Value::Null => BTreeMap::new(),
                        Value::Object(m) => m
                            .iter()
                            .map(|(k, v)| match v.as_str() {
                                Some(s) if !k.is_empty() && !k.contains('=') && !k.contains('\0') && !s.contains('\0') => Ok((k.clone(), s.to_string())),
                                _ => Err(SandboxError::invalid(arg, format!("`{k}`: names must be non-empty without `=`, values strings"))),
                            })
                            .collect::<Result<_, _>>()?,
                        _ => return Err(type_err(arg, "a {name: value} mapping of strings", v)),
                    }
                }
                "max_output_bytes" => {
                    c.max_output_bytes = opt_u64(arg, v)?;
                    if c.max_output_bytes == Some(0) {
                        return Err(SandboxError::invalid(arg, "must be at least 1, or None for the default (64 MiB)"));
                    }
                }
                "deps_readonly" => c.deps_readonly = boolean(arg, v)?,
                "security_profile" => match v {
                    Value::Null => {}
                    Value::String(s) if s == "default" => {}
                    _ => return Err(SandboxError::invalid(arg, format!("{v}: the only profile is \"default\" (the seccomp allowlist in crates/hull-seccomp/policy/default.policy); pass None"))),
                },
                "require_limits" => c.require_limits = boolean(arg, v)?,
                "cap_drop" => {
                    c.cap_drop = match v {
                        Value::Null => Vec::new(),
                        Value::Array(a) => a.iter().map(|x| x.as_str().map(str::to_string).ok_or_else(|| type_err(arg, "a list of capability names", x))).collect::<Result<_, _>>()?,
                        _ => return Err(type_err(arg, "a list of capability names", v)),
                    }
                }
                "track_files" => c.track_files = boolean(arg, v)?,
                "prewarm" => {
                    let n = opt_u64(arg, v)?.unwrap_or(0);
                    c.prewarm = usize::try_from(n).ok().filter(|n| *n <= MAX_PREWARM).ok_or_else(|| SandboxError::invalid(arg, format!("{n}: keep at most {MAX_PREWARM} prewarmed boxes")))?;
                }
                other => {
                    return Err(SandboxError::invalid(other, "unknown argument; see the Sandbox() arguments in bindings/python/README.md"));
                }
            }
        }
        if let Some(ws) = &c.workspace {
            if !ws.is_absolute() {
                return Err(SandboxError::invalid(
                    "workspace",
                    format!("{} must be an absolute host path", ws.display()),
                ));
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(v: Value) -> String {
        match SandboxConfig::from_json(&v) {
            Err(SandboxError::Invalid { arg, .. }) => arg,
            other => panic!("{v} was not refused: {other:?}"),
        }
    }

    #[test]
    fn defaults_match_the_python_signature() {
        let c = SandboxConfig::from_json(&Value::Null).unwrap();
        assert_eq!(c.memory_mb, Some(512));
        assert_eq!(c.pids, Some(256));
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert!(!c.network && c.deps_readonly && c.track_files);
    }

    #[test]
    fn deadlines_under_a_millisecond_are_refused() {
        // 1e-12 s parsed as a zero deadline, refused later in the CLI's words (`--timeout`).
        assert_eq!(refused(json!({"timeout_s": 1e-12})), "timeout_s");
        assert_eq!(
            refused(json!({"setup_timeout_s": 0.0005})),
            "setup_timeout_s"
        );
        let c = SandboxConfig::from_json(&json!({"timeout_s": 0.001})).unwrap();
        assert_eq!(c.timeout, Duration::from_millis(1));
    }

    #[test]
    fn numeric_sizes_are_checked_like_written_ones() {
        // A tmpfs of 0 bytes would be mounted with no limit at all (`size=0`); MiB past 2^44 do
        // not fit in bytes and wrapped (2^44 MiB to 0, 2^44 + 64 to a 64 MiB cap).
        assert_eq!(refused(json!({"tmpfs": {"/cache": 0}})), "tmpfs");
        assert_eq!(refused(json!({"tmpfs": {"/cache": 1u64 << 44}})), "tmpfs");
        assert_eq!(
            refused(json!({"memory_mb": (1u64 << 44) + 64})),
            "memory_mb"
        );
        let c = SandboxConfig::from_json(
            &json!({"tmpfs": {"/cache": 8}, "memory_mb": (1u64 << 44) - 1}),
        )
        .unwrap();
        assert_eq!(c.tmpfs, [("/cache".to_string(), 8 << 20)]);
        assert_eq!(c.memory_mb, Some((1 << 44) - 1));
    }

    #[test]
    fn bad_arguments_are_refused_by_name() {
        assert_eq!(refused(json!({"memory_mb": "lots"})), "memory_mb");
        assert_eq!(refused(json!({"memory_mb": 1})), "memory_mb");
        assert_eq!(refused(json!({"timeout_s": 0})), "timeout_s");
        assert_eq!(refused(json!({"cpus": -1})), "cpus");
        assert_eq!(refused(json!({"network": "maybe"})), "network");
        assert_eq!(refused(json!({"mounts": ["nocolon"]})), "mounts");
        assert_eq!(refused(json!({"env": {"A=B": "x"}})), "env");
        assert_eq!(refused(json!({"prewarm": 99})), "prewarm");
        assert_eq!(
            refused(json!({"security_profile": "lax"})),
            "security_profile"
        );
        assert_eq!(refused(json!({"memroy_mb": 5})), "memroy_mb");
        assert_eq!(refused(json!({"workspace": "relative/dir"})), "workspace");
    }

    #[test]
    fn mounts_and_tmpfs_forms() {
        let c = SandboxConfig::from_json(&json!({"mounts": ["/a:/b:ro", {"source": "/c", "target": "/d"}], "tmpfs": {"/cache": "8m", "/x": 4}})).unwrap();
        assert_eq!(c.mounts.len(), 2);
        assert!(c.mounts[0].read_only && !c.mounts[1].read_only);
        assert!(
            c.tmpfs.contains(&("/cache".to_string(), 8 << 20))
                && c.tmpfs.contains(&("/x".to_string(), 4 << 20))
        );
    }
}
