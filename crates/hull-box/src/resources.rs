//! What a box holds on the host besides its processes: its cgroup ([`CgroupGuard`]) and its
//! `/workspace` ([`Workspace`]), both removed when dropped, the evidence read from them after
//! the watch, and the [`Teardown`] that ends a box once its result is known.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::error::BoxError;
use crate::spec::BoxSpec;
use crate::subids::IdRange;
use crate::sys;
use crate::unenforced::Unenforced;

/// A box's cgroup and workspace, and the warnings for caps its cgroup cannot enforce.
pub(crate) struct Resources {
    pub(crate) workspace: Workspace,
    pub(crate) cgroup: CgroupGuard,
    pub(crate) warnings: Vec<Unenforced>,
}

impl Resources {
    /// The cgroup's OOM kills and peak memory, and (only when `failed`: statvfs costs a call)
    /// whether the workspace's file system is full.
    pub(crate) fn evidence(&self, failed: bool) -> (u64, Option<u64>, bool) {
        let cg = self.cgroup.0.as_ref();
        let oom_kills = cg.map_or(0, hull_cgroup::BoxCgroup::oom_kills);
        let peak = cg.and_then(hull_cgroup::BoxCgroup::peak_memory);
        (
            oom_kills,
            peak,
            failed && workspace_is_full(&self.workspace.path),
        )
    }
}

/// The cgroup limits `spec` asks for.
pub(crate) fn limits_of(spec: &BoxSpec) -> hull_cgroup::Limits {
    hull_cgroup::Limits {
        memory_bytes: spec.memory,
        pids: spec.pids,
        cpu_millis: spec.cpu_millis(),
    }
}

fn workspace_is_full(path: &std::path::Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    sys::free_space(&c).is_ok_and(|(blocks, inodes)| blocks == 0 || inodes == 0)
}

/// What is left of a box once its result is known: its exiting pid 1, its cgroup and its
/// temporary workspace. [`Teardown::finish`] (or dropping it) reaps and removes them.
#[derive(Debug)]
pub struct Teardown {
    pid: Option<libc::pid_t>,
    cgroup: CgroupGuard,
    workspace: Option<Workspace>,
    tracing: bool,
}

impl Teardown {
    /// `pid`: pid 1 when it is still our unreaped child; `tracing`: `HULL_TRACE_STEPS` asks
    /// for the teardown's milestones.
    pub(crate) fn new(pid: Option<libc::pid_t>, resources: Resources, tracing: bool) -> Teardown {
        Teardown {
            pid,
            cgroup: resources.cgroup,
            workspace: Some(resources.workspace),
            tracing,
        }
    }

    /// Waits for the box's pid 1 (and so every process of the box) to be gone, then removes the
    /// cgroup and the temporary workspace.
    pub fn finish(mut self) {
        self.run();
    }

    fn run(&mut self) {
        if let Some(pid) = self.pid.take() {
            // Pid 1 waits to be killed once the program has exited (its own exit is the box's
            // namespace teardown); it is our unreaped child, so the pid is still its.
            let _ = sys::kill(pid, libc::SIGKILL);
            // While its exit runs (on its own CPU), a first pass over the temporary workspace;
            // a process of the box may still write there until pid 1 is reaped, so the
            // workspace is removed again (and for certain) after the reap.
            if let Some(ws) = &self.workspace {
                ws.remove_early();
            }
            let _ = sys::wait4(pid, false);
        }
        if self.tracing {
            crate::steplog::step("teardown: box reaped");
        }
        if let Some(cg) = self.cgroup.0.take() {
            if !cg.is_empty() {
                cg.kill_all();
            }
            let _ = cg.remove();
        }
        self.workspace.take();
        if std::mem::take(&mut self.tracing) {
            crate::steplog::step("teardown: cgroup and workspace removed");
            crate::steplog::flush_unless_held();
        }
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        self.run();
    }
}

/// Removes the box's cgroup when dropped.
#[derive(Debug)]
pub(crate) struct CgroupGuard(pub(crate) Option<hull_cgroup::BoxCgroup>);

impl CgroupGuard {
    /// The `cgroup.procs` files the box joins (none without a cgroup).
    pub(crate) fn procs_files(&self) -> Vec<CString> {
        self.0
            .as_ref()
            .map(|c| c.procs_files().to_vec())
            .unwrap_or_default()
    }
}

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        if let Some(cg) = self.0.take() {
            if !cg.is_empty() {
                cg.kill_all();
            }
            let _ = cg.remove();
        }
    }
}

