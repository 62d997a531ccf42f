//! Sweeping what a hull that was SIGKILLed left behind.
//!
//! A box dies with its supervisor (`PR_SET_PDEATHSIG`), but a supervisor killed outright cannot
//! remove the box's cgroup directories or its temporary workspace. Both carry the supervisor's
//! pid in their names (`hull-<pid>-...`), so a later hull removes those whose hull is gone.
//! Only empty cgroups can be removed (rmdir refuses a busy one), and only workspaces owned by
//! the caller are touched.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

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
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| owner_pid(n, prefix))
                .is_some_and(gone)
        })
        .map(|e| e.path())
        .collect()
}

/// Removes box cgroups under `parents` and temporary workspaces in `temp` left by dead hulls.
pub(crate) fn sweep(parents: &[PathBuf], temp: &Path) -> Swept {
    let mut swept = Swept::default();
    for parent in parents {
        // Box cgroups are leaves, so rmdir (which the kernel refuses while a task is inside)
        // is the whole removal.
        swept.cgroups += orphans(parent, CGROUP_PREFIX)
            .iter()
            .filter(|p| std::fs::remove_dir(p).is_ok())
            .count();
    }
    // Template staging directories are empty mount points on the host side.
    swept.workspaces += orphans(temp, STAGE_PREFIX)
        .iter()
        .filter(|p| std::fs::remove_dir(p).is_ok())
        .count();
    let uid = crate::sys::geteuid();
    for ws in orphans(temp, WORKSPACE_PREFIX) {
        // Host root gives its temporary workspaces to its boxes' root (see `remap`).
        let box_root = crate::remap::box_root().map(|(u, _)| u);
        let ours = std::fs::symlink_metadata(&ws)
            .is_ok_and(|m| m.is_dir() && (m.uid() == uid || Some(m.uid()) == box_root));
        if ours && remove_tree(&ws) {
            swept.workspaces += 1;
        }
    }
    swept
}

/// Removes a tree a box wrote (a workspace); the box may have left directories without write
/// or search permission, so those are made `0700` first. True when the tree is gone.
///
/// Iterative with one directory open at a time ([`empty_dir`]), so a tree thousands of levels
/// deep (which a box can make in a second) neither overflows our stack nor runs out of fds, as a
/// recursive walk such as `std::fs::remove_dir_all` does.
pub fn remove_tree(path: &Path) -> bool {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
        Err(_) => return false,
        Ok(m) if !m.is_dir() => return std::fs::remove_file(path).is_ok(),
        Ok(_) => {}
    }
    let Ok(dir) = open_dir_writable(rustix::fs::CWD, path) else {
        return false;
    };
    empty_dir(dir).is_ok() && std::fs::remove_dir(path).is_ok()
}

