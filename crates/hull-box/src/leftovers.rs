//! Sweeping what a hull that was SIGKILLed left behind.
//!
//! A box dies with its supervisor (`PR_SET_PDEATHSIG`), but a supervisor killed outright cannot
//! remove the box's cgroup directories, its temporary workspace, its template staging directory
//! or its Sandbox session directories. Each carries its owner's identity in its name
//! (`hull-ws-<id>-...`, `hull-tmpl-<id>-...`, `hull-<id>-...` cgroups; see [`crate::owner`]), and
//! the owner holds a `flock` on `$TMPDIR/hull-live-<id>.lock` for as long as it lives. A sweep
//! judges an owner dead only when it can take that lock itself, which holds across pid
//! namespaces (a pid looked up in our own `/proc` does not: a hull in a container or under
//! `unshare -p` sharing our TMPDIR would look dead), and keeps it while it removes the owner's
//! things. A name without a lock file beside it (an owner with another TMPDIR, another user's,
//! an older hull's) is left alone. Only empty cgroups can be removed (rmdir refuses a busy one),
//! and only lock files and workspaces owned by the caller are touched. A dead owner's lock file
//! goes once nothing named after it is left.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};

use crate::owner::{self, LOCK_PREFIX, LOCK_SUFFIX};

/// The temporary workspace name prefix; the owner's identity and a random suffix follow.
pub(crate) const WORKSPACE_PREFIX: &str = "hull-ws-";
/// The template staging directory prefix (an empty mount point on the host); the owner's
/// identity and a random suffix follow.
pub(crate) const STAGE_PREFIX: &str = "hull-tmpl-";
/// The box cgroup name prefix; the owner's identity, a sequence number and a start time follow.
pub(crate) const CGROUP_PREFIX: &str = "hull-";

/// What one sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub cgroups: usize,
    pub workspaces: usize,
}

/// The owner identity in `<prefix><id>-...`, if the name has that shape.
fn owner_id<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = name.strip_prefix(prefix)?;
    let (id, tail) = rest.split_once('-')?;
    (!tail.is_empty() && owner::is_id(id)).then_some(id)
}

/// An owner found dead, its lock held by us while its things go.
struct Dead {
    id: String,
    lock_path: PathBuf,
    lock: OwnedFd,
    /// Something named after it could not be removed: its lock file stays for a later sweep.
    left: bool,
}

/// Takes the lock at `path` if it is a lock file of ours that nobody holds: its owner is gone.
fn take_if_dead(path: &Path, uid: u32) -> Option<OwnedFd> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.uid() != uid {
        return None;
    }
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(fd)
}

/// What a temporary directory entry named after an owner is.
enum TempKind {
    Stage,
    Workspace,
}

/// Removes box cgroups under `parents` and temporary directories in `temp` whose owners are
/// gone (their lock files in `temp` are not held), then those owners' lock files.
pub(crate) fn sweep(parents: &[PathBuf], temp: &Path) -> Swept {
    let mut swept = Swept::default();
    let Ok(rd) = std::fs::read_dir(temp) else {
        return swept;
    };
    let uid = crate::sys::geteuid();
    // Our sub-id ranges, looked up once if a workspace needs them (see `remove_tree_mapped`).
    let mut subids = None;
    let mut dead: Vec<Dead> = Vec::new();
    let mut named: Vec<(TempKind, String, PathBuf)> = Vec::new();
    for e in rd.flatten() {
        let file_name = e.file_name();
        let Some(name) = file_name.to_str() else {
            continue;
        };
        let lock_id = name
            .strip_prefix(LOCK_PREFIX)
            .and_then(|r| r.strip_suffix(LOCK_SUFFIX))
            .filter(|id| owner::is_id(id));
        if let Some(id) = lock_id {
            if let Some(lock) = take_if_dead(&e.path(), uid) {
                dead.push(Dead {
                    id: id.to_string(),
                    lock_path: e.path(),
                    lock,
                    left: false,
                });
            }
        } else if let Some(id) = owner_id(name, STAGE_PREFIX) {
            named.push((TempKind::Stage, id.to_string(), e.path()));
        } else if let Some(id) = owner_id(name, WORKSPACE_PREFIX) {
            named.push((TempKind::Workspace, id.to_string(), e.path()));
        }
    }
    if dead.is_empty() {
        return swept;
    }
    // Where the dead made box cgroups, from their lock files, beside where we make ours.
    let mut parents = parents.to_vec();
    for d in &dead {
        parents.extend(owner::manifest_parents(&read_manifest(&d.lock)));
    }
    parents.sort();
    parents.dedup();
    for (kind, id, path) in named {
        let Some(owner) = dead.iter_mut().find(|d| d.id == id) else {
            continue;
        };
        let removed = match kind {
            // Template staging directories are empty mount points on the host side.
            TempKind::Stage => std::fs::remove_dir(&path).is_ok(),
            TempKind::Workspace => {
                // Host root gives its temporary workspaces to its boxes' root (see `remap`).
                let box_root = crate::remap::box_root().map(|(u, _)| u);
                std::fs::symlink_metadata(&path)
                    .is_ok_and(|m| m.is_dir() && (m.uid() == uid || Some(m.uid()) == box_root))
                    && (remove_tree(&path) || remove_mapped(&path, uid, &mut subids))
            }
        };
        if removed {
            swept.workspaces += 1;
        } else {
            owner.left = true;
        }
    }
    for parent in &parents {
        let Ok(rd) = std::fs::read_dir(parent) else {
            continue;
        };
        for e in rd.flatten() {
            let file_name = e.file_name();
            let Some(id) = file_name.to_str().and_then(|n| owner_id(n, CGROUP_PREFIX)) else {
                continue;
            };
            let Some(owner) = dead.iter_mut().find(|d| d.id == id) else {
                continue;
            };
            // Box cgroups are leaves but for a named sandbox's spawns (one level of children),
            // so rmdir (which the kernel refuses while a task is inside) is the whole removal.
            if let Ok(children) = std::fs::read_dir(e.path()) {
                for c in children.flatten() {
                    if c.file_type().is_ok_and(|t| t.is_dir()) {
                        let _ = std::fs::remove_dir(c.path());
                    }
                }
            }
            if std::fs::remove_dir(e.path()).is_ok() {
                swept.cgroups += 1;
            } else {
                owner.left = true;
            }
        }
    }
    // Unlinked while we still hold the lock: a hull that created this very name an instant ago
    // (and so had no lock yet when we took it) sees, once it gets the lock, that the name no
    // longer leads to its file, and takes another identity (`owner::take`).
    for d in dead.iter().filter(|d| !d.left) {
        let _ = std::fs::remove_file(&d.lock_path);
    }
    swept
}

