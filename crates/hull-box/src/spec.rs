//! What a caller asks of one box (`BoxSpec`), and the checks that refuse a bad request before
//! anything is forked. Every refusal names the argument and says how to fix it.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::caps;
use crate::size::Human;

/// Where the box's read-only root comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootSpec {
    /// The embedded default image `host`: a read-only view of the host's system directories.
    Host,
    /// An unpacked root filesystem directory (`--rootfs DIR`, or an image from the store).
    Dir(PathBuf),
}

/// A host path bound into the box.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindMount {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
}

/// A tmpfs mounted in the box.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TmpfsMount {
    pub target: String,
    pub size: u64,
}

/// The box's network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    /// A fresh network namespace with loopback only (the default).
    None,
    /// The host's network namespace: an explicit, named relaxation.
    Host,
}

/// What the box's standard input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stdin {
    Null,
    Inherit,
}

/// Everything one box needs. Built by a front end, checked by [`BoxSpec::validate`].
#[derive(Clone, Debug, PartialEq)]
pub struct BoxSpec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub root: RootSpec,
    /// The image's name, for messages (`host`, `debian:12`, or the rootfs path).
    pub image_name: String,
    /// Host directory bound at /workspace; `None` makes a fresh one that is deleted at exit.
    pub workspace: Option<PathBuf>,
    pub tmp_size: u64,
    pub shm_size: u64,
    pub tmpfs: Vec<TmpfsMount>,
    pub mounts: Vec<BindMount>,
    pub network: Network,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    pub cpus: Option<f64>,
    pub require_limits: bool,
    /// Map ids 1-65536 inside to the caller's /etc/subuid and /etc/subgid ranges (see
    /// [`crate::subids`]); such a box is always built from scratch.
    pub subids: bool,
    pub timeout: Duration,
    pub max_output: u64,
    pub cwd: String,
    pub stdin: Stdin,
    pub hostname: String,
}

