//! This process's identity as the owner of what hull names on the host (temporary workspaces,
//! template staging directories, box cgroups, Sandbox session directories), and the lock that
//! tells a leftover sweep the owner still lives.
//!
//! The identity is `<pid>.<16 hex digits>`: the pid for people reading the names, a random part
//! because a pid alone is not unique (two hulls in different pid namespaces sharing a TMPDIR
//! can have the same one, and pids are reused). Before the first name is handed out, the process
//! creates `$TMPDIR/hull-live-<id>.lock` (0600) and takes an exclusive `flock` on it, which it
//! holds for the rest of its life: a lock belongs to the open file, not to a pid, so a sweep
//! in any pid namespace that cannot take it knows the owner lives, and one that can knows it is
//! gone ([`crate::leftovers`]). The lock is taken once per process, not per box. Its descriptor
//! is close-on-exec, and every process hull forks closes it first thing ([`lock_fd`]): a child
//! holding the same open file would keep the lock, and its owner's leftovers, until it died.
//!
//! The lock file is also the owner's manifest of the cgroup directories it makes box cgroups in
//! ([`record_cgroup_parents`], one absolute path per line, written before the first box cgroup
//! under each): a sweep by a hull placed elsewhere (another `HULL_CGROUP_PARENT`, or none) still
//! finds them, and never drops the lock file of an owner whose cgroups it cannot see.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

use rustix::fs::{FlockOperation, Mode, OFlags};

/// Lock file names: the prefix, the owner's identity, the suffix.
pub(crate) const LOCK_PREFIX: &str = "hull-live-";
pub(crate) const LOCK_SUFFIX: &str = ".lock";

struct Owner {
    id: String,
    /// The locked lock file (None if it could not be made: names are still unique, and a
    /// sweep never judges an owner without a lock file dead).
    lock: Option<OwnedFd>,
    /// The cgroup parents written into the lock file so far.
    recorded: Mutex<Vec<PathBuf>>,
}

/// The most a sweep reads of a lock file's manifest (a few paths in practice).
pub(crate) const MANIFEST_MAX: usize = 64 * 1024;

static OWNER: OnceLock<Owner> = OnceLock::new();

/// The lock's descriptor number, or -1: read by forked children, which must not allocate.
static LOCK_FD: AtomicI32 = AtomicI32::new(-1);

/// This process's owner identity, for names of things a sweep may remove once the process is
/// gone. The first call creates and locks the lock file in the temporary directory.
pub fn id() -> &'static str {
    &OWNER.get_or_init(make).id
}

/// Writes into this process's lock file each of `parents` it does not list yet, so that a sweep
/// after our death removes the box cgroups we make there whatever its own cgroup placement.
/// Called before a box cgroup is created under them; a write that fails leaves the directory to
/// sweeps placed like us (the ones that scan it anyway).
pub(crate) fn record_cgroup_parents(parents: &[PathBuf]) {
    let owner = OWNER.get_or_init(make);
    let Some(lock) = &owner.lock else { return };
    let mut recorded = owner
        .recorded
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for parent in parents {
        if recorded.contains(parent) {
            continue;
        }
        let Some(line) = manifest_line(parent) else {
            continue;
        };
        // Appended at the file offset, which only this process moves (children close the fd).
        if rustix::io::write(lock, line.as_bytes()).is_ok_and(|n| n == line.len()) {
            recorded.push(parent.clone());
        }
    }
}

/// The manifest line for `parent`: an absolute UTF-8 path without newlines or `..`.
fn manifest_line(parent: &Path) -> Option<String> {
    let text = parent.to_str()?;
    (parent.is_absolute() && !text.contains('\n') && !has_dot_dot(parent))
        .then(|| format!("{text}\n"))
}

