//! What a caller asks of one box (`BoxSpec`), and the checks that refuse a bad request before
//! anything is forked. Every refusal names the field ([`SpecField`]; each front end spells it
//! its own way) and says how to fix it.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::caps;
pub use crate::field::SpecField;
pub use crate::sensitive::is_within;
use crate::sensitive::{self, HomeOrEntry, Homes};
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
    /// A fresh network namespace with loopback and a TAP (`eth0`, see [`crate::tap`]) whose
    /// descriptor the caller takes (a [`crate::tap::TapHandler`] in the run's
    /// [`crate::tap::Handoff`]) and serves with the gateway, before the box's program starts.
    Gateway,
}

/// What the box's standard input is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stdin {
    Null,
    Inherit,
    /// The caller's fd 0 is a terminal made for this box (`hull run -t`: a pseudo-terminal
    /// whose other end the caller relays): it is also the program's stdout and stderr (which
    /// are then not captured) and its controlling terminal, in a session of its own.
    Terminal,
    /// A host file the supervisor opens read-only (as the caller) and hands the program as its
    /// fd 0: the input of a call given as bytes (`run(argv, stdin=...)`), written by the caller
    /// to a private file, so no thread has to feed a pipe while the box runs.
    File(PathBuf),
}

/// The host directories of a writable root (see [`BoxSpec::writable_root`]): overlayfs's upper
/// and work directories (one file system), and an empty directory that is the lower layer of a
/// `host` image's root (whose system directories are bound over it read-only, as in any box).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WritableRoot {
    pub upper: PathBuf,
    pub work: PathBuf,
    pub empty: PathBuf,
    /// Read-only layers between the upper and the image, top first: frozen uppers of
    /// templates (a template restores as a layer, never as a copy of its files).
    pub lowers: Vec<PathBuf>,
    /// `/workspace` is a directory of the writable root itself (so a template holds it too)
    /// instead of a bind of [`BoxSpec::workspace`], which is then not opened.
    pub workspace_in_root: bool,
    /// The layers already merged by the caller (fuse-overlayfs, where the kernel refuses
    /// overlayfs in a user namespace): this directory is bound as the root instead.
    pub merged: Option<PathBuf>,
    /// With `merged`: the box's pid 1 mounts the FUSE file system at `merged` itself, in its
    /// own user and mount namespaces (a rootless caller cannot mount FUSE for it: a FUSE
    /// descriptor serves only mounts of the user namespace that opened it), and hands its
    /// `/dev/fuse` descriptor to the caller, who serves it (see
    /// [`crate::Runtime::start_resident_serving`]).
    pub fuse_in_box: bool,
}

