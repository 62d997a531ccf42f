//! [`Host`]: the cgroup layout of this machine as seen by this process, worked out once.
//!
//! Per controller: a controller bound to a v1 hierarchy is used there; otherwise the cgroup2
//! hierarchy if it offers the controller. Box cgroups go under `HULL_CGROUP_PARENT` (relative to
//! each hierarchy's root) if set, else under this process's own cgroup in each hierarchy.

use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use crate::error::CgroupError;
use crate::fsops::{DirOps, RealDirs};
use crate::layout::{BackendKind, CgroupVersion, Origin};
use crate::limits::Controller;
use crate::parse::{parse_mountinfo, parse_proc_cgroup, CgroupMount, MountVersion, ProcCgroups};
use crate::report::{ControllerReport, Problem, FIX_DELEGATE, FIX_V1_PERMISSION};
use crate::sys;
use crate::v2::{self, V2Parent, V2Setup};

/// Where one controller's box cgroups are made.
#[derive(Debug, Clone)]
pub(crate) enum Placement {
    V1 {
        parent: PathBuf,
    },
    /// Under [`Host::v2`]'s `boxes_in`.
    V2,
    Unavailable(Problem),
}

/// Everything detection reads, so tests can hand in a fake machine.
#[derive(Debug, Clone, Copy)]
pub struct Probe<'a> {
    /// Text of `/proc/self/mountinfo`.
    pub mountinfo: &'a str,
    /// Text of `/proc/self/cgroup`.
    pub proc_self_cgroup: &'a str,
    /// `HULL_CGROUP_PARENT`, if set.
    pub parent_override: Option<&'a str>,
    pub euid: u32,
    pub pid: u32,
}

/// The detected layout: where each controller lives and the parent box cgroups go under.
#[derive(Debug, Clone)]
pub struct Host {
    pub(crate) kind: BackendKind,
    pub(crate) placements: [Placement; 3],
    pub(crate) v2: Option<V2Parent>,
    /// Outcome of the one-time v2 setup: controllers it failed to make usable.
    pub(crate) v2_prepared: OnceLock<Vec<(Controller, String)>>,
    pub(crate) pid: u32,
    pub(crate) dirs: Arc<dyn DirOps>,
}

impl Host {
    /// Reads this process's mountinfo and cgroup membership and `HULL_CGROUP_PARENT`.
    pub fn detect() -> Result<Host, CgroupError> {
        let read = |path: &str| {
            fs::read_to_string(path).map_err(|source| CgroupError::Read {
                path: path.into(),
                source,
            })
        };
        let mountinfo = read("/proc/self/mountinfo")?;
        let cgroup = read("/proc/self/cgroup")?;
        let parent = match std::env::var_os("HULL_CGROUP_PARENT") {
            None => None,
            Some(v) if v.is_empty() => None,
            Some(v) => Some(v.into_string().map_err(|v| CgroupError::InvalidParent {
                value: v.to_string_lossy().into_owned(),
                why: "not UTF-8",
            })?),
        };
        Host::detect_from(&mountinfo, &cgroup, parent.as_deref())
    }

    /// Detection from given file contents, with this process's euid and pid. Mount points may be
    /// ordinary directories (a fake tree in a tempdir).
    pub fn detect_from(
        mountinfo: &str,
        proc_self_cgroup: &str,
        parent_override: Option<&str>,
    ) -> Result<Host, CgroupError> {
        Host::detect_from_probe(&Probe {
            mountinfo,
            proc_self_cgroup,
            parent_override,
            euid: sys::euid(),
            pid: std::process::id(),
        })
    }

