//! Requests (`hull_api`) into the engine's [`BoxSpec`], in one place: `hull run` and `hull
//! serve`'s `run` ([`run_spec`]) and every Sandbox ([`sandbox_base`]) build their boxes here.
//!
//! This lives in the Sandbox layer because it is the crate that knows all three sides: the
//! request model, the engine's spec and the image store (a request names an image; a spec holds
//! its unpacked root). The request model depends on none of them, and the engine on neither.

use std::path::Path;

use hull_api::network::GatewayMode;
use hull_api::{Mount, Network as ApiNetwork, RunRequest, SandboxRequest, Secret, Tmpfs};
use hull_box::{BindMount, BoxSpec, Network, RootSpec, Stdin, TmpfsMount};
use hull_image::{ImageError, ImageInfo};

/// Where a setup command installs: `/deps` in the box, `<session>/deps` on the host.
///
/// hull-box refuses mounts inside `/workspace` (the workspace is one bind), so the deps live in a
/// sibling mount rather than `/workspace/.deps`; `HULL_DEPS`, `PYTHONPATH` and `PATH` point there.
pub const DEPS_DIR: &str = "/deps";

/// An image of the local store, by name.
pub fn image(name: &str) -> Result<ImageInfo, ImageError> {
    hull_image::Store::open(&hull_image::default_home())?.resolve(name)
}

/// A box spec and what the caller should be told about how it was made.
#[derive(Debug)]
pub struct Built {
    pub spec: BoxSpec,
    /// Notes for the caller (an image asking for a user a box cannot be).
    pub warnings: Vec<String>,
}

fn bind(m: &Mount) -> BindMount {
    BindMount {
        source: m.source.clone(),
        target: m.target.clone(),
        read_only: m.read_only,
    }
}

/// A gateway network asked where this build cannot give it yet. Never answered by running the
/// box with no network or the host's: the caller asked for a policy, and gets a refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("network mode `{mode}`: {why} (docs/network.md)")]
pub struct NetworkUnavailable {
    pub mode: GatewayMode,
    /// What is missing, and what to use meanwhile.
    pub why: &'static str,
}

/// Why a request could not become a box spec.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The image could not be found or opened (the request's `image`).
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The request's network cannot be given (its `network`).
    #[error(transparent)]
    Network(#[from] NetworkUnavailable),
}

impl BuildError {
    /// A stable word for JSON front ends.
    pub fn kind(&self) -> &'static str {
        match self {
            BuildError::Image(_) => "invalid_argument",
            BuildError::Network(_) => "network_unavailable",
        }
    }
}

/// The one place a request's network becomes the box's: `none` and `host` map to the engine's
/// own; a gateway mode becomes [`Network::Gateway`], a box with a TAP whose other end the
/// front end serves with the request's gateway (`hull __net`, given the policy, ports and cap
/// of [`ApiNetwork::Gateway`]). Secrets are refused until the gateway brokers them.
pub fn network(n: &ApiNetwork, secrets: &[Secret]) -> Result<Network, NetworkUnavailable> {
    match n {
        ApiNetwork::None => Ok(Network::None),
        ApiNetwork::Host => Ok(Network::Host),
        ApiNetwork::Gateway(_) => {
            let _ = secrets;
            Ok(Network::Gateway)
        }
    }
}

/// Every tmpfs but `/tmp`, whose size becomes the spec's `tmp_size`.
fn tmpfs(spec: &mut BoxSpec, list: &[Tmpfs]) {
    for t in list {
        if t.target == "/tmp" {
            spec.tmp_size = t.size;
        } else {
            spec.tmpfs.push(TmpfsMount {
                target: t.target.clone(),
                size: t.size,
            });
        }
    }
}