/// Opens a directory no-follow for reading; one the box left without read or search
/// permission for us gets `0700` (through an `O_PATH` descriptor, so a name swapped for a
/// symlink is never chmod-ed) and is opened again.
fn open_dir_writable<P: rustix::path::Arg + Copy>(
    at: impl AsFd,
    name: P,
) -> std::io::Result<OwnedFd> {
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(&at, name, flags, Mode::empty()) {
        Err(rustix::io::Errno::ACCESS) => {
            let p = rustix::fs::openat(
                &at,
                name,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            rustix::fs::chmod(
                format!("/proc/self/fd/{}", p.as_raw_fd()),
                Mode::from_raw_mode(0o700),
            )?;
            Ok(rustix::fs::openat(&at, name, flags, Mode::empty())?)
        }
        r => Ok(r?),
    }
}

/// Empties the directory `root` without removing it, never following a symlink and never
/// leaving it: one directory is open at a time, and going back up opens `..` and checks it is
/// the very directory (device and inode) we came down from, so a directory the box moves
/// meanwhile fails the removal instead of redirecting it. Depth costs a name and a list of
/// pending sibling names per level, on the heap.
pub fn empty_dir(root: OwnedFd) -> std::io::Result<()> {
    struct Up {
        id: (u64, u64),
        name: Vec<u8>,
        pending: Vec<Vec<u8>>,
    }
    let mut cur = root;
    let mut ups: Vec<Up> = Vec::new();
    let mut pending = unlink_non_dirs(&cur)?;
    loop {
        if let Some(name) = pending.pop() {
            let sub = match open_dir_writable(&cur, name.as_slice()) {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let id = dir_id(&cur)?;
            ups.push(Up {
                id,
                name,
                pending: std::mem::take(&mut pending),
            });
            cur = sub;
            pending = unlink_non_dirs(&cur)?;
        } else {
            let Some(up) = ups.pop() else { return Ok(()) };
            let parent = rustix::fs::openat(
                &cur,
                "..",
                OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            if dir_id(&parent)? != up.id {
                return Err(std::io::Error::other(
                    "a directory was moved while its tree was being removed",
                ));
            }
            cur = parent;
            rustix::fs::unlinkat(&cur, up.name.as_slice(), AtFlags::REMOVEDIR)?;
            pending = up.pending;
        }
    }
}

fn dir_id(fd: &OwnedFd) -> std::io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    #[allow(clippy::useless_conversion)]
    Ok((u64::from(st.st_dev), u64::from(st.st_ino)))
}

/// Unlinks every non-directory in `dir` and returns its subdirectories' names.
fn unlink_non_dirs(dir: &OwnedFd) -> std::io::Result<Vec<Vec<u8>>> {
    let st = rustix::fs::fstat(dir)?;
    if st.st_mode & 0o700 != 0o700 {
        rustix::fs::fchmod(dir, Mode::from_raw_mode(0o700))?;
    }
    let mut subdirs = Vec::new();
    let mut files = Vec::new();
    let mut reader = rustix::fs::Dir::read_from(dir)?;
    while let Some(ent) = reader.read() {
        let ent = ent?;
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let is_dir = match ent.file_type() {
            FileType::Directory => true,
            FileType::Unknown => {
                rustix::fs::statat(dir, ent.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)
            }
            _ => false,
        };
        if is_dir {
            subdirs.push(name.to_vec())
        } else {
            files.push(name.to_vec())
        }
    }
    drop(reader);
    for f in files {
        match rustix::fs::unlinkat(dir, f.as_slice(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(rustix::io::Errno::ISDIR) => subdirs.push(f),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(subdirs)
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
        for dir in [
            format!("hull-ws-{dead}-x1"),
            format!("hull-ws-{live}-x2"),
            "hull-ws-noid".into(),
        ] {
            std::fs::create_dir_all(temp.path().join(&dir).join("sub")).unwrap();
        }
        for dir in [
            format!("hull-{dead}-0-1"),
            format!("hull-{live}-0-1"),
            "hull-hulltest".into(),
        ] {
            std::fs::create_dir(cg.path().join(dir)).unwrap();
        }
        let swept = sweep(&[cg.path().to_path_buf()], temp.path());
        assert_eq!(
            swept,
            Swept {
                cgroups: 1,
                workspaces: 1
            }
        );
        assert!(!temp.path().join(format!("hull-ws-{dead}-x1")).exists());
        assert!(temp.path().join(format!("hull-ws-{live}-x2")).exists());
        assert!(temp.path().join("hull-ws-noid").exists());
        assert!(!cg.path().join(format!("hull-{dead}-0-1")).exists());
        assert!(cg.path().join(format!("hull-{live}-0-1")).exists());
        assert!(cg.path().join("hull-hulltest").exists());
    }

    #[test]
    fn deep_and_unwritable_trees_are_removed() {
        let temp = tempfile::tempdir().unwrap();
        let top = temp.path().join("ws");
        std::fs::create_dir(&top).unwrap();
        // Deeper than the fd limit a recursive removal would need (one open directory per level).
        let mut cur =
            rustix::fs::open(&top, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
        for i in 0..3000 {
            rustix::fs::mkdirat(&cur, "d", Mode::from_raw_mode(0o755)).unwrap();
            if i % 500 == 0 {
                std::fs::write(format!("/proc/self/fd/{}/f", cur.as_raw_fd()), "x").unwrap();
            }
            cur = rustix::fs::openat(&cur, "d", OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())
                .unwrap();
        }
        drop(cur);
        std::fs::create_dir_all(top.join("locked/inner")).unwrap();
        std::fs::write(top.join("locked/inner/f"), "x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            top.join("locked/inner"),
            std::fs::Permissions::from_mode(0o500),
        )
        .unwrap();
        std::fs::set_permissions(top.join("locked"), std::fs::Permissions::from_mode(0o000))
            .unwrap();
        // The common default soft limit, so a removal holding one fd per level fails here too.
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit write/read only the struct we pass.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        let low = libc::rlimit {
            rlim_cur: lim.rlim_cur.min(1024),
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) };
        let removed = remove_tree(&top);
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
        assert!(removed);
        assert!(!top.exists());
    }
}
