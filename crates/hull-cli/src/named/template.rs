//! Templates: a stopped sandbox's writable layer and configuration, frozen under a name, that
//! new sandboxes start from (`hull template save/ls/rm/prune`, `hull create --template`).
//!
//! ```text
//! <sandboxes>/.templates/.lock           flock: shared to read a template, exclusive to change the store
//!                        <name>.json     a template: its configuration and its layers (top first)
//!                        layers/<id>/    a frozen upper directory (read-only from then on)
//!                        .build-<name>.lock  flock: held while `<name>` is built on demand
//! ```
//!
//! Saving renames the sandbox's `upper/` into `layers/` (O(1): the same file system, beside
//! the sandboxes) and gives the sandbox a new empty upper over it, so the sandbox sees what it
//! saw. A sandbox made from a template stacks its own empty upper over the template's layers
//! (overlayfs lower layers, as image layers stack): nothing is copied. A layer stays while a
//! template or a sandbox names it: `template rm` unlists the template, and the layers no one
//! names any more are removed then and at every `hull rm`.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::state::{self, Config, Dir};

/// A template as stored (`<name>.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Template {
    pub name: String,
    /// The sandbox it was saved from.
    pub from: String,
    /// Its configuration (name and creation time are the new sandbox's own).
    pub config: Config,
    /// Seconds since the epoch.
    pub created: u64,
}

/// The store: `.templates` in the sandboxes' root (the same file system, so a save is a
/// rename; a hidden name, which is never a sandbox's).
pub fn root() -> PathBuf {
    state::root().join(".templates")
}

pub use super::state::layer_path;

/// The store's lock, held while a template is read (shared) or the store changes (exclusive):
/// released when dropped (the descriptor is the lock).
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

/// Makes the store's directories (0700) if they are missing.
fn make_store() -> Result<PathBuf, String> {
    let dir = root();
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(dir.join("layers"))
        .map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

fn open_lock_file(path: &std::path::Path) -> Result<File, String> {
    std::os::unix::fs::OpenOptionsExt::mode(
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
        0o600,
    )
    .open(path)
    .map_err(|e| format!("open {}: {e}", path.display()))
}

impl Lock {
    pub fn take(exclusive: bool) -> Result<Lock, String> {
        let path = make_store()?.join(".lock");
        let f = open_lock_file(&path)?;
        let op = if exclusive {
            rustix::fs::FlockOperation::LockExclusive
        } else {
            rustix::fs::FlockOperation::LockShared
        };
        rustix::fs::flock(&f, op).map_err(|e| format!("lock {}: {e}", path.display()))?;
        Ok(Lock { _file: f })
    }
}

/// The lock of building template `name` on demand (`.build-<name>.lock`, exclusive): one
/// creator builds, the others wait for it. The file is removed when the lock is dropped (still
/// held then), so a build leaves nothing; a waiter that then wins the lock on the removed file
/// sees that it is no longer the one at the path and takes the new one.
#[derive(Debug)]
pub struct BuildLock {
    _file: File,
    path: PathBuf,
}

impl BuildLock {
    /// Takes the lock, waiting while another process builds `name`; `waiting` is called once
    /// when it has to wait.
    pub fn take(name: &str, waiting: impl FnOnce()) -> Result<BuildLock, String> {
        file_of(name)?;
        let path = make_store()?.join(format!(".build-{name}.lock"));
        let mut waiting = Some(waiting);
        loop {
            let f = open_lock_file(&path)?;
            if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err()
            {
                if let Some(say) = waiting.take() {
                    say();
                }
                rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
                    .map_err(|e| format!("lock {}: {e}", path.display()))?;
            }
            let held = rustix::fs::fstat(&f).map_err(|e| e.to_string())?;
            let named = rustix::fs::stat(&path).ok();
            if named.is_some_and(|n| n.st_ino == held.st_ino && n.st_dev == held.st_dev) {
                return Ok(BuildLock { _file: f, path });
            }
        }
    }
}

impl Drop for BuildLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn file_of(name: &str) -> Result<PathBuf, String> {
    state::check_name(name).map_err(|e| e.replacen("sandbox name", "template name", 1))?;
    Ok(root().join(format!("{name}.json")))
}

/// Reads template `name` (under the caller's lock).
pub fn get(name: &str) -> Result<Template, String> {
    let path = file_of(name)?;
    let text = std::fs::read(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("no template named `{name}` (see `hull template ls`)")
        } else {
            format!("read {}: {e}", path.display())
        }
    })?;
    serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Template `name`, or None when there is none (under the caller's lock).
pub fn find(name: &str) -> Result<Option<Template>, String> {
    if !file_of(name)?.exists() {
        return Ok(None);
    }
    get(name).map(Some)
}

/// Every template, by name.
pub fn list() -> Vec<Template> {
    let Ok(rd) = std::fs::read_dir(root()) else {
        return Vec::new();
    };
    let mut v: Vec<Template> = rd
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_suffix(".json")?.to_string();
            get(&n).ok()
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// A new layer id: unique in the store (time and pid).
fn new_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}-{}", std::process::id())
}

/// `hull template save SANDBOX NAME`: freezes the stopped sandbox's upper as a layer.
pub fn save(sandbox: &str, name: &str) -> Result<(), String> {
    let dir = Dir::of(sandbox)?;
    if !dir.exists() {
        return Err(format!("no sandbox named `{sandbox}` (see `hull ps`)"));
    }
    save_dir(&dir, sandbox, name)
}

