//! Sweeping what a hull that was SIGKILLed left behind.
//!
//! A box dies with its supervisor (`PR_SET_PDEATHSIG`), but a supervisor killed outright cannot
//! remove the box's cgroup directories or its temporary workspace. Both carry the supervisor's
//! pid in their names (`hull-<pid>-...`), so a later hull removes those whose hull is gone.
//! Only empty cgroups can be removed (rmdir refuses a busy one), and only workspaces owned by
//! the caller are touched.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The temporary workspace name prefix; the supervisor's pid and a random suffix follow.
pub(crate) const WORKSPACE_PREFIX: &str = "hull-ws-";
/// The template staging directory prefix (an empty mount point on the host); the Runtime's pid
/// and a random suffix follow.
pub(crate) const STAGE_PREFIX: &str = "hull-tmpl-";
/// The box cgroup name prefix; the supervisor's pid, a sequence number and a start time follow.
pub(crate) const CGROUP_PREFIX: &str = "hull-";

/// What one sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub cgroups: usize,
    pub workspaces: usize,
}

/// The pid in `<prefix><pid>-...`, if the name has that shape.
fn owner_pid(name: &str, prefix: &str) -> Option<libc::pid_t> {
    let rest = name.strip_prefix(prefix)?;
    let (pid, tail) = rest.split_once('-')?;
    if tail.is_empty() {
        return None;
    }
    pid.parse().ok().filter(|p| *p > 0)
}

/// Whether `pid` names no process in our pid namespace (a live one, even a reused pid, is left
/// alone: its leftovers wait for a later sweep).
fn gone(pid: libc::pid_t) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// Entries of `dir` named `<prefix><pid>-...` whose hull is gone.
fn orphans(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    rd.flatten()
        .filter(|e| e.file_name().to_str().and_then(|n| owner_pid(n, prefix)).is_some_and(gone))
        .map(|e| e.path())
        .collect()
}

/// Removes box cgroups under `parents` and temporary workspaces in `temp` left by dead hulls.
pub(crate) fn sweep(parents: &[PathBuf], temp: &Path) -> Swept {
    let mut swept = Swept::default();
    for parent in parents {
        // Box cgroups are leaves, so rmdir (which the kernel refuses while a task is inside)
        // is the whole removal.
        swept.cgroups += orphans(parent, CGROUP_PREFIX).iter().filter(|p| std::fs::remove_dir(p).is_ok()).count();
    }
    // Template staging directories are empty mount points on the host side.
    swept.workspaces += orphans(temp, STAGE_PREFIX).iter().filter(|p| std::fs::remove_dir(p).is_ok()).count();
    let uid = crate::sys::geteuid();
    for ws in orphans(temp, WORKSPACE_PREFIX) {
        let ours = std::fs::symlink_metadata(&ws).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if ours && remove_tree(&ws) {
            swept.workspaces += 1;
        }
    }
    swept
}

/// Removes a tree a box wrote (a workspace); the box may have left directories without write
/// permission, so those are restored and the removal retried. True when the tree is gone.
pub fn remove_tree(path: &Path) -> bool {
    if std::fs::remove_dir_all(path).is_ok() {
        return true;
    }
    make_writable(path);
    std::fs::remove_dir_all(path).is_ok()
}

fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                make_writable(&e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_their_owner() {
        assert_eq!(owner_pid("hull-ws-123-AbCdEf", WORKSPACE_PREFIX), Some(123));
        assert_eq!(owner_pid("hull-77-0-123456", CGROUP_PREFIX), Some(77));
        assert_eq!(owner_pid("hull-ws-AbCdEf", WORKSPACE_PREFIX), None);
        assert_eq!(owner_pid("hull-hulltest", CGROUP_PREFIX), None);
        assert_eq!(owner_pid("hull-12-", CGROUP_PREFIX), None);
        assert_eq!(owner_pid("other-12-x", CGROUP_PREFIX), None);
    }

    #[test]
    fn only_dead_owners_are_swept() {
        let temp = tempfile::tempdir().unwrap();
        let cg = tempfile::tempdir().unwrap();
        // pid_max is at most 2^22, so this pid cannot be alive.
        let dead = 1 << 23;
        let live = std::process::id();
        for dir in [format!("hull-ws-{dead}-x1"), format!("hull-ws-{live}-x2"), "hull-ws-noid".into()] {
            std::fs::create_dir_all(temp.path().join(&dir).join("sub")).unwrap();
        }
        for dir in [format!("hull-{dead}-0-1"), format!("hull-{live}-0-1"), "hull-hulltest".into()] {
            std::fs::create_dir(cg.path().join(dir)).unwrap();
        }
        let swept = sweep(&[cg.path().to_path_buf()], temp.path());
        assert_eq!(swept, Swept { cgroups: 1, workspaces: 1 });
        assert!(!temp.path().join(format!("hull-ws-{dead}-x1")).exists());
        assert!(temp.path().join(format!("hull-ws-{live}-x2")).exists());
        assert!(temp.path().join("hull-ws-noid").exists());
        assert!(!cg.path().join(format!("hull-{dead}-0-1")).exists());
        assert!(cg.path().join(format!("hull-{live}-0-1")).exists());
        assert!(cg.path().join("hull-hulltest").exists());
    }
}