/// Starts the daemon of a box's FUSE root (`WritableRoot::fuse_in_box`): given pid 1's pid
/// and the `/dev/fuse` descriptor (see `Runtime::start_resident_serving`).
pub type FuseServer<'a> = dyn FnMut(libc::pid_t, std::os::fd::OwnedFd) -> std::io::Result<()> + 'a;

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
    /// Run the program as this user (`--user`; needs `subids`, which maps the ids): its process
    /// switches to these ids before its exec and keeps no capability; a workspace hull made for
    /// the box is given to it. None: the box's root.
    pub user: Option<crate::proto::resident::Ids>,
    /// A writable root on disk: the image read-only below, `upper` above (overlayfs in the
    /// box's user namespace). None: the read-only root of every one-shot box.
    pub writable_root: Option<WritableRoot>,
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
            user: None,
            writable_root: None,
            timeout: DEFAULT_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT,
            cwd: "/workspace".to_string(),
            stdin: Stdin::Null,
            hostname: "hull".to_string(),
        }
    }

    /// Refuses a request that would be dangerous or cannot work, before anything is created.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return Err(SpecError::NoCommand);
        }
        if self.argv.iter().any(|a| a.contains('\0')) {
            return Err(SpecError::Nul(SpecField::Command));
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(SpecError::BadEnv(k.clone()));
            }
        }
        if let Some(u) = &self.user {
            if !self.subids {
                return Err(SpecError::Invalid {
                    field: SpecField::Subids,
                    why: "a user other than root needs its ids mapped: set subids too".into(),
                });
            }
            if u.uid == crate::proto::resident::AS_PID1
                || u.groups.len() > crate::proto::resident::MAX_GROUPS
            {
                return Err(SpecError::Invalid {
                    field: SpecField::Subids,
                    why: format!(
                        "uid {} or {} groups cannot be given to a program",
                        u.uid,
                        u.groups.len()
                    ),
                });
            }
        }
        if self.timeout.is_zero() {
            return Err(SpecError::Invalid {
                field: SpecField::Timeout,
                why: "must be longer than zero".into(),
            });
        }
        if self.max_output == 0 {
            return Err(SpecError::Invalid {
                field: SpecField::MaxOutput,
                why: "must be at least 1 byte".into(),
            });
        }
        if let Some(p) = self.pids {
            if p == 0 {
                return Err(SpecError::Invalid {
                    field: SpecField::Pids,
                    why: "must be at least 1".into(),
                });
            }
        }
        if let Some(c) = self.cpus {
            if !(c.is_finite() && c > 0.0 && c <= 4096.0) {
                return Err(SpecError::Invalid {
                    field: SpecField::Cpus,
                    why: format!("`{c}` is not a positive CPU count (e.g. 0.5, 2)"),
                });
            }
        }
        if let Some(mem) = self.memory {
            if mem < (4 << 20) {
                return Err(SpecError::Invalid {
                    field: SpecField::Memory,
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
                field: SpecField::Cwd,
                why: format!("`{}` must be an absolute path in the box", self.cwd),
            });
        }
        if self.hostname.is_empty() || self.hostname.len() > 64 {
            return Err(SpecError::Invalid {
                field: SpecField::Hostname,
                why: "must be 1 to 64 characters".into(),
            });
        }
        // The host's home directories are looked up once, and only when there is a source.
        let homes = std::cell::OnceCell::new();
        let homes = || homes.get_or_init(Homes::of_host);
        if let RootSpec::Dir(d) = &self.root {
            if !d.is_dir() {
                return Err(SpecError::Invalid {
                    field: SpecField::Root,
                    why: format!("{} is not a directory", d.display()),
                });
            }
            check_source(SpecField::Root, d, true, homes())?;
        }
        // A workspace in the writable root is not opened: nothing to check.
        let in_root = self
            .writable_root
            .as_ref()
            .is_some_and(|w| w.workspace_in_root);
        if let Some(ws) = self.workspace.as_ref().filter(|_| !in_root) {
            check_source(SpecField::Workspace, ws, false, homes())?;
            if !ws.is_dir() {
                return Err(SpecError::Invalid {
                    field: SpecField::Workspace,
                    why: format!("{} is not a directory (create it first)", ws.display()),
                });
            }
        }
        let mut targets: Vec<&str> = Vec::new();
        for t in &self.tmpfs {
            check_target(SpecField::Tmpfs, &t.target)?;
            if targets.contains(&t.target.as_str()) {
                return Err(SpecError::DuplicateTarget(t.target.clone()));
            }
            targets.push(&t.target);
        }
        for m in &self.mounts {
            check_target(SpecField::Mounts, &m.target)?;
            check_source(SpecField::Mounts, &m.source, m.read_only, homes())?;
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

/// Box paths a mount may not cover: the box's own kernel interfaces and identity.
const REFUSED_TARGET_TREES: &[&str] = &["/proc", "/sys", "/dev"];

fn check_target(field: SpecField, target: &str) -> Result<(), SpecError> {
    let refuse = |why: String| SpecError::TargetRefused {
        field,
        target: target.to_string(),
        why,
    };
    if !target.starts_with('/') {
        return Err(refuse(
            "the target must be an absolute path in the box (e.g. /data)".into(),
        ));
    }
    if target.contains('\0') {
        return Err(SpecError::Nul(field));
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
    if target == "/etc" {
        return Err(refuse(
            "/etc is set up by hull itself and may not be covered; mount a file or directory inside it (e.g. /etc/nginx/nginx.conf)".into(),
        ));
    }
    if let Some(t) = REFUSED_TARGET_TREES.iter().find(|t| is_within(target, t)) {
        // /dev/shm is a scratch tmpfs like /tmp: what is bound there takes its place.
        if !is_within(target, "/dev/shm") {
            return Err(refuse(format!(
                "{t} is set up by hull itself and may not be covered"
            )));
        }
    }
    if target == "/workspace" {
        return Err(refuse(
            "/workspace is the box's workspace; choose its host directory as the workspace instead (a target below it, e.g. /workspace/data, is fine)"
                .into(),
        ));
    }
    Ok(())
}

/// Refuses a bind source (after resolving symlinks) that would expose host secrets or state:
/// `/`, container engine sockets, home directories and what contains them, and every path of
/// the reviewed list in `policy/sensitive-mounts.policy` ([`crate::sensitive`]) that the source
/// is, lies inside or contains (read-only entries pass when the bind is read-only).
pub(crate) fn check_source(
    field: SpecField,
    source: &Path,
    read_only: bool,
    homes: &Homes,
) -> Result<(), SpecError> {
    let canon = std::fs::canonicalize(source).map_err(|error| SpecError::SourceMissing {
        field,
        path: source.to_path_buf(),
        error,
    })?;
    let refuse = |why: String| SpecError::SourceRefused {
        field,
        path: source.to_path_buf(),
        resolved: canon.clone(),
        why,
    };
    let c = canon.to_string_lossy().to_string();
    if c == "/" {
        return Err(refuse("it would expose the whole host filesystem".into()));
    }
    if c.ends_with("docker.sock") || c.ends_with("containerd.sock") || c.ends_with("podman.sock") {
        return Err(refuse(
            "a container engine socket is root on the host".into(),
        ));
    }
    match sensitive::check(&c, read_only, homes) {
        Ok(()) => Ok(()),
        Err(HomeOrEntry::Home { home, is: true }) => Err(refuse(format!(
            "{home} is a home directory (it holds credentials and shell start-up files); mount the project directory itself"
        ))),
        Err(HomeOrEntry::Home { home, is: false }) => Err(refuse(format!(
            "it contains the home directory {home}; mount the project directory itself"
        ))),
        Err(HomeOrEntry::Entry(r)) => Err(refuse(format!("{r}; {}", r.fix(field)))),
    }
}

/// Why a request was refused. Each message says what is wrong and the fix; which field it is
/// about is [`SpecError::field`], which the front end names (`--mount: source /etc refused ...`
/// in `hull run`, `mounts: ...` in the SDKs).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("no command given; give the program and its arguments")]
    NoCommand,
    #[error("contains a NUL byte")]
    Nul(SpecField),
    #[error("`{0}`: write environment variables as NAME=VALUE with a non-empty NAME")]
    BadEnv(String),
    #[error("{why}")]
    Invalid { field: SpecField, why: String },
    #[error("tmpfs {target} of {} is larger than the memory cap of {}: it could never be filled; lower the tmpfs size or raise the memory cap", Human(*size), Human(*memory))]
    TmpfsOverMemory {
        target: String,
        size: u64,
        memory: u64,
    },
    #[error("target `{target}` refused: {why}")]
    TargetRefused {
        field: SpecField,
        target: String,
        why: String,
    },
    #[error("source {} refused (resolves to {}): {why}", path.display(), resolved.display())]
    SourceRefused {
        field: SpecField,
        path: PathBuf,
        resolved: PathBuf,
        why: String,
    },
    #[error("source {} cannot be used", path.display())]
    SourceMissing {
        field: SpecField,
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error("two mounts target `{0}`; give each path once")]
    DuplicateTarget(String),
    #[error("the tmpfs at {tmpfs} would cover the bind mount at {bind}; put the bind outside the tmpfs or drop the tmpfs")]
    TmpfsCoversBind { tmpfs: String, bind: String },
    #[error(transparent)]
    Caps(#[from] caps::CapError),
}

impl SpecError {
    /// The field the refusal is about.
    pub fn field(&self) -> SpecField {
        match self {
            SpecError::NoCommand => SpecField::Command,
            SpecError::Nul(f) => *f,
            SpecError::BadEnv(_) => SpecField::Env,
            SpecError::Invalid { field, .. }
            | SpecError::TargetRefused { field, .. }
            | SpecError::SourceRefused { field, .. }
            | SpecError::SourceMissing { field, .. } => *field,
            SpecError::TmpfsOverMemory { target, .. } if target == "/tmp" => SpecField::TmpSize,
            SpecError::TmpfsOverMemory { .. } | SpecError::TmpfsCoversBind { .. } => {
                SpecField::Tmpfs
            }
            SpecError::DuplicateTarget(_) => SpecField::Mounts,
            SpecError::Caps(c) => c.field(),
        }
    }
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
            let e = s.validate().unwrap_err();
            assert_eq!(e.field(), SpecField::Mounts, "{src}: {e}");
            assert!(e.to_string().contains("refused"), "{src}: {e}");
        }
    }

    /// The engine names fields, never one front end's spelling of them: `--mount` would be
    /// wrong for a Python caller who passed `mounts=`.
    #[test]
    fn refusals_name_a_field_and_no_front_ends_flag() {
        fn bind(src: &str, target: &str) -> BindMount {
            BindMount {
                source: src.into(),
                target: target.into(),
                read_only: true,
            }
        }
        type Change = Box<dyn Fn(&mut BoxSpec)>;
        let cases: Vec<(Change, SpecField)> = vec![
            (
                Box::new(|s| s.mounts.push(bind("/etc", "/data"))),
                SpecField::Mounts,
            ),
            (
                Box::new(|s| s.mounts.push(bind("/usr", "/proc"))),
                SpecField::Mounts,
            ),
            (
                Box::new(|s| s.mounts.push(bind("/no/such/dir", "/data"))),
                SpecField::Mounts,
            ),
            (
                Box::new(|s| s.root = RootSpec::Dir("/".into())),
                SpecField::Root,
            ),
            (
                Box::new(|s| s.workspace = Some("/etc".into())),
                SpecField::Workspace,
            ),
            (Box::new(|s| s.timeout = Duration::ZERO), SpecField::Timeout),
            (Box::new(|s| s.memory = Some(1 << 20)), SpecField::Memory),
            (
                Box::new(|s| {
                    s.memory = Some(16 << 20);
                    s.tmp_size = 32 << 20;
                }),
                SpecField::TmpSize,
            ),
            (
                Box::new(|s| s.cap_add = vec!["FLY".into()]),
                SpecField::CapAdd,
            ),
            (
                Box::new(|s| s.cap_drop = vec!["FLY".into()]),
                SpecField::CapDrop,
            ),
            (
                Box::new(|s| s.env = vec![("A=B".into(), "x".into())]),
                SpecField::Env,
            ),
            (Box::new(|s| s.argv.clear()), SpecField::Command),
            (Box::new(|s| s.cwd = "rel".into()), SpecField::Cwd),
            (
                Box::new(|s| {
                    s.tmpfs.push(TmpfsMount {
                        target: "/data".into(),
                        size: 1 << 20,
                    });
                    s.mounts.push(bind("/usr/share", "/data/x"));
                }),
                SpecField::Tmpfs,
            ),
        ];
        for (i, (make, field)) in cases.iter().enumerate() {
            let mut s = spec();
            make(&mut s);
            let e = s.validate().unwrap_err();
            assert_eq!(e.field(), *field, "case {i}: {e}");
            let text = crate::error::BoxError::from(e).to_string();
            assert!(!text.contains("--"), "case {i} names a flag: {text}");
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
            // /etc/passwd is refused by the plan for the host image (hull writes it), and an
            // image's may be covered (tests/cli.rs: binds_under_etc_...).
            "/etc",
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

    /// Makes `make` (directories end in `/`, `LINK -> TARGET` is a symlink, others are files) in
    /// a fresh home directory and checks `--mount HOME/src` with only that home known.
    fn mount_in_fake_home(make: &[&str], src: &str, read_only: bool) -> Result<(), SpecError> {
        let d = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(d.path()).unwrap().join("me");
        std::fs::create_dir(&home).unwrap();
        for m in make {
            let p = home.join(m.trim_end_matches('/'));
            if let Some((link, target)) = m.split_once(" -> ") {
                std::os::unix::fs::symlink(home.join(target), home.join(link)).unwrap();
            } else if m.ends_with('/') {
                std::fs::create_dir_all(&p).unwrap();
            } else {
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, b"secret").unwrap();
            }
        }
        let homes = Homes::only(&[home.to_str().unwrap()]);
        check_source(SpecField::Mounts, &home.join(src), read_only, &homes)
    }

    /// `~/SRC` is refused in both modes, naming the path, the reason and the fix.
    macro_rules! refused_in_any_mode {
        ($name:ident, make: $make:expr, mount: $src:expr, names: $path:expr, why: $why:expr) => {
            #[test]
            fn $name() {
                for ro in [false, true] {
                    let e = match mount_in_fake_home($make, $src, ro) {
                        Err(e @ SpecError::SourceRefused { .. }) => (e.to_string(), e.field()),
                        other => panic!("~/{} (read-only {ro}) was not refused: {other:?}", $src),
                    };
                    assert_eq!(e.1, SpecField::Mounts);
                    let e = e.0;
                    for word in [$path, $why, "copy only the files the box needs"] {
                        assert!(
                            e.contains(word),
                            "~/{} (read-only {ro}): `{word}` missing in: {e}",
                            $src
                        );
                    }
                }
            }
        };
    }

    refused_in_any_mode!(ssh_is_refused, make: &[".ssh/"], mount: ".ssh", names: "/me/.ssh holds", why: "SSH private keys");
    refused_in_any_mode!(aws_is_refused, make: &[".aws/"], mount: ".aws", names: "/me/.aws holds", why: "AWS access keys");
    refused_in_any_mode!(gnupg_is_refused, make: &[".gnupg/"], mount: ".gnupg", names: "/me/.gnupg holds", why: "GnuPG private keys");
    refused_in_any_mode!(gh_is_refused, make: &[".config/gh/"], mount: ".config/gh", names: "/me/.config/gh holds", why: "GitHub CLI's OAuth token");
    refused_in_any_mode!(netrc_is_refused, make: &[".netrc"], mount: ".netrc", names: "/me/.netrc holds", why: "passwords for hosts");
    refused_in_any_mode!(git_credentials_are_refused, make: &[".git-credentials"], mount: ".git-credentials", names: "/me/.git-credentials holds", why: "git's credential helper");
    refused_in_any_mode!(npmrc_is_refused, make: &[".npmrc"], mount: ".npmrc", names: "/me/.npmrc holds", why: "npm registry tokens");
    refused_in_any_mode!(pypirc_is_refused, make: &[".pypirc"], mount: ".pypirc", names: "/me/.pypirc holds", why: "PyPI upload tokens");
    refused_in_any_mode!(cargo_is_refused_for_its_token, make: &[".cargo/registry/"], mount: ".cargo", names: "it contains /", why: "/me/.cargo/credentials.toml, which holds the crates.io publishing token");
    refused_in_any_mode!(docker_is_refused, make: &[".docker/"], mount: ".docker", names: "/me/.docker holds", why: "container registry passwords");
    refused_in_any_mode!(kube_is_refused, make: &[".kube/"], mount: ".kube", names: "/me/.kube holds", why: "Kubernetes cluster credentials");
    refused_in_any_mode!(azure_is_refused, make: &[".azure/"], mount: ".azure", names: "/me/.azure holds", why: "Azure CLI access tokens");
    refused_in_any_mode!(gcloud_is_refused, make: &[".config/gcloud/"], mount: ".config/gcloud", names: "/me/.config/gcloud holds", why: "Google Cloud SDK credentials");
    refused_in_any_mode!(config_as_a_whole_is_refused, make: &[".config/"], mount: ".config", names: "it contains /", why: "/me/.config/gcloud, which holds Google Cloud SDK credentials");
    refused_in_any_mode!(a_key_inside_ssh_is_refused, make: &[".ssh/id_ed25519"], mount: ".ssh/id_ed25519", names: "it lies inside /", why: "/me/.ssh, which holds SSH private keys");
    refused_in_any_mode!(a_symlink_to_ssh_is_refused, make: &[".ssh/", "projects/", "projects/keys -> .ssh"], mount: "projects/keys", names: "/me/.ssh holds", why: "SSH private keys");
    refused_in_any_mode!(local_share_is_refused_for_keyrings, make: &[".local/share/"], mount: ".local/share", names: "it contains /", why: "/me/.local/share/keyrings, which holds the desktop keyring's secrets");

    /// `~/SRC` is refused writable, naming the path, the reason and the read-only fix, and
    /// accepted read-only.
    macro_rules! read_only_only {
        ($name:ident, make: $make:expr, mount: $src:expr, why: $why:expr) => {
            #[test]
            fn $name() {
                let e = match mount_in_fake_home($make, $src, false) {
                    Err(e @ SpecError::SourceRefused { .. }) => e.to_string(),
                    other => panic!("~/{} read-write was not refused: {other:?}", $src),
                };
                for word in [concat!("/me/", $src), $why, "read-only (SRC:DST:ro"] {
                    assert!(e.contains(word), "~/{}: `{word}` missing in: {e}", $src);
                }
                mount_in_fake_home($make, $src, true)
                    .unwrap_or_else(|e| panic!("~/{} read-only was refused: {e}", $src));
            }
        };
    }

    read_only_only!(bashrc_is_read_only, make: &[".bashrc"], mount: ".bashrc", why: "commands every interactive bash of the user runs");
    read_only_only!(profile_is_read_only, make: &[".profile"], mount: ".profile", why: "commands every login shell of the user runs");
    read_only_only!(zshrc_is_read_only, make: &[".zshrc"], mount: ".zshrc", why: "commands every interactive zsh");
    read_only_only!(local_bin_is_read_only, make: &[".local/bin/"], mount: ".local/bin", why: "commands on the user's PATH");
    read_only_only!(gitconfig_is_read_only, make: &[".gitconfig"], mount: ".gitconfig", why: "commands git runs");

    #[test]
    fn usr_is_read_only() {
        let homes = Homes::only(&[]);
        let e = check_source(SpecField::Mounts, Path::new("/usr"), false, &homes)
            .unwrap_err()
            .to_string();
        for word in [
            "/usr holds the host's programs and libraries",
            "read-only (SRC:DST:ro",
        ] {
            assert!(e.contains(word), "`{word}` missing in: {e}");
        }
        let e = check_source(SpecField::Mounts, Path::new("/usr/share"), false, &homes)
            .unwrap_err()
            .to_string();
        assert!(e.contains("it lies inside /usr"), "{e}");
        check_source(SpecField::Mounts, Path::new("/usr"), true, &homes).unwrap();
        check_source(SpecField::Root, Path::new("/usr"), true, &homes).unwrap();
    }

    #[test]
    fn the_workspace_is_writable_so_read_only_entries_are_refused_there() {
        let d = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir_all(home.join(".local/bin")).unwrap();
        let homes = Homes::only(&[home.to_str().unwrap()]);
        let e = check_source(
            SpecField::Workspace,
            &home.join(".local/bin"),
            false,
            &homes,
        )
        .unwrap_err();
        assert_eq!(e.field(), SpecField::Workspace);
        let e = e.to_string();
        assert!(e.contains("the workspace is writable"), "{e}");
    }

    #[test]
    fn a_home_and_what_contains_it_are_refused_and_projects_inside_are_not() {
        let d = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(d.path()).unwrap();
        let home = base.join("me");
        std::fs::create_dir_all(home.join("projects/app")).unwrap();
        let homes = Homes::only(&[home.to_str().unwrap()]);
        let e = check_source(SpecField::Mounts, &home, true, &homes)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a home directory"), "{e}");
        let e = check_source(SpecField::Mounts, &base, true, &homes)
            .unwrap_err()
            .to_string();
        assert!(e.contains("contains the home directory"), "{e}");
        check_source(SpecField::Mounts, &home.join("projects/app"), false, &homes).unwrap();
    }

    #[test]
    fn within_is_component_wise() {
        assert!(is_within("/data/x", "/data"));
        assert!(is_within("/data", "/data"));
        assert!(!is_within("/database", "/data"));
    }
}
