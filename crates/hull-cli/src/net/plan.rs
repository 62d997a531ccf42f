//! From a request's gateway network to its running gateway: the [`Start`] a gateway process is
//! given, and the TAP handler a front end passes with the box (`hull_box::Handoff::tap`), which
//! starts the gateway on the box's TAP before the box's program runs and keeps it for the
//! caller (who ends it by dropping it once the box is done).

use std::net::SocketAddr;

use super::spawn::{GatewayProcess, Spare};
use super::wire::{PolicySpec, Start};

/// Name servers the gateway resolves through instead of the host's `/etc/resolv.conf`
/// (comma-separated `ADDRESS:PORT`): for hosts whose resolver configuration the confined
/// gateway cannot use, and for tests, which point it at a loopback server of their own.
pub const DNS_ENV: &str = "HULL_NET_DNS";

/// `HULL_NET_DNS`'s name servers (none when unset).
pub fn dns_override() -> Result<Vec<SocketAddr>, String> {
    let Some(v) = std::env::var_os(DNS_ENV) else {
        return Ok(Vec::new());
    };
    let v = v.to_string_lossy();
    v.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim().parse::<SocketAddr>().map_err(|e| {
                format!("{DNS_ENV}: `{s}` is not ADDRESS:PORT ({e}), e.g. 127.0.0.1:53")
            })
        })
        .collect()
}

/// PEM bundles the gateway trusts upstream besides the public roots and the host's bundle
/// (colon-separated paths): a private CA's, and tests' loopback servers'.
pub const UPSTREAM_CA_ENV: &str = "HULL_NET_UPSTREAM_CA";

/// The gateway start of a request's gateway network (without secrets: see [`brokered`]).
pub fn start_of(g: &hull_api::network::Gateway) -> Result<Start, String> {
    let paths: Vec<std::path::PathBuf> = std::env::var_os(UPSTREAM_CA_ENV)
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    let mut upstream_pems = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(&p)
            .map_err(|e| format!("{UPSTREAM_CA_ENV}: read {}: {e}", p.display()))?;
        upstream_pems.push((p.display().to_string(), text));
    }
    Ok(Start {
        policy: policy_of(g),
        ports: g.ports().to_vec(),
        max_tcp_connections: usize::try_from(g.max_tcp_connections()).unwrap_or(usize::MAX),
        mtu: hull_box::tap::MTU as usize,
        dns: dns_override()?,
        broker: None,
        ca_dir: None,
        upstream_pems,
        ca_files: Default::default(),
        proxy: super::proxy_env::from_env()?,
    })
}

/// Where a brokered box finds the gateway CA: `ca.pem` alone, and `bundle.pem` (the host's
/// bundle with it appended), bound read-only from a directory of the supervisor's. A top-level
/// directory of hull's own: an image's `/etc` or `/run` may not be covered (they are the
/// image's), and `/run/hull` is a Sandbox cell's I/O directory.
pub const TRUST_DIR: &str = "/.hull-ca";

/// A brokered box's side of its secrets: each secret's placeholder in its environment, the
/// gateway CA in its trust. The trust directory on the host goes when this is dropped.
#[derive(Debug)]
pub struct BoxTrust {
    env: Vec<(String, String)>,
    dir: std::path::PathBuf,
    ca_pem: String,
    bundles: super::bundles::Bundles,
}

impl BoxTrust {
    /// Puts the placeholders and the CA's environment in `spec`, binds the trust there, and
    /// covers the system bundles of its root with copies holding the CA.
    pub fn apply(&self, spec: &mut hull_box::BoxSpec) {
        spec.env.extend(self.env.iter().cloned());
        spec.mounts.push(hull_box::BindMount {
            source: self.dir.clone(),
            target: TRUST_DIR.into(),
            read_only: true,
        });
        self.cover_bundles(spec);
    }

    /// Covers the system bundles of `spec`'s root with copies holding the CA
    /// ([`super::bundles`]); a Sandbox session's boxes get them here, box by box, since their
    /// roots are known only then.
    pub fn cover_bundles(&self, spec: &mut hull_box::BoxSpec) {
        let extra = self.bundles.mounts(spec, &self.dir, &self.ca_pem);
        spec.mounts.extend(extra);
    }
}

impl BoxTrust {
    /// The same for every box of a Sandbox session: its request's environment and mounts.
    pub fn apply_to_request(&self, r: &mut hull_api::SandboxRequest) {
        r.env.extend(self.env.iter().cloned());
        r.mounts.push(hull_api::mount::Mount {
            source: self.dir.clone(),
            target: TRUST_DIR.into(),
            read_only: true,
        });
    }
}

