//! cgroup v2's delegation rules, decided once per process.
//!
//! v2 lets a cgroup's children use a controller only if the cgroup lists it in
//! `cgroup.subtree_control`, and (outside the root) only a cgroup without processes may do so.
//! [`analyze`] reads the parent's state at detection time without changing anything and picks a
//! [`V2Setup`]; [`prepare`] carries it out on the first box. Nothing here moves or touches another
//! process: a parent holding processes other than hull itself is reported, never rearranged.

use std::io;
use std::path::{Path, PathBuf};

use crate::fsops::{read_pids, read_value, words, write_value, DirOps};
use crate::layout::Origin;
use crate::limits::Controller;
use crate::parse::CgroupMount;
use crate::report::{Problem, FIX_DELEGATE};
use crate::sys;

/// Name of the leaf hull moves itself into when it alone occupies its delegated cgroup.
pub(crate) const SUPERVISOR_LEAF: &str = "hull-supervisor";
/// Name of the cgroup hull makes under the root cgroup when it runs as root in the root.
pub(crate) const ROOT_LEAF: &str = "hull";

/// What has to happen before box cgroups under the v2 parent get the controllers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum V2Setup {
    /// The parent already enables every available controller for its children.
    Ready,
    /// The parent has no processes: enable the controllers in its `cgroup.subtree_control`.
    EnableIn(PathBuf),
    /// The parent is the root cgroup and we are root: enable in the root and in `<root>/hull`,
    /// where boxes go (the root may hold processes; `hull` never does).
    LeafUnderRoot { root: PathBuf },
    /// hull is the only process in its own cgroup (a `Delegate=yes` scope): move it into
    /// `leaf`, then enable the controllers in `parent`.
    MoveSelf { parent: PathBuf, leaf: PathBuf },
}

/// The v2 cgroup boxes are created under and what each controller needs there.
#[derive(Debug, Clone)]
pub(crate) struct V2Parent {
    pub boxes_in: PathBuf,
    pub setup: V2Setup,
    /// Controllers the parent offers (and that `setup` will make usable).
    pub usable: Vec<Controller>,
    /// Controllers that cannot be used here, each with its reason.
    pub blocked: Vec<(Controller, Problem)>,
}

/// Decides the v2 parent for hierarchy path `hpath` (absolute within the cgroup2 hierarchy).
pub(crate) fn analyze(
    mount: &CgroupMount,
    hpath: &str,
    origin: Origin<'_>,
    euid: u32,
    pid: u32,
) -> Result<V2Parent, Problem> {
    let dir = mount.dir_for(hpath).ok_or_else(|| {
        Problem::new(
            format!(
                "cgroup {hpath} is not visible under the cgroup2 mount {} (mount root {})",
                mount.mount_point.display(),
                mount.root
            ),
            FIX_DELEGATE,
        )
    })?;
    if mount.read_only {
        return Err(Problem::new(
            format!("{} is mounted read-only", mount.mount_point.display()),
            format!("mount it read-write (containers: give the box a writable cgroup namespace); or {FIX_DELEGATE}"),
        ));
    }
    let offered =
        read_value(&dir.join("cgroup.controllers")).map_err(|e| missing_dir(&dir, origin, &e))?;
    sys::can_create_in(&dir).map_err(|e| {
        Problem::new(
            format!("cannot create cgroups in {}: {e}", dir.display()),
            FIX_DELEGATE,
        )
    })?;
    let offered = words(&offered);
    let (usable, absent): (Vec<Controller>, Vec<Controller>) = Controller::ALL
        .into_iter()
        .partition(|c| offered.iter().any(|o| o == c.name()));
    let mut blocked: Vec<(Controller, Problem)> = absent
        .into_iter()
        .map(|c| {
            let reason = format!(
                "the {c} controller is not delegated to {} (missing from its cgroup.controllers)",
                dir.display()
            );
            (c, Problem::new(reason, FIX_DELEGATE))
        })
        .collect();

    let is_root =
        dir == mount.mount_point && mount.root == "/" && !dir.join("cgroup.type").exists();
    if is_root {
        if euid != 0 {
            return Err(Problem::new(
                format!(
                    "the parent {} is the root cgroup and hull is not root",
                    dir.display()
                ),
                FIX_DELEGATE,
            ));
        }
        let leaf = dir.join(ROOT_LEAF);
        let setup = if enabled_in(&leaf).is_ok_and(|on| usable.iter().all(|c| on.contains(c))) {
            V2Setup::Ready
        } else {
            V2Setup::LeafUnderRoot { root: dir }
        };
        return Ok(V2Parent {
            boxes_in: leaf,
            setup,
            usable,
            blocked,
        });
    }

    let enabled = enabled_in(&dir).unwrap_or_default();
    let needed: Vec<Controller> = usable
        .iter()
        .copied()
        .filter(|c| !enabled.contains(c))
        .collect();
    if needed.is_empty() {
        return Ok(V2Parent {
            boxes_in: dir,
            setup: V2Setup::Ready,
            usable,
            blocked,
        });
    }
    let procs = read_pids(&dir.join("cgroup.procs")).unwrap_or_else(|_| vec![-1]);
    let setup = if procs.is_empty() {
        V2Setup::EnableIn(dir.clone())
    } else if matches!(origin, Origin::Own) && procs.iter().all(|&p| u32::try_from(p) == Ok(pid)) {
        V2Setup::MoveSelf {
            parent: dir.clone(),
            leaf: dir.join(SUPERVISOR_LEAF),
        }
    } else {
        let reason = format!(
            "{} holds {} process(es) and does not enable {} in cgroup.subtree_control; cgroup v2 \
             lets only a cgroup without processes enable controllers for its children",
            dir.display(),
            procs.len(),
            names(&needed)
        );
        blocked.extend(
            needed
                .iter()
                .map(|&c| (c, Problem::new(reason.clone(), FIX_DELEGATE))),
        );
        let usable = usable.into_iter().filter(|c| !needed.contains(c)).collect();
        return Ok(V2Parent {
            boxes_in: dir,
            setup: V2Setup::Ready,
            usable,
            blocked,
        });
    };
    Ok(V2Parent {
        boxes_in: dir,
        setup,
        usable,
        blocked,
    })
}