/// The defaults of `hull run`.
pub const DEFAULT_TMP_SIZE: u64 = 64 << 20;
pub const DEFAULT_SHM_SIZE: u64 = 64 << 20;
pub const DEFAULT_PIDS: u64 = 256;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_MAX_OUTPUT: u64 = 64 << 20;
/// The box PATH: where `hull run -- python3` looks for `python3`.
pub const BOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl BoxSpec {
    /// A spec with every default, running `argv` on the `host` image.
    pub fn new(argv: Vec<String>) -> BoxSpec {
        BoxSpec {
            argv,
            env: Vec::new(),
            root: RootSpec::Host,
            image_name: "host".to_string(),
            workspace: None,
            tmp_size: DEFAULT_TMP_SIZE,
            shm_size: DEFAULT_SHM_SIZE,
            tmpfs: Vec::new(),
            mounts: Vec::new(),
            network: Network::None,
            cap_add: Vec::new(),
            cap_drop: Vec::new(),
            memory: None,
            pids: Some(DEFAULT_PIDS),
            cpus: None,
            require_limits: false,
            subids: false,
            timeout: DEFAULT_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT,
            cwd: "/workspace".to_string(),
            stdin: Stdin::Null,
            hostname: "hull".to_string(),
        }
    }

    /// Refuses a request that would be unsafe or cannot work, before anything is created.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return Err(SpecError::NoCommand);
        }
        if self.argv.iter().any(|a| a.contains('\0')) {
            return Err(SpecError::Nul("command".into()));
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(SpecError::BadEnv(k.clone()));
            }
        }
        if self.timeout.is_zero() {
            return Err(SpecError::Invalid {
                arg: "--timeout",
                why: "must be longer than zero".into(),
            });
        }
        if self.max_output == 0 {
            return Err(SpecError::Invalid {
                arg: "--max-output",
                why: "must be at least 1 byte".into(),
            });
        }
        if let Some(p) = self.pids {
            if p == 0 {
                return Err(SpecError::Invalid {
                    arg: "--pids",
                    why: "must be at least 1".into(),
                });
            }
        }
        if let Some(c) = self.cpus {
            if !(c.is_finite() && c > 0.0 && c <= 4096.0) {
                return Err(SpecError::Invalid {
                    arg: "--cpus",
                    why: format!("`{c}` is not a positive CPU count (e.g. 0.5, 2)"),
                });
            }
        }
        if let Some(mem) = self.memory {
            if mem < (4 << 20) {
                return Err(SpecError::Invalid {
                    arg: "--memory",
                    why: format!(
                        "{} is too small to start a process; give at least 4m",
                        Human(mem)
                    ),
                });
            }
            if self.tmp_size > mem {
                return Err(SpecError::TmpfsOverMemory {
                    target: "/tmp".into(),
                    size: self.tmp_size,
                    memory: mem,
                });
            }
            for t in &self.tmpfs {
                if t.size > mem {
                    return Err(SpecError::TmpfsOverMemory {
                        target: t.target.clone(),
                        size: t.size,
                        memory: mem,
                    });
                }
            }
        }
        caps::resolve_for(
            &self.cap_add,
            &self.cap_drop,
            crate::remap::box_root().is_some(),
        )?;
        if !self.cwd.starts_with('/') {
            return Err(SpecError::Invalid {
                arg: "--cwd",
                why: format!("`{}` must be an absolute path in the box", self.cwd),
            });
        }
        if self.hostname.is_empty() || self.hostname.len() > 64 {
            return Err(SpecError::Invalid {
                arg: "--hostname",
                why: "must be 1 to 64 characters".into(),
            });
        }
        let home = std::env::var_os("HOME").map(PathBuf::from);
        if let RootSpec::Dir(d) = &self.root {
            if !d.is_dir() {
                return Err(SpecError::Invalid {
                    arg: "--rootfs",
                    why: format!("{} is not a directory", d.display()),
                });
            }
            check_source("--rootfs", d, home.as_deref())?;
        }
        if let Some(ws) = &self.workspace {
            check_source("--workspace", ws, home.as_deref())?;
            if !ws.is_dir() {
                return Err(SpecError::Invalid {
                    arg: "--workspace",
                    why: format!("{} is not a directory (create it first)", ws.display()),
                });
            }
        }
        let mut targets: Vec<&str> = Vec::new();
        for t in &self.tmpfs {
            check_target("--tmpfs", &t.target)?;
            if targets.contains(&t.target.as_str()) {
                return Err(SpecError::DuplicateTarget(t.target.clone()));
            }
            targets.push(&t.target);
        }
        for m in &self.mounts {
            check_target("--mount", &m.target)?;
            if m.target == "/tmp" {
                return Err(SpecError::TargetRefused { arg: "--mount", target: m.target.clone(), why: "/tmp is the box's private tmpfs; mount under it (e.g. /tmp/data) or at another path".into() });
            }
            check_source("--mount", &m.source, home.as_deref())?;
            if targets.contains(&m.target.as_str()) {
                return Err(SpecError::DuplicateTarget(m.target.clone()));
            }
            if let Some(t) = self.tmpfs.iter().find(|t| is_within(&m.target, &t.target)) {
                return Err(SpecError::TmpfsCoversBind {
                    tmpfs: t.target.clone(),
                    bind: m.target.clone(),
                });
            }
            targets.push(&m.target);
        }
        Ok(())
    }

    /// The limits requested, for the cgroup layer.
    pub fn cpu_millis(&self) -> Option<u64> {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        // validated: positive, <= 4096
        self.cpus.map(|c| (c * 1000.0).round().max(1.0) as u64)
    }
}