impl Drop for BoxTrust {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Credential brokering for `secrets` (none: `None`): the broker spec `start` carries to the
/// gateway (each secret's value, read now from its `env` reference or as given, and the
/// placeholder made here, so the box's environment holds it before the gateway starts), and
/// what the box gets ([`BoxTrust`]). The CA is the installation's (`$HULL_HOME/ca`, made on
/// first use); its key stays with the gateway, which loads it itself.
pub fn brokered(
    start: &mut Start,
    secrets: &[hull_api::network::Secret],
    always: bool,
) -> Result<Option<BoxTrust>, String> {
    if secrets.is_empty() && !always {
        return Ok(None);
    }
    let ca_dir = hull_image::default_home().join("ca");
    let said = |e: hull_net::ca::CaError| {
        format!(
            "the gateway CA in {}: {}",
            ca_dir.display(),
            hull_api::Chain(&e)
        )
    };
    // Opened once, as one pair (made on first use): every box of this trust (a session's
    // boxes, started later) gets this CA, whatever `hull ca rotate` does meanwhile.
    let (cert, key) = match hull_net::ca::Ca::open_files(&ca_dir) {
        Ok(pair) => pair,
        Err(_) => {
            hull_net::ca::Ca::load_or_create(&ca_dir).map_err(said)?;
            hull_net::ca::Ca::open_files(&ca_dir).map_err(said)?
        }
    };
    let ca = hull_net::ca::Ca::from_files(&cert, &key, &ca_dir).map_err(said)?;
    let mut specs = Vec::new();
    let mut env = Vec::new();
    for s in secrets {
        let value = s.resolve()?;
        let placeholder =
            hull_net::secret::placeholder(&s.name).map_err(|e| hull_api::Chain(&e).to_string())?;
        specs.push(serde_json::json!({
            "name": s.name,
            "value": value.expose(),
            "hosts": s.hosts,
            "headers": s.headers,
            "placeholder": placeholder,
        }));
        env.push((s.name.clone(), placeholder));
    }
    for var in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
    ] {
        env.push((var.into(), format!("{TRUST_DIR}/bundle.pem")));
    }
    env.push(("NODE_EXTRA_CA_CERTS".into(), format!("{TRUST_DIR}/ca.pem")));
    let dir = trust_dir(ca.cert_pem())?;
    start.broker = Some(serde_json::json!({ "secrets": specs }));
    start.ca_files = super::wire::CaFiles(Some(std::sync::Arc::new((cert, key))));
    start.ca_dir = Some(ca_dir.clone());
    Ok(Some(BoxTrust {
        env,
        dir,
        ca_pem: ca.cert_pem().to_string(),
        bundles: super::bundles::Bundles::default(),
    }))
}

/// A fresh directory (0755) with `ca.pem` and `bundle.pem` (the host's bundle, then the CA).
fn trust_dir(ca_pem: &str) -> Result<std::path::PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    // A name nobody can guess ahead (the shared temporary directory): made, never reused.
    let random =
        hull_net::secret::placeholder("trust").map_err(|e| hull_api::Chain(&e).to_string())?;
    let dir = std::env::temp_dir().join(random.replacen("hull-secret-", "hull-", 1));
    // Modes set whole, whatever the umask: a box's root (host root's: hull's range; a VM's
    // root on its share) reads these as another user.
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&dir)
        .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)))
        .map_err(|e| format!("create {}: {e}", dir.display()))?;
    let host = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    let write = |name: &str, text: String| {
        super::bundles::world_readable(&dir.join(name), text.as_bytes())
            .map_err(|e| format!("write {}: {e}", dir.join(name).display()))
    };
    write("ca.pem", ca_pem.to_string())?;
    write("bundle.pem", format!("{host}\n{ca_pem}"))?;
    Ok(dir)
}

/// A running sandbox's replacement policy as `named.set_network` and `sandbox.set_network`
/// take it (`network`: a gateway mode's name or `{mode, allow_hosts, allow_cidrs,
/// deny_cidrs}`), or why not (the message of an error about `network`): the network's kind and
/// its ports are set when the sandbox is created.
pub fn replacement(v: Option<&serde_json::Value>) -> Result<hull_api::network::Gateway, String> {
    let v = v.ok_or("missing")?;
    match hull_api::network::from_value(v, false)? {
        hull_api::network::Network::Gateway(g) if g.ports().is_empty() => Ok(*g),
        hull_api::network::Network::Gateway(_) => {
            Err("ports are published when the sandbox is created".into())
        }
        _ => Err("expected a gateway mode (deny-all, allow-all or custom): a sandbox's network kind is set when it is created".into()),
    }
}

/// The policy of a request's gateway network, as the gateway process takes it.
pub fn policy_of(g: &hull_api::network::Gateway) -> PolicySpec {
    PolicySpec {
        mode: g.mode().to_string(),
        allow_hosts: g.allow_hosts().to_vec(),
        allow_cidrs: g.allow_cidrs().to_vec(),
        deny_cidrs: g.deny_cidrs().to_vec(),
    }
}

/// A TAP handler that starts the gateway of `start` on the box's TAP, tells `ready` (which may
/// announce the published ports) and puts it in `slot` (with its log at `log`, appended to,
/// when given).
pub fn handler<'a>(
    start: &'a Start,
    log: Option<&'a std::path::Path>,
    capped: bool,
    slot: &'a mut Option<GatewayProcess>,
    mut ready: impl FnMut(&GatewayProcess) + 'a,
) -> impl FnMut(hull_box::Tap) -> std::io::Result<()> + 'a {
    serving(start, log, capped, move |g| {
        ready(&g);
        *slot = Some(g);
        Ok(())
    })
}

/// A TAP handler that starts the gateway of `start` on the box's TAP (with its log at `log`,
/// appended to, when given) and hands it to `put`. The gateway process is started now, ahead
/// of the box ([`Spare`]): made just before the box is, it execs while the box is built.
/// `capped`: the gateway is moved into a memory-capped cgroup of its own (a named sandbox's,
/// which lives for hours; see [`Spare::spawn_capped`] for why a call's is not).
pub fn serving<'a>(
    start: &'a Start,
    log: Option<&'a std::path::Path>,
    capped: bool,
    mut put: impl FnMut(GatewayProcess) -> std::io::Result<()> + 'a,
) -> impl FnMut(hull_box::Tap) -> std::io::Result<()> + 'a {
    let spawn = move || Spare::spawn_capped(capped);
    let mut spare = Some(spawn());
    move |tap: hull_box::Tap| {
        let log = match log {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ),
            None => None,
        };
        let spare = spare.take().unwrap_or_else(spawn);
        let g = spare
            .and_then(|s| s.serve(tap.fd, start, log))
            .map_err(|e| std::io::Error::other(hull_api::Chain(&e).to_string()))?;
        put(g)
    }
}
