//! Memory, pids and CPU caps for one box, through cgroup v1 and cgroup v2 behind one API.
//!
//! Per controller, a v1 hierarchy that carries it wins (hybrid hosts bind memory, pids and cpu to
//! v1 and leave the unified hierarchy empty); otherwise the v2 hierarchy is used if the controller
//! is enabled for our parent. Box cgroups go under `HULL_CGROUP_PARENT` (a path relative to each
//! hierarchy's root, e.g. a subtree delegated to an unprivileged user), or else under the cgroup
//! this process is in. A cap that cannot be enforced is never silent: it is listed in
//! [`BoxCgroup::unenforced`] with the reason and the fix.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The caps of one box.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    /// 1000 = one full CPU.
    pub cpu_millis: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    pub const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    V1,
    V2,
    Hybrid,
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("invalid box cgroup name `{0}` (no `/`, no `..`, not empty)")]
    BadName(String),
    #[error("read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("create {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("remove {path}: {source}")]
    Remove { path: PathBuf, source: io::Error },
}

/// Where one controller lives and where boxes get their cgroup for it.
#[derive(Clone, Debug)]
struct Placement {
    v1: bool,
    /// Directory box cgroups are created in.
    parent: PathBuf,
}

/// What `hull doctor` shows per controller.
#[derive(Clone, Debug)]
pub struct ControllerReport {
    pub controller: Controller,
    pub usable: bool,
    /// The directory box cgroups would be created in.
    pub box_parent: Option<PathBuf>,
    pub detail: String,
    pub fix: Option<String>,
}

/// The detected cgroup layout of this host, as seen by this process.
#[derive(Clone, Debug)]
pub struct Host {
    kind: BackendKind,
    placements: Vec<(Controller, Result<Placement, (String, String)>)>,
}

struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    opts: String,
}

fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 {
            continue;
        }
        out.push(Mount { root: unescape(l[3]), point: PathBuf::from(unescape(l[4])), fstype: r[0].to_string(), opts: r[2].to_string() });
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() + 1 && b.len() >= i + 4 {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn join_rel(base: &Path, rel: &str) -> PathBuf {
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

/// The path of our cgroup relative to a mount whose root field is `mount_root`.
fn relative(own: &str, mount_root: &str) -> String {
    if mount_root == "/" {
        return own.to_string();
    }
    own.strip_prefix(mount_root).map_or_else(|| own.to_string(), str::to_string)
}

fn writable(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else { return false };
    // SAFETY: c is a valid C string.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

impl Host {
    /// Reads this process's mount table and cgroup membership; honours `HULL_CGROUP_PARENT`.
    pub fn detect() -> Result<Host, CgroupError> {
        let read = |p: &str| std::fs::read_to_string(p).map_err(|source| CgroupError::Read { path: p.into(), source });
        let mi = read("/proc/self/mountinfo")?;
        let pc = read("/proc/self/cgroup")?;
        let over = std::env::var("HULL_CGROUP_PARENT").ok().filter(|s| !s.is_empty());
        Ok(Host::detect_from(&mi, &pc, over.as_deref()))
    }

    /// Detection from given texts (tests point the mounts into a temporary directory).
    pub fn detect_from(mountinfo: &str, proc_self_cgroup: &str, parent_override: Option<&str>) -> Host {
        let mounts = parse_mountinfo(mountinfo);
        let mut v1_own: Vec<(Vec<String>, String)> = Vec::new();
        let mut v2_own: Option<String> = None;
        for line in proc_self_cgroup.lines() {
            let mut it = line.splitn(3, ':');
            let (Some(_), Some(ctrls), Some(path)) = (it.next(), it.next(), it.next()) else { continue };
            if ctrls.is_empty() {
                v2_own = Some(path.to_string());
            } else {
                v1_own.push((ctrls.split(',').map(str::to_string).collect(), path.to_string()));
            }
        }
        let v2_mount = mounts.iter().find(|m| m.fstype == "cgroup2");
        let mut any_v1 = false;
        let mut any_v2 = false;
        let mut placements = Vec::new();
        for c in Controller::ALL {
            let v1 = mounts.iter().find(|m| m.fstype == "cgroup" && m.opts.split(',').any(|o| o == c.name()));
            let placement = if let Some(m) = v1 {
                any_v1 = true;
                let own = v1_own.iter().find(|(cs, _)| cs.iter().any(|x| x == c.name())).map_or("/".to_string(), |(_, p)| p.clone());
                let parent = match parent_override {
                    Some(o) => join_rel(&m.point, o),
                    None => join_rel(&m.point, &relative(&own, &m.root)),
                };
                if !parent.is_dir() {
                    Err((format!("v1 {} parent {} does not exist", c.name(), parent.display()), "create it and chown it to this user, then set HULL_CGROUP_PARENT".to_string()))
                } else if !writable(&parent) {
                    Err((format!("v1 {} parent {} is not writable by this user", c.name(), parent.display()), format!("delegate a subtree: mkdir {0}/hull-$USER && chown -R $USER {0}/hull-$USER, then HULL_CGROUP_PARENT=hull-$USER", m.point.display())))
                } else {
                    Ok(Placement { v1: true, parent })
                }
            } else if let Some(m) = v2_mount {
                any_v2 = true;
                let own = v2_own.clone().unwrap_or_else(|| "/".into());
                let rel = relative(&own, &m.root);
                let parent = match parent_override {
                    Some(o) => join_rel(&m.point, o),
                    None if rel == "/" && writable(&m.point) => m.point.join("hull"),
                    None => join_rel(&m.point, &rel),
                };
                v2_placement(c, &m.point, &parent)
            } else {
                Err((format!("no cgroup hierarchy carries the {} controller", c.name()), "mount cgroup2 at /sys/fs/cgroup (or the v1 controller)".to_string()))
            };
            placements.push((c, placement));
        }
        let kind = match (any_v1, any_v2) {
            (true, true) => BackendKind::Hybrid,
            (true, false) => BackendKind::V1,
            _ => BackendKind::V2,
        };
        Host { kind, placements }
    }

    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    pub fn report(&self) -> Vec<ControllerReport> {
        self.placements
            .iter()
            .map(|(c, p)| match p {
                Ok(pl) => ControllerReport { controller: *c, usable: true, box_parent: Some(pl.parent.clone()), detail: format!("{} under {}", if pl.v1 { "cgroup v1" } else { "cgroup v2" }, pl.parent.display()), fix: None },
                Err((why, fix)) => ControllerReport { controller: *c, usable: false, box_parent: None, detail: why.clone(), fix: Some(fix.clone()) },
            })
            .collect()
    }

    /// Creates the box's cgroup(s) and writes the caps. Unenforceable caps are recorded, not fatal.
    pub fn create(&self, name: &str, limits: &Limits) -> Result<BoxCgroup, CgroupError> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(CgroupError::BadName(name.to_string()));
        }
        let mut cg = BoxCgroup { dirs: Vec::new(), procs: Vec::new(), enforced: Vec::new(), unenforced: Vec::new() };
        for (c, placement) in &self.placements {
            let wanted = match c {
                Controller::Memory => limits.memory_bytes.is_some(),
                Controller::Pids => true,
                Controller::Cpu => limits.cpu_millis.is_some(),
            };
            if !wanted {
                continue;
            }
            let requested = match c {
                Controller::Memory => limits.memory_bytes.is_some(),
                Controller::Pids => limits.pids.is_some(),
                Controller::Cpu => limits.cpu_millis.is_some(),
            };
            let pl = match placement {
                Ok(pl) => pl,
                Err((why, fix)) => {
                    if requested {
                        cg.unenforced.push((*c, format!("{why}; fix: {fix}")));
                    }
                    continue;
                }
            };
            let dir = pl.parent.join(name);
            // v2 keeps every controller in one directory; create it once.
            if !cg.dirs.iter().any(|d| d.path == dir) {
                if pl.v1 || !dir.exists() {
                    if let Err(e) = std::fs::create_dir(&dir) {
                        if e.kind() != io::ErrorKind::AlreadyExists {
                            if requested {
                                cg.unenforced.push((*c, format!("cannot create {}: {e}", dir.display())));
                            }
                            continue;
                        }
                    }
                }
                cg.procs.push(CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()).unwrap_or_default());
                cg.dirs.push(Dir { path: dir.clone(), v1: pl.v1, controller: *c });
            }
            match write_limit(*c, pl.v1, &dir, limits) {
                Ok(()) => cg.enforced.push(*c),
                Err(e) => {
                    if requested {
                        cg.unenforced.push((*c, format!("writing the {} cap in {} failed: {e}", c.name(), dir.display())));
                    }
                }
            }
        }
        Ok(cg)
    }
}

fn v2_placement(c: Controller, mount: &Path, parent: &Path) -> Result<Placement, (String, String)> {
    let avail = std::fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
    if !avail.split_whitespace().any(|x| x == c.name()) {
        return Err((format!("the v2 hierarchy at {} does not offer the {} controller", mount.display(), c.name()), "enable it in the kernel, or unbind it from cgroup v1".to_string()));
    }
    // The hull directory under the root is ours to create (root only).
    if !parent.exists() && std::fs::create_dir(parent).is_err() {
        return Err((format!("cannot create {}", parent.display()), "set HULL_CGROUP_PARENT to a delegated, empty cgroup".to_string()));
    }
    let sub = parent.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&sub).unwrap_or_default();
    if !enabled.split_whitespace().any(|x| x == c.name()) {
        if let Some(pp) = parent.parent() {
            let _ = std::fs::write(pp.join("cgroup.subtree_control"), format!("+{}", c.name()));
        }
        if std::fs::write(&sub, format!("+{}", c.name())).is_err() {
            return Err((
                format!("{} is not enabled in {} (it has processes of its own, or is not delegated)", c.name(), sub.display()),
                "run under `systemd-run --user --scope -p Delegate=yes`, or set HULL_CGROUP_PARENT to an empty delegated cgroup".to_string(),
            ));
        }
    }
    if !writable(parent) {
        return Err((format!("{} is not writable by this user", parent.display()), "delegate it (systemd Delegate=yes) or set HULL_CGROUP_PARENT".to_string()));
    }
    Ok(Placement { v1: false, parent: parent.to_path_buf() })
}