/// The box's /workspace on the host; a temporary one is deleted when dropped.
#[derive(Debug)]
pub(crate) struct Workspace {
    pub(crate) path: PathBuf,
    temporary: bool,
    /// A `--subids` box's id ranges: what it left owned by them is removed from a user
    /// namespace mapped the same way ([`crate::subids::remove_tree_mapped`]).
    pub(crate) subids: Option<(IdRange, IdRange)>,
}

impl Workspace {
    /// No directory: nothing to delete.
    pub(crate) fn none() -> Workspace {
        Workspace::named(PathBuf::new())
    }

    /// The caller's own directory: never deleted.
    pub(crate) fn named(path: PathBuf) -> Workspace {
        Workspace {
            path,
            temporary: false,
            subids: None,
        }
    }

    pub(crate) fn temporary() -> Result<Workspace, BoxError> {
        // The owner identity lets a later hull sweep this directory if we are SIGKILLed
        // (`leftovers`).
        let name = format!(
            "{}{}-XXXXXX",
            crate::leftovers::WORKSPACE_PREFIX,
            crate::owner::id()
        );
        let path =
            sys::mkdtemp(&std::env::temp_dir().join(name)).map_err(|errno| BoxError::Sys {
                what: "create a temporary workspace",
                errno,
            })?;
        let ws = Workspace {
            path,
            temporary: true,
            subids: None,
        };
        // Host root's box maps its root to hull's range (see `remap`): give it the directory.
        if let Some((uid, gid)) = crate::remap::box_root() {
            std::os::unix::fs::chown(&ws.path, Some(uid), Some(gid)).map_err(|error| {
                BoxError::Io {
                    what: format!(
                        "give the temporary workspace {} to the box",
                        ws.path.display()
                    ),
                    error,
                }
            })?;
        }
        Ok(ws)
    }
}

/// A temporary workspace being made on a helper thread, for a box not yet specified (a one-shot
/// `hull run` starts it before parsing its arguments, so the owner lock file, `mkdtemp` and
/// the `chown` to the box's root are off its path). A box that names its own workspace, or
/// none made, drops it: it is removed like any temporary workspace.
#[derive(Debug)]
pub struct WorkspaceAhead {
    thread: Option<std::thread::JoinHandle<Option<Workspace>>>,
}

impl WorkspaceAhead {
    /// Starts making it (nothing, when the helper thread cannot be made).
    pub fn start() -> WorkspaceAhead {
        let thread = std::thread::Builder::new()
            .name("hull-workspace".into())
            .spawn(|| {
                sys::block_signals(&crate::ending::FORWARDED);
                let ws = Workspace::temporary().ok();
                crate::steplog::step("ahead: temporary workspace made");
                ws
            })
            .ok();
        WorkspaceAhead { thread }
    }

    /// The workspace, once made (None if it could not be: the box makes its own then).
    pub(crate) fn take(mut self) -> Option<Workspace> {
        self.thread.take().and_then(|t| t.join().ok().flatten())
    }
}

impl Drop for WorkspaceAhead {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            drop(t.join());
        }
    }
}

impl Workspace {
    /// A first removal of a temporary workspace while the box may still be ending; what
    /// removes it for certain is the drop, after every process of the box is gone.
    fn remove_early(&self) {
        if self.temporary && self.subids.is_none() {
            let _ = crate::leftovers::remove_tree(&self.path);
        }
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if !self.temporary || crate::leftovers::remove_tree(&self.path) {
            return;
        }
        // A `--subids` box may have given files to ids of our range, which we cannot remove as
        // ourselves.
        let mapped = match &self.subids {
            Some((uids, gids)) => crate::subids::remove_tree_mapped(&self.path, uids, gids).err(),
            None => None,
        };
        if std::fs::symlink_metadata(&self.path).is_ok() {
            // The result has gone out already: stderr is the only place left to say it.
            eprintln!(
                "hull: warning: could not remove the temporary workspace {}{}; remove it by hand",
                self.path.display(),
                mapped.map(|e| format!(" ({e})")).unwrap_or_default()
            );
        }
    }
}