fn has_dot_dot(p: &Path) -> bool {
    p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// The cgroup parents a lock file lists (see [`record_cgroup_parents`]); lines that are not an
/// absolute path without `..` are ignored.
pub(crate) fn manifest_parents(text: &str) -> Vec<PathBuf> {
    text.lines()
        .map(Path::new)
        .filter(|p| p.is_absolute() && !has_dot_dot(p))
        .map(Path::to_path_buf)
        .collect()
}

/// The descriptor of this process's lock, -1 if it has none: a forked child closes it before
/// anything else (it shares the open file, so it would hold the lock while it lives).
pub(crate) fn lock_fd() -> RawFd {
    LOCK_FD.load(Ordering::Relaxed)
}

/// The lock file of owner `id` in `dir`.
pub(crate) fn lock_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{LOCK_PREFIX}{id}{LOCK_SUFFIX}"))
}

/// Whether `id` has the shape [`id`] gives (`<pid>.<16 hex digits>`).
pub(crate) fn is_id(id: &str) -> bool {
    id.split_once('.').is_some_and(|(pid, token)| {
        !pid.is_empty()
            && pid.bytes().all(|b| b.is_ascii_digit())
            && token.len() == 16
            && token.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

fn make() -> Owner {
    let pid = crate::sys::getpid();
    let dir = std::env::temp_dir();
    let fresh = || format!("{pid}.{:016x}", random());
    // A collision or a sweep that took the new file before we locked it: try another identity.
    for _ in 0..8 {
        let id = fresh();
        match take(&dir, &id) {
            Ok(Some(fd)) => {
                LOCK_FD.store(fd.as_raw_fd(), Ordering::Relaxed);
                return Owner {
                    id,
                    lock: Some(fd),
                    recorded: Mutex::new(Vec::new()),
                };
            }
            Ok(None) => continue,
            Err(_) => break,
        }
    }
    Owner {
        id: fresh(),
        lock: None,
        recorded: Mutex::new(Vec::new()),
    }
}

/// Creates and locks the lock file of `id` in `dir`; None when it must be tried again under
/// another identity.
fn take(dir: &Path, id: &str) -> std::io::Result<Option<OwnedFd>> {
    let path = lock_path(dir, id);
    let fd = match rustix::fs::open(
        &path,
        OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::EXIST) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    // A sweep may have locked the file between our create and our lock, judged its owner dead
    // and unlinked it: the lock is only ours if the name still leads to our file.
    let st = rustix::fs::fstat(&fd)?;
    #[allow(clippy::useless_conversion)]
    let (dev, ino) = (u64::from(st.st_dev), u64::from(st.st_ino));
    let ours = std::fs::symlink_metadata(&path).is_ok_and(|m| m.ino() == ino && m.dev() == dev);
    Ok(ours.then_some(fd))
}

/// 64 random bits from the kernel (a weaker mix of the clock and our pid if it has none).
fn random() -> u64 {
    let mut b = [0u8; 8];
    match rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => u64::from_ne_bytes(b),
        _ => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| (d.as_secs() << 30) ^ u64::from(d.subsec_nanos()));
            t ^ (u64::from(crate::sys::getpid().unsigned_abs()) << 40) ^ crate::sys::monotonic_ns()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_checked_and_locks_are_exclusive() {
        assert!(is_id("123.0123456789abcdef"));
        for bad in [
            "123",
            "123.",
            ".0123456789abcdef",
            "12a.0123456789abcdef",
            "1.0123",
        ] {
            assert!(!is_id(bad), "{bad}");
        }
        let dir = tempfile::tempdir().unwrap();
        let fd = take(dir.path(), "1.0123456789abcdef")
            .unwrap()
            .expect("locked");
        // Another open file of the same name cannot take it while we hold it...
        let other = std::fs::File::open(lock_path(dir.path(), "1.0123456789abcdef")).unwrap();
        assert_eq!(
            rustix::fs::flock(&other, FlockOperation::NonBlockingLockExclusive),
            Err(rustix::io::Errno::WOULDBLOCK)
        );
        // ...nor can the name be created twice.
        assert!(take(dir.path(), "1.0123456789abcdef").unwrap().is_none());
        drop(fd);
        assert!(rustix::fs::flock(&other, FlockOperation::NonBlockingLockExclusive).is_ok());
    }
}