fn write_limit(c: Controller, v1: bool, dir: &Path, l: &Limits) -> io::Result<()> {
    let w = |f: &str, v: String| std::fs::write(dir.join(f), v);
    match (c, v1) {
        (Controller::Memory, true) => {
            let m = l.memory_bytes.unwrap_or(u64::MAX);
            w("memory.limit_in_bytes", m.to_string())?;
            if dir.join("memory.memsw.limit_in_bytes").exists() {
                w("memory.memsw.limit_in_bytes", m.to_string())?;
            }
            Ok(())
        }
        (Controller::Memory, false) => {
            w("memory.max", l.memory_bytes.map_or("max".into(), |m| m.to_string()))?;
            if dir.join("memory.swap.max").exists() {
                w("memory.swap.max", "0".into())?;
            }
            Ok(())
        }
        (Controller::Pids, _) => w("pids.max", l.pids.map_or("max".into(), |p| p.to_string())),
        (Controller::Cpu, true) => {
            let q = l.cpu_millis.map_or(-1i64, |m| i64::try_from(m * 100).unwrap_or(i64::MAX));
            w("cpu.cfs_period_us", "100000".into())?;
            w("cpu.cfs_quota_us", q.to_string())
        }
        (Controller::Cpu, false) => w("cpu.max", l.cpu_millis.map_or("max 100000".into(), |m| format!("{} 100000", m * 100))),
    }
}

#[derive(Clone, Debug)]
struct Dir {
    path: PathBuf,
    v1: bool,
    controller: Controller,
}

/// The cgroup(s) of one box.
#[derive(Debug)]
pub struct BoxCgroup {
    dirs: Vec<Dir>,
    procs: Vec<CString>,
    enforced: Vec<Controller>,
    unenforced: Vec<(Controller, String)>,
}

fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.trim().parse().ok()))
}

impl BoxCgroup {
    /// The `cgroup.procs` files the box's first process writes "0" into to join.
    pub fn procs_files(&self) -> &[CString] {
        &self.procs
    }

    pub fn enforced(&self, c: Controller) -> bool {
        self.enforced.contains(&c)
    }

    pub fn unenforced(&self) -> &[(Controller, String)] {
        &self.unenforced
    }

    fn dir_for(&self, c: Controller) -> Option<&Dir> {
        self.dirs.iter().find(|d| d.controller == c || (!d.v1 && self.enforced.contains(&c)))
    }

    /// OOM kills inside the box's memory cgroup.
    pub fn oom_kills(&self) -> u64 {
        let Some(d) = self.dir_for(Controller::Memory) else { return 0 };
        if d.v1 {
            std::fs::read_to_string(d.path.join("memory.oom_control")).ok().and_then(|t| field(&t, "oom_kill ")).unwrap_or(0)
        } else {
            std::fs::read_to_string(d.path.join("memory.events")).ok().and_then(|t| field(&t, "oom_kill ")).unwrap_or(0)
        }
    }

    pub fn peak_memory(&self) -> Option<u64> {
        let d = self.dir_for(Controller::Memory)?;
        let f = if d.v1 { "memory.max_usage_in_bytes" } else { "memory.peak" };
        std::fs::read_to_string(d.path.join(f)).ok()?.trim().parse().ok()
    }

    pub fn pids_limit_hits(&self) -> u64 {
        let Some(d) = self.dir_for(Controller::Pids) else { return 0 };
        std::fs::read_to_string(d.path.join("pids.events")).ok().and_then(|t| field(&t, "max ")).unwrap_or(0)
    }

    fn pids(&self) -> Vec<i32> {
        let mut v = Vec::new();
        for d in &self.dirs {
            if let Ok(t) = std::fs::read_to_string(d.path.join("cgroup.procs")) {
                v.extend(t.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        v
    }

    pub fn is_empty(&self) -> bool {
        self.pids().is_empty()
    }

    /// Kills every process in the box's cgroups.
    pub fn kill_all(&self) {
        for d in self.dirs.iter().filter(|d| !d.v1) {
            if std::fs::write(d.path.join("cgroup.kill"), "1").is_ok() {
                return;
            }
        }
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                return;
            }
            for p in pids {
                // SAFETY: kill takes plain integers; these pids are members of the box's cgroup.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.path.clone()).collect()
    }

    /// Removes every directory; retries briefly while exiting processes release it.
    pub fn remove(self) -> Result<(), CgroupError> {
        let mut first_err = None;
        for d in &self.dirs {
            let mut tries = 0;
            loop {
                match std::fs::remove_dir(&d.path) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 200 => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(source) => {
                        if first_err.is_none() {
                            first_err = Some(CgroupError::Remove { path: d.path.clone(), source });
                        }
                        break;
                    }
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests;
