//! [`BoxCgroup`]: one box's cgroup directories, from creation to removal — joining data, limit
//! bookkeeping, stats, killing and cleanup.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::CgroupError;
use crate::fsops::{keyed_value, read_pids, read_value, write_value, DirOps};
use crate::layout::CgroupVersion;
use crate::limits::Controller;
use crate::sys::ProcessHandle;

/// How long `remove` keeps retrying a directory the kernel still calls busy.
const REMOVE_PATIENCE: Duration = Duration::from_secs(2);
/// How many signal rounds `kill_all` makes before giving up on a box that keeps refilling.
const KILL_ROUNDS: u32 = 200;

/// One directory of a box: a v1 hierarchy's, or the single v2 one.
#[derive(Debug)]
pub(crate) struct BoxDir {
    pub path: PathBuf,
    pub version: CgroupVersion,
    /// Controllers whose files this directory carries for us.
    pub controllers: Vec<Controller>,
}

/// The cgroup(s) of one box. Dropping it makes one best-effort attempt to remove the
/// directories; call [`BoxCgroup::remove`] to know they are gone.
#[derive(Debug)]
pub struct BoxCgroup {
    dirs: Vec<BoxDir>,
    procs: Vec<CString>,
    enforced: [bool; 3],
    unenforced: Vec<(Controller, String)>,
    ops: Arc<dyn DirOps>,
}

impl BoxCgroup {
    pub(crate) fn new(ops: Arc<dyn DirOps>) -> BoxCgroup {
        BoxCgroup {
            dirs: Vec::new(),
            procs: Vec::new(),
            enforced: [false; 3],
            unenforced: Vec::new(),
            ops,
        }
    }

    pub(crate) fn push_dir(&mut self, dir: BoxDir, procs: Option<CString>) {
        self.dirs.push(dir);
        self.procs.extend(procs);
    }

    pub(crate) fn mark_enforced(&mut self, c: Controller) {
        self.enforced[c.index()] = true;
    }

    pub(crate) fn set_unenforced(&mut self, unenforced: Vec<(Controller, String)>) {
        self.unenforced = unenforced;
    }

    /// The files (v1 `tasks`, v2 `cgroup.procs`) the box's single-threaded first process writes `"0"` into (see
    /// [`crate::join_from_child`]). Ready-made C strings so the child need not allocate.
    pub fn procs_files(&self) -> &[CString] {
        &self.procs
    }

    /// Moves process `pid` (and its threads) into every cgroup of the box, from outside it.
    pub fn join_pid(&self, pid: u32) -> Result<(), CgroupError> {
        for dir in &self.dirs {
            let path = dir.path.join("cgroup.procs");
            write_value(&path, &pid.to_string()).map_err(|source| CgroupError::Join {
                pid,
                path,
                source,
            })?;
        }
        Ok(())
    }

    /// Whether `c`'s limit was asked for and is in force.
    pub fn enforced(&self, c: Controller) -> bool {
        self.enforced[c.index()]
    }

    /// Limits that were asked for but are not in force, each with the reason and the fix.
    pub fn unenforced(&self) -> &[(Controller, String)] {
        &self.unenforced
    }

    pub fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.path.clone()).collect()
    }

    fn dir_with(&self, c: Controller) -> Option<&BoxDir> {
        self.dirs.iter().find(|d| d.controllers.contains(&c))
    }

    fn read_in(&self, c: Controller, v1_file: &str, v2_file: &str) -> Option<String> {
        let dir = self.dir_with(c)?;
        let file = match dir.version {
            CgroupVersion::V1 => v1_file,
            CgroupVersion::V2 => v2_file,
        };
        read_value(&dir.path.join(file)).ok()
    }

    /// Processes the kernel's OOM killer killed in the box (0 without a memory cgroup).
    pub fn oom_kills(&self) -> u64 {
        self.read_in(Controller::Memory, "memory.oom_control", "memory.events")
            .and_then(|text| keyed_value(&text, "oom_kill"))
            .unwrap_or(0)
    }

    /// The box's highest memory use in bytes, if the kernel records it.
    pub fn peak_memory(&self) -> Option<u64> {
        let text = self.read_in(
            Controller::Memory,
            "memory.max_usage_in_bytes",
            "memory.peak",
        )?;
        text.trim().parse().ok()
    }

    /// How many forks the pids limit refused.
    pub fn pids_limit_hits(&self) -> u64 {
        self.read_in(Controller::Pids, "pids.events", "pids.events")
            .and_then(|text| keyed_value(&text, "max"))
            .unwrap_or(0)
    }

    /// No process is left in any of the box's directories.
    pub fn is_empty(&self) -> bool {
        self.dirs
            .iter()
            .all(|d| match read_pids(&d.path.join("cgroup.procs")) {
                Ok(pids) => pids.is_empty(),
                Err(e) => e.kind() == io::ErrorKind::NotFound,
            })
    }

    fn listed_pids(&self) -> Vec<libc::pid_t> {
        let mut pids: Vec<libc::pid_t> = self
            .dirs
            .iter()
            .filter_map(|d| read_pids(&d.path.join("cgroup.procs")).ok())
            .flatten()
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Kills every process in the box and waits (bounded) until the kernel lists none.
    ///
    /// v2's `cgroup.kill` does it atomically. Otherwise each round pins the listed pids with
    /// pidfds, re-reads the list, and signals only pids still listed: a pid that was reaped and
    /// reused by an unrelated process in between is then not ours and is left alone.
    pub fn kill_all(&self) {
        for dir in self.dirs.iter().filter(|d| d.version == CgroupVersion::V2) {
            // Absent before 5.14; the signal rounds below cover that.
            let _ = write_value(&dir.path.join("cgroup.kill"), "1");
        }
        for round in 0..KILL_ROUNDS {
            let before = self.listed_pids();
            if before.is_empty() {
                return;
            }
            let handles: Vec<(libc::pid_t, ProcessHandle)> = before
                .into_iter()
                .filter_map(|pid| Some((pid, ProcessHandle::open(pid)?)))
                .collect();
            let still = self.listed_pids();
            for (pid, handle) in &handles {
                if still.binary_search(pid).is_ok() {
                    handle.kill();
                }
            }
            thread::sleep(Duration::from_micros(200u64 << round.min(5)));
        }
    }

    /// Removes every directory of the box, retrying briefly while the kernel reports EBUSY (a
    /// process still exiting). On `Ok` none is left; on `Err` every directory was still tried.
    pub fn remove(mut self) -> Result<(), CgroupError> {
        let dirs = std::mem::take(&mut self.dirs);
        let mut first_error = None;
        for dir in dirs.iter().rev() {
            if let Err(source) = rmdir_patiently(self.ops.as_ref(), &dir.path) {
                first_error.get_or_insert(CgroupError::Remove {
                    path: dir.path.clone(),
                    source,
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

fn rmdir_patiently(ops: &dyn DirOps, path: &Path) -> io::Result<()> {
    let deadline = Instant::now() + REMOVE_PATIENCE;
    let mut pause = Duration::from_millis(1);
    loop {
        match ops.rmdir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

impl Drop for BoxCgroup {
    fn drop(&mut self) {
        for dir in self.dirs.iter().rev() {
            let _ = self.ops.rmdir(&dir.path);
        }
    }
}