/// True when `path` equals `dir` or lies below it (both normalised absolute box paths).
pub fn is_within(path: &str, dir: &str) -> bool {
    if dir == "/" {
        return true;
    }
    path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// Box paths a mount may not cover: the box's own kernel interfaces and identity.
const REFUSED_TARGET_TREES: &[&str] = &["/proc", "/sys", "/dev", "/etc"];

fn check_target(arg: &'static str, target: &str) -> Result<(), SpecError> {
    let refuse = |why: String| SpecError::TargetRefused {
        arg,
        target: target.to_string(),
        why,
    };
    if !target.starts_with('/') {
        return Err(refuse(
            "the target must be an absolute path in the box (e.g. /data)".into(),
        ));
    }
    if target.contains('\0') {
        return Err(SpecError::Nul(arg.into()));
    }
    let p = Path::new(target);
    if p.components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
        || target.contains("//")
        || (target.len() > 1 && target.ends_with('/'))
    {
        return Err(refuse(
            "write the target without `.`, `..`, `//` or a trailing `/`".into(),
        ));
    }
    if target == "/" {
        return Err(refuse("it would replace the box's whole root".into()));
    }
    if let Some(t) = REFUSED_TARGET_TREES.iter().find(|t| is_within(target, t)) {
        if !(target.starts_with("/dev/shm/")) {
            return Err(refuse(format!(
                "{t} is set up by hull itself and may not be covered"
            )));
        }
    }
    if is_within(target, "/workspace") {
        return Err(refuse(
            "/workspace is the box's workspace; choose it with --workspace DIR".into(),
        ));
    }
    Ok(())
}

/// Host paths that may not be bound into a box because of what lies below them.
const REFUSED_SOURCE_TREES: &[&str] = &[
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/run",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/containers",
    "/var/lib/kubelet",
    "/var/log",
];

/// Secrets under a home directory.
const REFUSED_HOME_TREES: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".kube",
    ".docker",
    ".config/gcloud",
    ".azure",
    ".netrc",
    ".password-store",
];

/// Refuses a bind source (after resolving symlinks) that would expose host secrets or state.
pub(crate) fn check_source(
    arg: &'static str,
    source: &Path,
    home: Option<&Path>,
) -> Result<(), SpecError> {
    let canon = std::fs::canonicalize(source).map_err(|e| SpecError::SourceMissing {
        arg,
        path: source.to_path_buf(),
        error: e.to_string(),
    })?;
    let refuse = |why: String| SpecError::SourceRefused {
        arg,
        path: source.to_path_buf(),
        resolved: canon.clone(),
        why,
    };
    let c = canon.to_string_lossy().to_string();
    if c == "/" {
        return Err(refuse("it would expose the whole host filesystem".into()));
    }
    for t in REFUSED_SOURCE_TREES {
        if is_within(&c, t) {
            return Err(refuse(format!(
                "{t} holds host configuration, kernel interfaces or other workloads' state"
            )));
        }
        // A parent of a refused tree exposes it too (`/var` holds `/var/log`).
        if is_within(t, &c) {
            return Err(refuse(format!(
                "it contains {t}, which holds host configuration or other workloads' state"
            )));
        }
    }
    // The host's /tmp is where the box's root is staged (and where other boxes' workspaces live).
    if c == crate::plan::STAGE || c == "/var/tmp" {
        return Err(refuse(format!(
            "{c} is shared by every process and box on the host; mount a directory inside it"
        )));
    }
    for whole in ["/home", "/root"] {
        if c == whole {
            return Err(refuse(format!(
                "{whole} holds every user's home directory; mount the project directory itself"
            )));
        }
    }
    if let Some(user_home) = ["/home/", "/root/"].iter().find(|p| c.starts_with(**p)) {
        // Another user's (or root's) credentials, whatever $HOME says.
        let rest = &c[user_home.len()..];
        let inner = if *user_home == "/root/" {
            rest
        } else {
            rest.split_once('/').map_or("", |(_, r)| r)
        };
        if let Some(s) = REFUSED_HOME_TREES
            .iter()
            .find(|s| is_within(&format!("/{inner}"), &format!("/{s}")))
        {
            return Err(refuse(format!("~/{s} holds credentials")));
        }
    }
    if c.ends_with("docker.sock") || c.ends_with("containerd.sock") || c.ends_with("podman.sock") {
        return Err(refuse(
            "a container engine socket is root on the host".into(),
        ));
    }
    if let Some(home) = home.and_then(|h| std::fs::canonicalize(h).ok()) {
        let h = home.to_string_lossy().to_string();
        if h != "/" && is_within(&h, &c) {
            return Err(refuse(format!(
                "it contains your home directory {h}; mount the project directory itself"
            )));
        }
        for s in REFUSED_HOME_TREES {
            if is_within(&c, &format!("{h}/{s}")) {
                return Err(refuse(format!("~/{s} holds credentials")));
            }
        }
    }
    Ok(())
}