    /// Detection with every input given, including who we are.
    pub fn detect_from_probe(probe: &Probe<'_>) -> Result<Host, CgroupError> {
        let mounts = parse_mountinfo(probe.mountinfo)?;
        let procs = parse_proc_cgroup(probe.proc_self_cgroup)?;
        let origin = match probe.parent_override {
            Some(value) => Origin::Override(validate_override(value)?),
            None => Origin::Own,
        };
        let has_v2 = mounts.iter().any(|m| m.version == MountVersion::V2);
        let kind = match (
            mounts.iter().any(CgroupMount::is_v1_with_controllers),
            has_v2,
        ) {
            (true, true) => BackendKind::Hybrid,
            (false, true) => BackendKind::V2,
            _ if !mounts.is_empty() => BackendKind::V1,
            _ => return Err(CgroupError::NotMounted),
        };

        let mut placements = Controller::ALL.map(|c| place_v1(&mounts, &procs, c, origin));
        let mut v2 = None;
        if placements.iter().any(Option::is_none) {
            let parent = analyze_v2(&mounts, &procs, origin, probe);
            for (c, slot) in Controller::ALL.into_iter().zip(placements.iter_mut()) {
                if slot.is_some() {
                    continue;
                }
                *slot = Some(match &parent {
                    Err(problem) => Placement::Unavailable(problem.clone()),
                    Ok(p) => match p.blocked.iter().find(|(b, _)| *b == c) {
                        Some((_, problem)) => Placement::Unavailable(problem.clone()),
                        None => Placement::V2,
                    },
                });
            }
            v2 = parent.ok();
        }
        Ok(Host {
            kind,
            placements: placements.map(|p| p.unwrap_or_else(unreachable_placement)),
            v2,
            v2_prepared: OnceLock::new(),
            pid: probe.pid,
            dirs: Arc::new(RealDirs),
        })
    }

    /// Replaces how box directories are made and removed (the test seam; see [`DirOps`]).
    pub fn with_dir_ops(mut self, dirs: Arc<dyn DirOps>) -> Host {
        self.dirs = dirs;
        self
    }

    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// The directories box cgroups are created in (one per usable hierarchy), sorted, each once.
    pub fn box_parents(&self) -> Vec<PathBuf> {
        let mut parents: Vec<PathBuf> = self
            .report()
            .into_iter()
            .filter_map(|r| r.box_parent)
            .collect();
        parents.sort();
        parents.dedup();
        parents
    }

    /// Per controller: usable (and the directory boxes are created in), or why not and the fix.
    pub fn report(&self) -> Vec<ControllerReport> {
        Controller::ALL
            .into_iter()
            .map(|c| self.report_one(c))
            .collect()
    }

    fn report_one(&self, c: Controller) -> ControllerReport {
        let parent = match (&self.placements[c.index()], &self.v2) {
            (Placement::Unavailable(problem), _) => {
                return ControllerReport::unavailable(c, problem.clone())
            }
            (Placement::V1 { parent }, _) => {
                return ControllerReport::usable(c, CgroupVersion::V1, parent.clone(), None)
            }
            (Placement::V2, None) => {
                return ControllerReport::unavailable(
                    c,
                    Problem::new("no cgroup2 parent", FIX_DELEGATE),
                )
            }
            (Placement::V2, Some(parent)) => parent,
        };
        let prepared = self.v2_prepared.get();
        if let Some((_, why)) = prepared.and_then(|failed| failed.iter().find(|(f, _)| *f == c)) {
            return ControllerReport::unavailable(c, Problem::new(why.clone(), FIX_DELEGATE));
        }
        let note = match (&parent.setup, prepared) {
            (_, Some(_)) | (V2Setup::Ready, _) => None,
            (V2Setup::EnableIn(dir), None) => Some(format!(
                "hull enables it in {}/cgroup.subtree_control on the first box",
                dir.display()
            )),
            (V2Setup::LeafUnderRoot { root }, None) => Some(format!(
                "hull enables it in {}/cgroup.subtree_control and in its `{}` child on the first box",
                root.display(),
                v2::ROOT_LEAF
            )),
            (V2Setup::MoveSelf { leaf, .. }, None) => Some(format!(
                "on the first box hull moves itself into {} and enables it in the parent",
                leaf.display()
            )),
        };
        ControllerReport::usable(c, CgroupVersion::V2, parent.boxes_in.clone(), note)
    }

    /// Runs the one-time v2 setup (idempotent, once per Host) and returns what failed.
    pub(crate) fn prepare_v2(&self) -> &[(Controller, String)] {
        self.v2_prepared.get_or_init(|| match &self.v2 {
            Some(parent) => v2::prepare(parent, self.dirs.as_ref(), self.pid),
            None => Vec::new(),
        })
    }
}

/// Every slot is filled by `place_v1` or the v2 pass; this is only reached if that logic breaks.
fn unreachable_placement() -> Placement {
    Placement::Unavailable(Problem::new(
        "internal: controller was not placed",
        "report a bug",
    ))
}

