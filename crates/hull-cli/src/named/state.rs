//! A named sandbox on disk: the name rule, where state directories live, and what one holds
//! (its configuration, the keeper's lock, pid and control socket, logs, its disk).
//!
//! ```text
//! <root>/<name>/config.json   what `hull create` was asked (the keeper rebuilds the box from it)
//!              keeper.lock    flock'd by the live keeper: held = running
//!              keeper.pid     the live keeper's pid
//!              control.sock   the keeper's control socket (0600; the directory is 0700)
//!              keeper.log     the keeper's own stderr
//!              setup.done     the setup commands ran (they run once, at creation)
//!              logs/exec.log  what every exec printed (rotated to exec.log.1 past the cap)
//!              upper/ work/   its writable root's overlay layers (the image is the lowest one,
//!                             template layers stack between); /workspace is upper/workspace
//!                             unless --workspace names a host directory
//!              lower/         an empty lower layer for the `host` image's root
//!              merged/        fuse-overlayfs only: the keeper's mount point of the merged root
//!              workspace/     only in a sandbox made before templates: its /workspace
//! <root>/.templates/          the template store (see [`super::template`])
//! ```

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The rule names follow (said in refusals).
pub const NAME_RULE: &str =
    "1 to 63 characters: lowercase letters, digits, `_`, `.` and `-`, starting with a letter or digit";

/// Refuses a name outside [`NAME_RULE`] (it becomes a directory name and a hostname part).
pub fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.' || c == '-');
    if first_ok && rest_ok && name.len() <= 63 {
        Ok(())
    } else {
        Err(format!("bad sandbox name `{name}`: {NAME_RULE}"))
    }
}

/// Where sandboxes live: `$HULL_SANDBOXES` when set; as root `/var/lib/hull/sandboxes` (state
/// of the system, beside other daemons'); else `$XDG_STATE_HOME/hull/sandboxes` or
/// `~/.local/state/hull/sandboxes` (XDG's place for state that outlives a process but is not
/// a document: logs, a disk that can be rebuilt).
pub fn root() -> PathBuf {
    if let Some(d) = std::env::var_os("HULL_SANDBOXES").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/lib/hull/sandboxes");
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")));
    match state {
        Some(s) => s.join("hull/sandboxes"),
        // No home to speak of: a directory of this user's own in the sticky /tmp (checked
        // to be ours and private before use, so nobody can plant one for us).
        None => PathBuf::from(format!("/tmp/hull-{}", rustix::process::geteuid().as_raw()))
            .join("sandboxes"),
    }
}