/// Saves the stopped sandbox `dir` as template `name`, recording `from` as its origin.
pub fn save_dir(dir: &Dir, from: &str, name: &str) -> Result<(), String> {
    let sandbox = &dir.name;
    let file = file_of(name)?;
    let _store = Lock::take(true)?;
    // Held through the save: a keeper cannot start this sandbox meanwhile.
    let keeper = dir
        .lock_file()
        .map_err(|e| format!("open {}: {e}", dir.file("keeper.lock").display()))?;
    if rustix::fs::flock(
        &keeper,
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    )
    .is_err()
    {
        return Err(format!(
            "sandbox `{sandbox}` is running: `hull stop {sandbox}` first (a template is saved from a stopped sandbox)"
        ));
    }
    if file.exists() {
        return Err(format!(
            "a template named `{name}` already exists (conflict): `hull template rm {name}` first, or pick another name"
        ));
    }
    if dir.workspace().exists() {
        return Err(format!(
            "sandbox `{sandbox}` predates templates: its /workspace is a directory of its own, not in its writable root"
        ));
    }
    let mut cfg = dir.config()?;
    if cfg.workspace.is_some() {
        return Err(format!(
            "sandbox `{sandbox}` has a host directory at /workspace (--workspace), which a template cannot hold"
        ));
    }
    let upper = dir.path.join("upper");
    if !upper.is_dir() {
        // Never started: an empty upper is its state.
        dir.writable_root()?;
    }
    let id = new_id();
    let layer = root().join("layers").join(&id);
    std::fs::rename(&upper, &layer).map_err(|e| {
        format!(
            "move {} to {} (the template store must be on the sandboxes' file system): {e}",
            upper.display(),
            layer.display()
        )
    })?;
    let undo = |e: String| {
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::rename(&layer, &upper);
        e
    };
    cfg.layers.insert(0, id);
    let t = Template {
        name: name.to_string(),
        from: from.to_string(),
        config: cfg.clone(),
        created: state::now_secs(),
    };
    let text = serde_json::to_vec_pretty(&t).map_err(|e| undo(e.to_string()))?;
    state::write_atomic(&file, &text).map_err(undo)?;
    // The sandbox itself now stands on the layer too, under a new empty upper.
    dir.write_config(&cfg).map_err(undo)?;
    dir.writable_root().map(|_| ())
}

/// The configuration of a new sandbox `name` made from template `t`; the caller holds the
/// store's lock (shared) until that configuration is written, so its layers stay.
pub fn config_for(t: &Template, name: &str) -> Config {
    let mut c = t.config.clone();
    c.name = name.to_string();
    c.created = state::now_secs();
    c.setup = Vec::new();
    c.template = Some(t.name.clone());
    c
}

/// `hull template rm NAME`: unlists it (idempotent); its layers go once no sandbox uses them.
pub fn rm(name: &str) -> Result<(), String> {
    let file = file_of(name)?;
    let _store = Lock::take(true)?;
    match std::fs::remove_file(&file) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("remove {}: {e}", file.display())),
    }
    collect();
    Ok(())
}

/// `hull template prune --older-than D`: removes templates saved longer ago; their names.
pub fn prune(older_than_s: u64) -> Result<Vec<String>, String> {
    let _store = Lock::take(true)?;
    let now = state::now_secs();
    let mut gone = Vec::new();
    for t in list() {
        if now.saturating_sub(t.created) >= older_than_s {
            let file = file_of(&t.name)?;
            std::fs::remove_file(&file).map_err(|e| format!("remove {}: {e}", file.display()))?;
            gone.push(t.name);
        }
    }
    collect();
    Ok(gone)
}

/// Removes the layers no template and no sandbox names (the caller holds the store's lock
/// exclusively).
pub fn collect() {
    let mut used: HashSet<String> = HashSet::new();
    for t in list() {
        used.extend(t.config.layers);
    }
    for d in state::list() {
        match d.config() {
            Ok(c) => used.extend(c.layers),
            // A configuration that cannot be read may name layers: none is removed.
            Err(_) => return,
        }
    }
    let Ok(rd) = std::fs::read_dir(root().join("layers")) else {
        return;
    };
    for e in rd.flatten() {
        let Some(id) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !used.contains(&id) {
            let _ = super::tidy::remove_tree(&e.path());
        }
    }
}

/// Removes the layers nobody uses any more (after a sandbox is removed).
pub fn collect_locked() {
    if let Ok(_store) = Lock::take(true) {
        collect();
    }
}

/// Total bytes of a template's layers.
pub fn size(t: &Template) -> u64 {
    t.config
        .layers
        .iter()
        .map(|id| state::tree_size(&root().join("layers").join(id)))
        .sum()
}

/// `hull template ls`.
pub fn print_list(json: bool) {
    let mut out = std::io::stdout().lock();
    if !json {
        let _ = writeln!(
            out,
            "{:<24} {:<24} {:<20} {:>6} {:>10}",
            "NAME", "FROM", "IMAGE", "AGE", "SIZE"
        );
    }
    for t in list() {
        let age_s = state::now_secs().saturating_sub(t.created);
        let size = size(&t);
        let _ = if json {
            writeln!(
                out,
                "{}",
                serde_json::json!({"name": t.name, "from": t.from, "image": t.config.image, "age_s": age_s, "size_bytes": size, "layers": t.config.layers.len()})
            )
        } else {
            writeln!(
                out,
                "{:<24} {:<24} {:<20} {:>6} {:>10}",
                t.name,
                t.from,
                t.config.image,
                super::tidy::age(age_s),
                hull_box::size::Human(size).to_string()
            )
        };
    }
}