fn missing_dir(dir: &Path, origin: Origin<'_>, err: &io::Error) -> Problem {
    match origin {
        Origin::Override(value) => Problem::new(
            format!("HULL_CGROUP_PARENT={value}: {} is not a cgroup2 directory ({err})", dir.display()),
            format!("create it (`mkdir {}`), delegate it to the user running hull, or unset HULL_CGROUP_PARENT", dir.display()),
        ),
        Origin::Own => Problem::new(
            format!("own cgroup {} is not readable as cgroup2 ({err})", dir.display()),
            FIX_DELEGATE,
        ),
    }
}

/// The controllers `dir` enables for its children.
fn enabled_in(dir: &Path) -> io::Result<Vec<Controller>> {
    let on = words(&read_value(&dir.join("cgroup.subtree_control"))?);
    Ok(Controller::ALL
        .into_iter()
        .filter(|c| on.iter().any(|o| o == c.name()))
        .collect())
}

fn names(controllers: &[Controller]) -> String {
    controllers
        .iter()
        .map(|c| c.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Carries out `parent.setup`. Returns the controllers that could not be made usable, with why.
pub(crate) fn prepare(parent: &V2Parent, dirs: &dyn DirOps, pid: u32) -> Vec<(Controller, String)> {
    let all_fail = |reason: String| -> Vec<(Controller, String)> {
        parent.usable.iter().map(|&c| (c, reason.clone())).collect()
    };
    match &parent.setup {
        V2Setup::Ready => Vec::new(),
        V2Setup::EnableIn(dir) => enable(dir, &parent.usable),
        V2Setup::LeafUnderRoot { root } => {
            let mut failed = enable(root, &parent.usable);
            if let Err(e) = mkdir_existing_ok(dirs, &parent.boxes_in) {
                return all_fail(format!("creating {}: {e}", parent.boxes_in.display()));
            }
            let rest: Vec<Controller> = parent
                .usable
                .iter()
                .copied()
                .filter(|c| !failed.iter().any(|(f, _)| f == c))
                .collect();
            failed.extend(enable(&parent.boxes_in, &rest));
            failed
        }
        V2Setup::MoveSelf { parent: dir, leaf } => {
            if let Err(e) = mkdir_existing_ok(dirs, leaf) {
                return all_fail(format!("creating {}: {e}", leaf.display()));
            }
            let procs = leaf.join("cgroup.procs");
            if let Err(e) = write_value(&procs, &pid.to_string()) {
                return all_fail(format!(
                    "moving hull (pid {pid}) into {}: {e}",
                    procs.display()
                ));
            }
            enable(dir, &parent.usable)
        }
    }
}

fn mkdir_existing_ok(dirs: &dyn DirOps, path: &Path) -> io::Result<()> {
    match dirs.mkdir(path) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// Enables `wanted` in `dir/cgroup.subtree_control`: one write for all, and one per controller if
/// that fails so that one refusal (say, cpu with realtime threads around) does not cost the rest.
fn enable(dir: &Path, wanted: &[Controller]) -> Vec<(Controller, String)> {
    let on = enabled_in(dir).unwrap_or_default();
    let missing: Vec<Controller> = wanted.iter().copied().filter(|c| !on.contains(c)).collect();
    if missing.is_empty() {
        return Vec::new();
    }
    let file = dir.join("cgroup.subtree_control");
    let all = missing
        .iter()
        .map(|c| format!("+{}", c.name()))
        .collect::<Vec<_>>()
        .join(" ");
    if write_value(&file, &all).is_ok() {
        return Vec::new();
    }
    missing
        .into_iter()
        .filter_map(|c| {
            let err = write_value(&file, &format!("+{}", c.name())).err()?;
            Some((
                c,
                format!(
                    "enabling {c} in {}: {err}; fix: {FIX_DELEGATE}",
                    file.display()
                ),
            ))
        })
        .collect()
}