/// The text of a lock file (its owner's manifest of cgroup parents), at most
/// [`owner::MANIFEST_MAX`] bytes; empty when unreadable.
fn read_manifest(lock: &OwnedFd) -> String {
    let mut buf = vec![0u8; owner::MANIFEST_MAX];
    let mut len = 0;
    while len < buf.len() {
        match rustix::io::pread(lock, &mut buf[len..], len as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
    }
    buf.truncate(len);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Removes a workspace that a `--subids` box left holding files of our sub-ids, from a user
/// namespace mapped like the box's, if we have sub-id ranges (`ranges` caches the look-up).
fn remove_mapped(
    path: &Path,
    uid: u32,
    ranges: &mut Option<Option<(crate::subids::IdRange, crate::subids::IdRange)>>,
) -> bool {
    let ranges =
        ranges.get_or_insert_with(|| crate::subids::lookup(uid, crate::sys::getegid()).ok());
    match ranges {
        Some((uids, gids)) => {
            crate::subids::remove_tree_mapped(path, uids, gids).is_ok()
                && std::fs::symlink_metadata(path).is_err()
        }
        None => false,
    }
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
        let id = "123.0123456789abcdef";
        assert_eq!(
            owner_id(&format!("hull-ws-{id}-AbCdEf"), WORKSPACE_PREFIX),
            Some(id)
        );
        assert_eq!(
            owner_id(&format!("hull-ws-{id}-sb-AbCdEf"), WORKSPACE_PREFIX),
            Some(id)
        );
        assert_eq!(
            owner_id(&format!("hull-{id}-0-123456"), CGROUP_PREFIX),
            Some(id)
        );
        assert_eq!(owner_id("hull-ws-123-AbCdEf", WORKSPACE_PREFIX), None);
        assert_eq!(owner_id("hull-ws-AbCdEf", WORKSPACE_PREFIX), None);
        assert_eq!(owner_id("hull-hulltest", CGROUP_PREFIX), None);
        assert_eq!(owner_id(&format!("hull-{id}-"), CGROUP_PREFIX), None);
        assert_eq!(owner_id(&format!("other-{id}-x"), CGROUP_PREFIX), None);
    }

    #[test]
    fn only_owners_whose_lock_is_free_are_swept() {
        let temp = tempfile::tempdir().unwrap();
        let cg = tempfile::tempdir().unwrap();
        let (dead, live, unknown) = (
            "7.00000000000000de",
            "8.00000000000000a1",
            "9.0000000000000000",
        );
        // A dead owner left its lock file unlocked; a live one holds its lock (another open
        // file of the same name, as another process would); the third has no lock file here.
        std::fs::write(owner::lock_path(temp.path(), dead), "").unwrap();
        std::fs::write(owner::lock_path(temp.path(), live), "").unwrap();
        let held = std::fs::File::open(owner::lock_path(temp.path(), live)).unwrap();
        rustix::fs::flock(&held, FlockOperation::NonBlockingLockExclusive).unwrap();
        for id in [dead, live, unknown] {
            std::fs::create_dir_all(temp.path().join(format!("hull-ws-{id}-x1/sub"))).unwrap();
            std::fs::create_dir(temp.path().join(format!("hull-ws-{id}-sb-x2"))).unwrap();
            std::fs::create_dir(temp.path().join(format!("hull-tmpl-{id}-x3"))).unwrap();
            std::fs::create_dir(cg.path().join(format!("hull-{id}-0-1"))).unwrap();
        }
        std::fs::create_dir(temp.path().join("hull-ws-noid")).unwrap();
        std::fs::create_dir(cg.path().join("hull-hulltest")).unwrap();
        let swept = sweep(&[cg.path().to_path_buf()], temp.path());
        assert_eq!(
            swept,
            Swept {
                cgroups: 1,
                workspaces: 3
            }
        );
        let names = |d: &Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert!(
            names(temp.path()).iter().all(|n| !n.contains(dead)),
            "{:?}",
            names(temp.path())
        );
        assert!(names(cg.path()).iter().all(|n| !n.contains(dead)));
        for id in [live, unknown] {
            for n in [
                format!("hull-ws-{id}-x1"),
                format!("hull-ws-{id}-sb-x2"),
                format!("hull-tmpl-{id}-x3"),
            ] {
                assert!(temp.path().join(&n).exists(), "{n} was swept");
            }
            assert!(cg.path().join(format!("hull-{id}-0-1")).exists());
        }
        assert!(owner::lock_path(temp.path(), live).exists());
        assert!(temp.path().join("hull-ws-noid").exists());
        assert!(cg.path().join("hull-hulltest").exists());
        // Once its owner lets go, the live one's things go too.
        drop(held);
        let swept = sweep(&[cg.path().to_path_buf()], temp.path());
        assert_eq!(
            swept,
            Swept {
                cgroups: 1,
                workspaces: 3
            }
        );
        assert!(!owner::lock_path(temp.path(), live).exists());
    }

    #[test]
    fn a_dead_owners_lock_file_stays_while_something_of_it_is_left() {
        let temp = tempfile::tempdir().unwrap();
        let cg = tempfile::tempdir().unwrap();
        let dead = "7.00000000000000de";
        std::fs::write(owner::lock_path(temp.path(), dead), "").unwrap();
        // A busy cgroup (here: a directory holding a non-empty one, which rmdir refuses) beside
        // an empty child (a named sandbox's spawn cgroup), which goes.
        let busy = cg.path().join(format!("hull-{dead}-0-1/busy"));
        std::fs::create_dir_all(&busy).unwrap();
        std::fs::write(busy.join("task"), "").unwrap();
        std::fs::create_dir_all(cg.path().join(format!("hull-{dead}-0-1/spawn-s1n1"))).unwrap();
        sweep(&[cg.path().to_path_buf()], temp.path());
        assert!(owner::lock_path(temp.path(), dead).exists());
        assert!(!cg
            .path()
            .join(format!("hull-{dead}-0-1/spawn-s1n1"))
            .exists());
        std::fs::remove_file(busy.join("task")).unwrap();
        let swept = sweep(&[cg.path().to_path_buf()], temp.path());
        assert_eq!(swept.cgroups, 1);
        assert!(!owner::lock_path(temp.path(), dead).exists());
    }

    #[test]
    fn cgroups_a_dead_owner_listed_in_its_lock_file_are_swept_from_anywhere() {
        // The dead owner made its box cgroups under a parent the sweeper does not use (another
        // HULL_CGROUP_PARENT): its lock file lists that parent, so the sweep finds them, and
        // junk in the manifest (relative paths, `..`) is ignored.
        let temp = tempfile::tempdir().unwrap();
        let ours = tempfile::tempdir().unwrap();
        let theirs = tempfile::tempdir().unwrap();
        let dead = "7.00000000000000de";
        let manifest = format!(
            "{}\nrelative/x\n{}/../escape\n",
            theirs.path().display(),
            theirs.path().display()
        );
        std::fs::write(owner::lock_path(temp.path(), dead), manifest).unwrap();
        std::fs::create_dir(theirs.path().join(format!("hull-{dead}-0-1"))).unwrap();
        std::fs::create_dir(theirs.path().join(format!("hull-{dead}-s0-1"))).unwrap();
        std::fs::create_dir(theirs.path().join("hull-8.00000000000000a1-0-1")).unwrap();
        let swept = sweep(&[ours.path().to_path_buf()], temp.path());
        assert_eq!(swept.cgroups, 2);
        assert!(!theirs.path().join(format!("hull-{dead}-0-1")).exists());
        assert!(theirs.path().join("hull-8.00000000000000a1-0-1").exists());
        assert!(!owner::lock_path(temp.path(), dead).exists());
        assert_eq!(
            owner::manifest_parents("/a/b\nrel\n/a/../b\n\n/c\n"),
            vec![PathBuf::from("/a/b"), PathBuf::from("/c")]
        );
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
        let nofile = libc::RLIMIT_NOFILE;
        let soft = crate::sys::soft_limit(nofile).unwrap();
        crate::sys::set_soft_limit(nofile, soft.min(1024)).unwrap();
        let removed = remove_tree(&top);
        crate::sys::set_soft_limit(nofile, soft).unwrap();
        assert!(removed);
        assert!(!top.exists());
    }
}
