//! `--subids`: a box whose user namespace maps ids 1-65536 (at most) to the caller's range in
//! `/etc/subuid` and `/etc/subgid`, besides its root to the caller, so a program inside can own
//! files as other users (package managers, `chown`). Only the setuid helpers `newuidmap` and
//! `newgidmap` (package uidmap) may write such maps for an unprivileged caller; hull runs them on
//! the box's first process, which waits for them (`Step::AwaitIdMaps`), and uses them as root
//! too (root gets no range without an entry of its own).
//!
//! Files such a box gives to its sub-ids belong to ids of the caller's range on the host, which
//! the caller cannot remove as itself (a directory of another uid, a sticky one). A temporary
//! workspace holding them is removed by [`remove_tree_mapped`]: `rm -rf` run as root of a user
//! namespace mapped the same way, where those ids are the caller's to remove.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

use crate::error::{BoxError, SubIdsError};
use crate::sys;

/// Ids mapped inside besides root: 1..=MAX_IDS.
const MAX_IDS: u32 = 65536;

/// One id map: root inside to `own` outside, 1.. inside to `start`.. outside (`count` ids).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct IdRange {
    pub own: u32,
    pub start: u32,
    pub count: u32,
}

impl IdRange {
    /// The helper's arguments after the pid: `0 own 1 1 start count`.
    fn args(&self) -> [String; 6] {
        [
            "0".into(),
            self.own.to_string(),
            "1".into(),
            "1".into(),
            self.start.to_string(),
            self.count.to_string(),
        ]
    }
}

/// The first range `file` (the text of /etc/subuid or /etc/subgid) grants to `name` or `id`,
/// at most MAX_IDS long.
pub fn find(file: &str, name: &str, id: u32) -> Option<(u32, u32)> {
    file.lines().find_map(|l| {
        let mut f = l.trim().split(':');
        let (who, start, count) = (
            f.next()?,
            f.next()?.parse::<u32>().ok()?,
            f.next()?.parse::<u32>().ok()?,
        );
        (f.next().is_none() && (who == name || who == id.to_string()) && count > 0)
            .then_some((start, count.min(MAX_IDS)))
    })
}

/// The caller's uid and gid ranges, or an error naming the file and the fix.
pub fn lookup(uid: u32, gid: u32) -> Result<(IdRange, IdRange), BoxError> {
    let name = user_name(uid).unwrap_or_else(|| uid.to_string());
    let one = |path: &'static str, own: u32| -> Result<IdRange, BoxError> {
        let text = std::fs::read_to_string(path).map_err(|source| SubIdsError::Read {
            path,
            name: name.clone(),
            source,
        })?;
        let (start, count) = find(&text, &name, uid).ok_or_else(|| SubIdsError::NoRange {
            path,
            name: name.clone(),
            uid,
        })?;
        Ok(IdRange { own, start, count })
    };
    Ok((one("/etc/subuid", uid)?, one("/etc/subgid", gid)?))
}

/// Writes the maps of process `pid` (waiting in its new user namespace) with the helpers.
pub fn apply(pid: libc::pid_t, uids: &IdRange, gids: &IdRange) -> Result<(), BoxError> {
    for (helper, range) in [("newuidmap", uids), ("newgidmap", gids)] {
        let out = Command::new(helper)
            .arg(pid.to_string())
            .args(range.args())
            .output()
            .map_err(|source| SubIdsError::Spawn { helper, source })?;
        if !out.status.success() {
            return Err(SubIdsError::Helper {
                helper,
                pid,
                args: range.args().join(" "),
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            }
            .into());
        }
    }
    Ok(())
}

/// The programs [`remove_tree_mapped`] runs, in the order tried.
const RM: [&CStr; 2] = [c"/usr/bin/rm", c"/bin/rm"];