/// One box (`hull run`, `hull serve`'s `run`). An image's config supplies the command when none
/// is given, its environment (before the request's), and its working directory. The spec is
/// checked when it runs ([`BoxSpec::validate`]); the errors here are the image's and a network
/// this build cannot give ([`network`]).
pub fn run_spec(r: &RunRequest) -> Result<Built, BuildError> {
    // Before the image: a request the build cannot serve opens nothing.
    let net = network(&r.network, &r.secrets)?;
    let mut spec = BoxSpec::new(r.command());
    let mut warnings = Vec::new();
    let mut config = None;
    if let Some(dir) = &r.rootfs {
        spec.root = RootSpec::Dir(dir.clone());
        spec.image_name = dir.display().to_string();
    } else if r.image != "host" {
        let info = image(&r.image)?;
        spec.root = RootSpec::Dir(info.rootfs.clone());
        spec.image_name = info.name.clone();
        config = Some(info.config);
    }
    if let Some(cfg) = &config {
        if spec.argv.is_empty() {
            spec.argv = cfg
                .entrypoint
                .iter()
                .flatten()
                .chain(cfg.cmd.iter().flatten())
                .cloned()
                .collect();
        }
        for kv in cfg.env.iter().flatten() {
            if let Some((k, v)) = kv.split_once('=') {
                spec.env.push((k.to_string(), v.to_string()));
            }
        }
        if let Some(wd) = cfg.working_dir.as_ref().filter(|w| w.starts_with('/')) {
            spec.cwd = wd.clone();
        }
        if let Some(u) = cfg
            .user
            .as_ref()
            .filter(|u| !u.is_empty() && *u != "root" && *u != "0" && *u != "0:0")
        {
            warnings.push(format!("the image asks for user `{u}`; boxes run as uid 0 of their own user namespace (a single-uid map)"));
        }
    }
    spec.workspace = r.workspace.clone();
    spec.tmp_size = r.tmp_size;
    tmpfs(&mut spec, &r.tmpfs);
    spec.mounts = r.mounts.iter().map(bind).collect();
    spec.network = net;
    spec.cap_add = r.cap_add.clone();
    spec.cap_drop = r.cap_drop.clone();
    spec.memory = r.memory;
    spec.pids = r.pids;
    spec.cpus = r.cpus;
    spec.require_limits = r.require_limits;
    spec.subids = r.subids;
    spec.timeout = r.timeout;
    spec.max_output = r.max_output;
    spec.env.extend(r.env.iter().cloned());
    if let Some(cwd) = &r.cwd {
        spec.cwd = cwd.clone();
    }
    spec.stdin = if r.inherit_stdin {
        Stdin::Inherit
    } else {
        Stdin::Null
    };
    Ok(Built { spec, warnings })
}

/// Whether a session has `/deps`: with a setup, or when the caller wants it writable (a call's
/// `pip install` then installs there, in the environment the setup box makes).
pub fn has_deps(r: &SandboxRequest) -> bool {
    r.setup.is_some() || !r.deps_readonly
}