/// Why a request was refused. Each message names the argument and the fix.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("no command given: pass one after `--` (e.g. `hull run -- python3 -c 'print(1)'`) or use --code")]
    NoCommand,
    #[error("{0} contains a NUL byte")]
    Nul(String),
    #[error("--env `{0}`: write environment variables as NAME=VALUE with a non-empty NAME")]
    BadEnv(String),
    #[error("{arg}: {why}")]
    Invalid { arg: &'static str, why: String },
    #[error("tmpfs {target} of {} is larger than the memory cap of {}: it could never be filled; lower the tmpfs size or raise --memory", Human(*size), Human(*memory))]
    TmpfsOverMemory {
        target: String,
        size: u64,
        memory: u64,
    },
    #[error("{arg} target `{target}` refused: {why}")]
    TargetRefused {
        arg: &'static str,
        target: String,
        why: String,
    },
    #[error("{arg} source {} refused (resolves to {}): {why}", path.display(), resolved.display())]
    SourceRefused {
        arg: &'static str,
        path: PathBuf,
        resolved: PathBuf,
        why: String,
    },
    #[error("{arg} source {}: {error}", path.display())]
    SourceMissing {
        arg: &'static str,
        path: PathBuf,
        error: String,
    },
    #[error("two mounts target `{0}`; give each path once")]
    DuplicateTarget(String),
    #[error("--tmpfs {tmpfs} would cover the --mount at {bind}; put the bind outside the tmpfs or drop the tmpfs")]
    TmpfsCoversBind { tmpfs: String, bind: String },
    #[error(transparent)]
    Caps(#[from] caps::CapError),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> BoxSpec {
        BoxSpec::new(vec!["true".into()])
    }

    #[test]
    fn defaults_validate() {
        spec().validate().unwrap();
    }

    #[test]
    fn sensitive_sources_are_refused() {
        for src in [
            "/",
            "/etc",
            "/etc/ssl",
            "/proc",
            "/sys/kernel",
            "/dev",
            "/run",
            "/home",
            "/tmp",
            "/var",
        ] {
            let mut s = spec();
            s.mounts.push(BindMount {
                source: src.into(),
                target: "/data".into(),
                read_only: true,
            });
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains("--mount") && e.contains("refused"), "{src}: {e}");
        }
    }

    #[test]
    fn symlink_to_etc_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("innocent");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        let mut s = spec();
        s.mounts.push(BindMount {
            source: link,
            target: "/data".into(),
            read_only: true,
        });
        assert!(matches!(s.validate(), Err(SpecError::SourceRefused { .. })));
    }

    #[test]
    fn sensitive_targets_are_refused() {
        for t in [
            "/",
            "/proc",
            "/proc/sys",
            "/sys",
            "/dev",
            "/etc",
            "/etc/passwd",
            "relative",
            "/a/../etc",
            "/workspace",
        ] {
            let d = tempfile::tempdir().unwrap();
            let mut s = spec();
            s.mounts.push(BindMount {
                source: d.path().into(),
                target: t.into(),
                read_only: true,
            });
            assert!(
                matches!(s.validate(), Err(SpecError::TargetRefused { .. })),
                "{t}"
            );
        }
    }

    #[test]
    fn tmpfs_covering_a_bind_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut s = spec();
        s.tmpfs.push(TmpfsMount {
            target: "/data".into(),
            size: 1 << 20,
        });
        s.mounts.push(BindMount {
            source: d.path().into(),
            target: "/data/in".into(),
            read_only: false,
        });
        assert!(matches!(
            s.validate(),
            Err(SpecError::TmpfsCoversBind { .. })
        ));
    }

    #[test]
    fn tmpfs_larger_than_memory_is_refused() {
        let mut s = spec();
        s.memory = Some(32 << 20);
        let e = s.validate().unwrap_err();
        assert!(matches!(e, SpecError::TmpfsOverMemory { .. }), "{e}");
        s.tmp_size = 16 << 20;
        s.validate().unwrap();
    }

    #[test]
    fn within_is_component_wise() {
        assert!(is_within("/data/x", "/data"));
        assert!(is_within("/data", "/data"));
        assert!(!is_within("/database", "/data"));
    }
}