/// Removes the tree at `path` (a box's temporary workspace) as root of a fresh user namespace
/// that maps root to our uid and gid and 1.. to `uids` and `gids`, as a `--subids` box's does:
/// there every id the box could give a file is mapped, and root's capabilities over mapped ids
/// (`CAP_DAC_OVERRIDE`, `CAP_FOWNER`) remove what we cannot as ourselves. Only the user namespace
/// is new: `rm -rf --one-file-system` sees our mounts, and follows no symlink.
pub fn remove_tree_mapped(path: &Path, uids: &IdRange, gids: &IdRange) -> Result<(), BoxError> {
    let target = CString::new(path.as_os_str().as_bytes()).map_err(|_| BoxError::Sys {
        what: "remove a workspace (its path holds a NUL byte)",
        errno: sys::Errno(libc::EINVAL),
    })?;
    // rm gets no input and, in particular, never writes to our stdout (`hull serve`'s protocol).
    let null = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|error| BoxError::Io {
            what: "open /dev/null".into(),
            error,
        })?;
    let args: [&CStr; 5] = [c"rm", c"-rf", c"--one-file-system", c"--", &target];
    let status = spawn_mapped(&RM, &args, null.as_fd(), null.as_fd(), uids, gids)?.wait()?;
    match status {
        Some(s) if libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0 => Ok(()),
        Some(status) => Err(SubIdsError::Remove {
            path: path.to_path_buf(),
            status,
        }
        .into()),
        None => Ok(()),
    }
}

/// Runs the first of `programs` that executes, with `args` (its argv, `args[0]` its name),
/// `stdin` and `stdout`, as root of a fresh user namespace mapped as [`remove_tree_mapped`]'s.
/// The child is made by hull-box's allocation-free fork; everything it uses is made before; it
/// dies with us (`PDEATHSIG`), and a [`MappedChild`] dropped unwaited is killed and reaped.
pub fn spawn_mapped(
    programs: &[&CStr],
    args: &[&CStr],
    stdin: BorrowedFd<'_>,
    stdout: BorrowedFd<'_>,
    uids: &IdRange,
    gids: &IdRange,
) -> Result<MappedChild, BoxError> {
    let sysf = |what: &'static str| move |errno: sys::Errno| BoxError::Sys { what, errno };
    let argv: Vec<*const libc::c_char> = args
        .iter()
        .map(|a| a.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    let envp = [
        c"PATH=/usr/bin:/bin".as_ptr(),
        c"LC_ALL=C".as_ptr(),
        std::ptr::null(),
    ];
    // The child waits on this pipe until its maps are written.
    let (go_r, go_w) = sys::pipe().map_err(sysf("create the mapped child's pipe"))?;
    let parent = sys::getpid();
    let child = sys::child::Remover {
        parent,
        maps_pipe: (go_r.as_raw_fd(), go_w.as_raw_fd()),
        stdin: stdin.as_raw_fd(),
        stdout: stdout.as_raw_fd(),
        argv: &argv,
        envp: &envp,
        programs,
    };
    let pid = sys::child::fork_remover(&child).map_err(sysf("start a mapped child"))?;
    drop(go_r);
    let mapped = apply(pid, uids, gids);
    if mapped.is_ok() {
        let _ = sys::write_all(go_w.as_fd(), b"g");
    } else {
        let _ = sys::kill(pid, libc::SIGKILL);
    }
    drop(go_w);
    let child = MappedChild { pid: Some(pid) };
    mapped?;
    Ok(child)
}

/// A child of [`spawn_mapped`].
#[derive(Debug)]
pub struct MappedChild {
    pid: Option<libc::pid_t>,
}

impl MappedChild {
    /// Waits for it: its wait status (None if it was not ours to wait for).
    pub fn wait(mut self) -> Result<Option<i32>, BoxError> {
        let Some(pid) = self.pid.take() else {
            return Ok(None);
        };
        let waited = sys::wait4(pid, false).map_err(|errno| BoxError::Sys {
            what: "wait for a mapped child",
            errno,
        })?;
        Ok(waited.map(|w| w.status))
    }
}

impl Drop for MappedChild {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = sys::kill(pid, libc::SIGKILL);
            let _ = sys::wait4(pid, false);
        }
    }
}

fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let _ = f.next()?;
        (f.next()?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_found_by_name_or_uid_and_capped() {
        let file = "alice:100000:65536\n# junk\nbob:x:1\n1001:200000:10\ncarol:300000:1000000\nzero:400000:0\n";
        assert_eq!(find(file, "alice", 1000), Some((100000, 65536)));
        assert_eq!(find(file, "dave", 1001), Some((200000, 10)));
        assert_eq!(find(file, "carol", 5), Some((300000, MAX_IDS)));
        assert_eq!(find(file, "bob", 7), None);
        assert_eq!(find(file, "zero", 8), None);
        assert_eq!(find(file, "nobody", 9), None);
        let r = IdRange {
            own: 1000,
            start: 100000,
            count: 65536,
        };
        assert_eq!(r.args().join(" "), "0 1000 1 1 100000 65536");
    }
}