/// The spec every box of a Sandbox starts from (its calls set `argv`, the setup box more):
/// the workspace bound at /workspace, `/deps` when there is one ([`has_deps`]), the limits, and an
/// environment for notebooks (`MPLBACKEND=Agg`, unbuffered Python) under the caller's own.
pub fn sandbox_base(
    r: &SandboxRequest,
    workspace: &Path,
    deps: &Path,
) -> Result<BoxSpec, BuildError> {
    let net = network(&r.network, &r.secrets)?;
    let mut base = BoxSpec::new(vec!["true".into()]);
    match r.image.as_deref() {
        None | Some("host") => {}
        Some(name) => {
            let info = image(name)?;
            base.root = RootSpec::Dir(info.rootfs.clone());
            base.image_name = info.name.clone();
            for kv in info.config.env.iter().flatten() {
                if let Some((k, v)) = kv.split_once('=') {
                    base.env.push((k.to_string(), v.to_string()));
                }
            }
        }
    }
    base.workspace = Some(workspace.to_path_buf());
    base.memory = r.memory;
    if let Some(m) = base.memory {
        base.tmp_size = base.tmp_size.min(m / 2);
        base.shm_size = base.shm_size.min(m / 2);
    }
    tmpfs(&mut base, &r.tmpfs);
    base.mounts = r.mounts.iter().map(bind).collect();
    base.network = net;
    // A cap_drop list means the container default less those (kern's meaning); none, no
    // capability at all.
    if let Some(drop) = &r.cap_drop {
        base.cap_add = hull_box::caps::container_default(
            hull_box::remap::box_root().is_some(),
            base.network == Network::Gateway,
        );
        base.cap_drop.clone_from(drop);
    }
    base.pids = r.pids;
    base.cpus = r.cpus;
    base.require_limits = r.require_limits;
    base.timeout = r.timeout;
    if let Some(m) = r.max_output {
        base.max_output = m;
    }
    let mut env: Vec<(String, String)> = vec![
        ("MPLBACKEND".into(), "Agg".into()),
        ("PYTHONUNBUFFERED".into(), "1".into()),
        ("MPLCONFIGDIR".into(), "/tmp/.matplotlib".into()),
    ];
    if has_deps(r) {
        let pp = r
            .env
            .iter()
            .find(|(k, _)| k == "PYTHONPATH")
            .map_or(DEPS_DIR.to_string(), |(_, p)| format!("{DEPS_DIR}:{p}"));
        env.push(("PYTHONPATH".into(), pp));
        env.push(("HULL_DEPS".into(), DEPS_DIR.into()));
        env.push((
            "PATH".into(),
            format!("{DEPS_DIR}/bin:{}", hull_box::spec::BOX_PATH),
        ));
        base.mounts.push(BindMount {
            source: deps.to_path_buf(),
            target: DEPS_DIR.into(),
            read_only: r.deps_readonly,
        });
    }
    for (k, v) in &r.env {
        if k == "PYTHONPATH" && has_deps(r) {
            continue;
        }
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    base.env.extend(env);
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hull_box::spec;

    /// `hull run`'s defaults are the engine's: a request with none set is `BoxSpec::new`.
    #[test]
    fn a_default_request_is_the_engines_default_spec() {
        let r = RunRequest {
            argv: vec!["true".into()],
            ..RunRequest::default()
        };
        let built = run_spec(&r).unwrap();
        assert_eq!(built.spec, BoxSpec::new(vec!["true".into()]));
        assert_eq!(hull_api::request::defaults::PIDS, spec::DEFAULT_PIDS);
        assert_eq!(hull_api::request::defaults::TIMEOUT, spec::DEFAULT_TIMEOUT);
    }

    /// A gateway mode makes a gateway box; what this build cannot give yet (secrets, a
    /// Sandbox session's gateway) is refused naming the mode, never run with no network or the
    /// host's. `none` and `host` are the engine's own.
    #[test]
    fn a_gateway_mode_makes_a_gateway_box_and_what_is_not_wired_is_refused() {
        for mode in ["deny-all", "allow-all", "custom"] {
            let r = RunRequest::from_json(&serde_json::json!({"argv": ["true"], "network": mode}))
                .unwrap();
            assert_eq!(run_spec(&r).unwrap().spec.network, Network::Gateway);
            let with_secret = serde_json::json!({
                "network": mode,
                "secrets": [{"name": "K", "env": "HOME", "hosts": ["api.example.test"]}],
            });
            if let Ok(c) = SandboxRequest::from_json(&with_secret) {
                assert!(sandbox_base(&c, Path::new("/w"), Path::new("/d")).is_ok());
            }
            let c = SandboxRequest::from_json(&serde_json::json!({"network": mode})).unwrap();
            let base = sandbox_base(&c, Path::new("/w"), Path::new("/d")).unwrap();
            assert_eq!(base.network, Network::Gateway);
        }
        let host = RunRequest::from_json(&serde_json::json!({"argv": ["true"], "network": "host"}))
            .unwrap();
        assert_eq!(run_spec(&host).unwrap().spec.network, Network::Host);
    }

    #[test]
    fn a_tmpfs_at_tmp_sizes_tmp_and_code_runs_through_its_interpreter() {
        let r = RunRequest::from_json(&serde_json::json!({
            "code": "1", "language": "node", "tmpfs": ["/tmp=8m", "/c=4m"], "pids": 0,
        }))
        .unwrap();
        let s = run_spec(&r).unwrap().spec;
        assert_eq!(s.argv, ["node", "-e", "1"]);
        assert_eq!((s.tmp_size, s.tmpfs.len(), s.pids), (8 << 20, 1, None));
    }

    #[test]
    fn a_sandbox_base_binds_deps_only_with_a_setup_or_writable_and_halves_tmp_under_memory() {
        let ws = Path::new("/w");
        let deps = Path::new("/d");
        let r = SandboxRequest {
            memory: Some(64 << 20),
            ..SandboxRequest::default()
        };
        let b = sandbox_base(&r, ws, deps).unwrap();
        assert_eq!((b.tmp_size, b.memory), (32 << 20, Some(64 << 20)));
        assert!(b.mounts.is_empty() && b.workspace.as_deref() == Some(ws));
        let r = SandboxRequest {
            setup: Some("true".into()),
            env: vec![("PYTHONPATH".into(), "/x".into())],
            ..SandboxRequest::default()
        };
        let b = sandbox_base(&r, ws, deps).unwrap();
        assert_eq!(b.mounts[0].target, DEPS_DIR);
        assert!(b.env.contains(&("PYTHONPATH".into(), "/deps:/x".into())));
        let r = SandboxRequest {
            deps_readonly: false,
            ..SandboxRequest::default()
        };
        let b = sandbox_base(&r, ws, deps).unwrap();
        assert!(b.mounts[0].target == DEPS_DIR && !b.mounts[0].read_only);
    }
}