/// Checks `HULL_CGROUP_PARENT` is a relative path that stays inside each hierarchy and returns it
/// without surrounding slashes ("" meaning the hierarchy root).
fn validate_override(value: &str) -> Result<&str, CgroupError> {
    let bad = |why| CgroupError::InvalidParent {
        value: value.to_owned(),
        why,
    };
    if value.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    let trimmed = value.trim_matches('/');
    if trimmed.split('/').any(|c| c == ".." || c == ".") {
        return Err(bad("`.` and `..` components are not allowed"));
    }
    Ok(trimmed)
}

fn hierarchy_path(origin: Origin<'_>, own: Option<&str>) -> Option<String> {
    match origin {
        Origin::Override(rel) => Some(format!("/{rel}")),
        Origin::Own => own.map(str::to_owned),
    }
}

/// Of several mounts of one hierarchy, the first that shows `hpath`, else the first.
fn pick<'m>(candidates: &[&'m CgroupMount], hpath: Option<&str>) -> Option<&'m CgroupMount> {
    candidates
        .iter()
        .find(|m| hpath.is_some_and(|p| m.dir_for(p).is_some()))
        .or(candidates.first())
        .copied()
}

/// `None` if no v1 hierarchy carries `c`; otherwise its placement, usable or not.
fn place_v1(
    mounts: &[CgroupMount],
    procs: &ProcCgroups,
    c: Controller,
    origin: Origin<'_>,
) -> Option<Placement> {
    let candidates: Vec<&CgroupMount> = mounts
        .iter()
        .filter(|m| m.has_v1_controller(c.name()))
        .collect();
    let hpath = hierarchy_path(origin, procs.v1_path(c.name()));
    let mount = pick(&candidates, hpath.as_deref())?;
    let Some(hpath) = hpath else {
        return Some(Placement::Unavailable(Problem::new(
            format!("/proc/self/cgroup has no line for the v1 {c} hierarchy"),
            FIX_V1_PERMISSION,
        )));
    };
    Some(match v1_parent(mount, &hpath, origin) {
        Ok(parent) => Placement::V1 { parent },
        Err(problem) => Placement::Unavailable(problem),
    })
}

fn v1_parent(mount: &CgroupMount, hpath: &str, origin: Origin<'_>) -> Result<PathBuf, Problem> {
    let mp = mount.mount_point.display();
    let dir = mount.dir_for(hpath).ok_or_else(|| {
        Problem::new(
            format!(
                "cgroup {hpath} is not visible under {mp} (mount root {})",
                mount.root
            ),
            FIX_V1_PERMISSION,
        )
    })?;
    if mount.read_only {
        return Err(Problem::new(
            format!("{mp} is mounted read-only"),
            "mount the hierarchy read-write where hull runs (containers: a writable cgroup mount), \
             or run hull outside the container",
        ));
    }
    if !dir.is_dir() {
        return Err(match origin {
            Origin::Override(value) => Problem::new(
                format!("HULL_CGROUP_PARENT={value}: {} does not exist", dir.display()),
                format!("as root: `mkdir {0} && chown USER {0} {0}/cgroup.procs {0}/tasks`, or unset HULL_CGROUP_PARENT", dir.display()),
            ),
            Origin::Own => Problem::new(format!("own cgroup {} does not exist", dir.display()), FIX_V1_PERMISSION),
        });
    }
    sys::can_create_in(&dir).map_err(|e| {
        Problem::new(
            format!("cannot create cgroups in {}: {e}", dir.display()),
            FIX_V1_PERMISSION,
        )
    })?;
    Ok(dir)
}

fn analyze_v2(
    mounts: &[CgroupMount],
    procs: &ProcCgroups,
    origin: Origin<'_>,
    probe: &Probe<'_>,
) -> Result<V2Parent, Problem> {
    let candidates: Vec<&CgroupMount> = mounts
        .iter()
        .filter(|m| m.version == MountVersion::V2)
        .collect();
    let hpath = hierarchy_path(origin, procs.v2.as_deref());
    let Some(mount) = pick(&candidates, hpath.as_deref()) else {
        return Err(Problem::new(
            "no v1 hierarchy carries this controller and no cgroup2 filesystem is mounted",
            "mount cgroup2 (`mount -t cgroup2 none /sys/fs/cgroup`) or the controller's v1 hierarchy",
        ));
    };
    let Some(hpath) = hpath else {
        return Err(Problem::new(
            "/proc/self/cgroup has no `0::` line for cgroup2",
            FIX_DELEGATE,
        ));
    };
    v2::analyze(mount, &hpath, origin, probe.euid, probe.pid)
}