/// Refuses a sandboxes directory (and the /tmp fallback's parent) that another user owns or may
/// write: whoever can replace a sandbox's directory there chooses the commands its keeper
/// runs and receives what execs send it.
fn check_private(root: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let ours = rustix::process::geteuid().as_raw();
    let mut check = vec![root];
    let fallback = PathBuf::from(format!("/tmp/hull-{ours}"));
    if root.parent() == Some(fallback.as_path()) {
        check.push(&fallback);
    }
    for dir in check {
        let md = std::fs::metadata(dir).map_err(|e| format!("inspect {}: {e}", dir.display()))?;
        if md.uid() != ours || md.mode() & 0o022 != 0 {
            return Err(format!(
                "{} is owned by uid {} with mode {:o}: sandboxes must live in a directory only you own and can write; remove it, or set HULL_SANDBOXES to one",
                dir.display(),
                md.uid(),
                md.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// What a sandbox was created with: the keeper rebuilds its box from this at every start.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Config {
    pub name: String,
    pub image: String,
    /// A host directory at /workspace (read-write) instead of the sandbox's own disk.
    pub workspace: Option<PathBuf>,
    /// Host directories mounted read-only at the same path.
    pub ro_workspaces: Vec<PathBuf>,
    pub memory: Option<u64>,
    pub cpus: Option<f64>,
    pub pids: Option<u64>,
    pub env: Vec<(String, String)>,
    pub setup: Vec<String>,
    /// How long one setup command may run (`--setup-timeout`; absent in older configs).
    #[serde(default)]
    pub setup_timeout_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    pub max_duration_ms: Option<u64>,
    /// Seconds since the epoch.
    pub created: u64,
    /// Template layers under its upper, top first (ids in the template store's `layers/`).
    #[serde(default)]
    pub layers: Vec<String>,
    /// The template it was made from, if any (for `hull ps`; the layers are what count).
    #[serde(default)]
    pub template: Option<String>,
    /// `--user NAME|UID[:GID]`: the user of the image its commands run as (setup commands
    /// run as root); None: root. Resolved in the sandbox's `/etc/passwd` at every start.
    #[serde(default)]
    pub user: Option<String>,
    /// The network (`--network` and its flags; none in configs older than it).
    #[serde(default)]
    pub network: hull_api::Network,
    /// Secrets for the gateway, as references to the environment only (`env`): serializing a
    /// secret that holds its value fails, so none is ever written here.
    #[serde(default)]
    pub secrets: Vec<hull_api::Secret>,
    /// Whether the gateway brokers credentials even with no secret given (its CA trusted in
    /// the box from the start), so request transformations can be set while it runs
    /// (`named.set_transformations`); they live in the keeper's memory only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub brokering: bool,
}

/// One sandbox's state directory.
#[derive(Debug, Clone)]
pub struct Dir {
    pub name: String,
    pub path: PathBuf,
}

impl Dir {
    pub fn of(name: &str) -> Result<Dir, String> {
        check_name(name)?;
        Ok(Dir {
            name: name.to_string(),
            path: root().join(name),
        })
    }

    pub fn exists(&self) -> bool {
        self.path.join("config.json").is_file()
    }

    /// Makes the directory (0700): a name already taken is a conflict.
    pub fn make(&self) -> Result<(), String> {
        let root = root();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .map_err(|e| format!("create {}: {e}", root.display()))?;
        check_private(&root)?;
        match std::fs::DirBuilder::new().mode(0o700).create(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(format!(
                "a sandbox named `{}` already exists (conflict): `hull rm {}` first, or pick another name",
                self.name, self.name
            )),
            Err(e) => Err(format!("create {}: {e}", self.path.display())),
        }
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn workspace(&self) -> PathBuf {
        self.path.join("workspace")
    }

    /// The overlay directories of its writable root, made on first use: `upper` (what the
    /// sandbox changed), `work` (overlayfs's own) and an empty `lower` (the `host` image's root
    /// layer). As host root the first two go to the box's root id (hull's own range), which
    /// writes them. A sandbox without `--workspace` keeps `/workspace` in its writable root
    /// (so a template holds it); one made before that binds its `workspace/` directory.
    pub fn writable_root(&self) -> Result<hull_box::WritableRoot, String> {
        self.writable_root_over(&[], false)
    }

    /// [`Dir::writable_root`] over the template layers `layers` (ids, top first).
    pub fn writable_root_over(
        &self,
        layers: &[String],
        workspace_in_root: bool,
    ) -> Result<hull_box::WritableRoot, String> {
        let root = hull_box::WritableRoot {
            upper: self.path.join("upper"),
            work: self.path.join("work"),
            empty: self.path.join("lower"),
            lowers: layers.iter().map(|id| layer_path(&self.path, id)).collect(),
            workspace_in_root,
            merged: None,
            fuse_in_box: false,
        };
        for l in &root.lowers {
            if !l.is_dir() {
                return Err(format!(
                    "template layer {} is missing (was the template store changed by hand?)",
                    l.display()
                ));
            }
        }
        for d in [&root.upper, &root.work, &root.empty] {
            match std::fs::DirBuilder::new().mode(0o755).create(d) {
                Ok(()) => {
                    if d != &root.empty {
                        if let Some((uid, gid)) = hull_box::remap::box_root() {
                            std::os::unix::fs::chown(d, Some(uid), Some(gid))
                                .map_err(|e| format!("chown {}: {e}", d.display()))?;
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(format!("create {}: {e}", d.display())),
            }
        }
        Ok(root)
    }

    pub fn logs(&self) -> PathBuf {
        self.path.join("logs")
    }

    pub fn write_config(&self, c: &Config) -> Result<(), String> {
        let text = serde_json::to_vec_pretty(c).map_err(|e| e.to_string())?;
        write_atomic(&self.file("config.json"), &text)
    }

    pub fn config(&self) -> Result<Config, String> {
        let path = self.file("config.json");
        let text = std::fs::read(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("no sandbox named `{}` (see `hull ps`)", self.name)
            } else {
                format!("read {}: {e}", path.display())
            }
        })?;
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Opens (creating) the keeper's lock file.
    pub fn lock_file(&self) -> std::io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(self.file("keeper.lock"))
    }

    /// Whether a keeper holds the lock (the sandbox runs).
    pub fn running(&self) -> bool {
        let Ok(f) = self.lock_file() else {
            return false;
        };
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared) {
            Ok(()) => false,
            Err(_) => true,
        }
    }

    /// The live keeper's pid, as it wrote it.
    pub fn keeper_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.file("keeper.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The control socket's path as `connect`/`bind` take it: a long state path goes through
    /// `/proc/self/fd` of an open directory (a socket path holds at most 107 bytes), and the
    /// directory's descriptor is returned to be kept open meanwhile.
    pub fn socket_path(&self) -> std::io::Result<(PathBuf, Option<File>)> {
        let direct = self.file("control.sock");
        if direct.as_os_str().len() < 100 {
            return Ok((direct, None));
        }
        let dir = File::open(&self.path)?;
        use std::os::fd::AsRawFd;
        let via = PathBuf::from(format!("/proc/self/fd/{}/control.sock", dir.as_raw_fd()));
        Ok((via, Some(dir)))
    }

    /// Bytes on disk under the directory (files only; links not followed; template layers
    /// it stands on are the template's).
    pub fn size(&self) -> u64 {
        tree_size(&self.path)
    }
}

/// Bytes of the files under `p` (links not followed).
pub fn tree_size(p: &Path) -> u64 {
    fn walk(p: &Path, depth: usize) -> u64 {
        let Ok(rd) = std::fs::read_dir(p) else {
            return 0;
        };
        rd.filter_map(Result::ok)
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() && depth < 64 => walk(&e.path(), depth + 1),
                Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
                _ => 0,
            })
            .sum()
    }
    walk(p, 0)
}

/// Every sandbox directory under [`root`], by name.
pub fn list() -> Vec<Dir> {
    let Ok(rd) = std::fs::read_dir(root()) else {
        return Vec::new();
    };
    let mut v: Vec<Dir> = rd
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| Dir::of(n).ok()))
        .filter(Dir::exists)
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// Writes `data` to `path` through a temporary file and a rename (0600).
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("write {}: {e}", tmp.display()))?;
    f.write_all(data)
        .map_err(|e| format!("write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("write {}: {e}", path.display()))
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A layer's directory, by id, for a sandbox whose state directory is `sandbox_dir` (the
/// keeper finds the store from its own directory, not from its environment).
pub fn layer_path(sandbox_dir: &Path, id: &str) -> PathBuf {
    sandbox_dir
        .parent()
        .unwrap_or(Path::new("/"))
        .join(".templates/layers")
        .join(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        for ok in ["a", "dev-1", "x.y_z", "0abc", &"a".repeat(63)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            ".a",
            "A",
            "a/b",
            "a b",
            "..",
            &"a".repeat(64),
            "é",
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(e.contains(NAME_RULE), "{e}");
        }
    }

    /// A configuration persists the network as asked and a secret only as its reference; one
    /// holding a secret's value cannot be written at all; one older than the network reads as
    /// `none`.
    #[test]
    fn the_network_persists_and_a_secrets_value_never_does() {
        let old = serde_json::json!({
            "name": "a", "image": "host", "workspace": null, "ro_workspaces": [], "memory": null,
            "cpus": null, "pids": 1024, "env": [], "setup": [], "idle_timeout_ms": null,
            "max_duration_ms": null, "created": 1,
        });
        let mut c: Config = serde_json::from_value(old).unwrap();
        assert_eq!((&c.network, c.secrets.len()), (&hull_api::Network::None, 0));
        c.network = hull_api::network::from_value(
            &serde_json::json!({"mode": "custom", "allow_hosts": ["*.example.com"]}),
            false,
        )
        .unwrap();
        c.secrets = hull_api::network::secrets_from_value(&serde_json::json!([
            {"name": "K", "env": "MY_KEY", "hosts": ["api.example.com"]}
        ]))
        .unwrap();
        let text = serde_json::to_string(&c).unwrap();
        let back: Config = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
        assert!(text.contains(r#""env":"MY_KEY""#), "{text}");
        c.secrets = hull_api::network::secrets_from_value(&serde_json::json!([
            {"name": "K", "value": "sk-on-disk", "hosts": ["api.example.com"]}
        ]))
        .unwrap();
        let e = serde_json::to_string(&c).unwrap_err().to_string();
        assert!(!e.contains("sk-on-disk"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let d = Dir {
            name: "a".into(),
            path: dir.path().join("a"),
        };
        std::fs::create_dir(&d.path).unwrap();
        assert!(d.write_config(&c).is_err());
        let on_disk = std::fs::read_to_string(d.file("config.json")).unwrap_or_default();
        assert!(!on_disk.contains("sk-on-disk"));
    }
}
