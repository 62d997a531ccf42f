//! A restore's staging directory and the swap of its contents into the workspace, so a restore
//! that fails leaves the workspace as it was.
//!
//! The archive is unpacked into `new/` of a fresh `.hull-restore-<pid>-<random>` directory made
//! inside the workspace (0700; inside it so every move is a `rename` on one file system). Only
//! when every member is in place are the workspace's entries moved into `old/` and `new/`'s
//! moved up, one `renameat` each, by descriptor; a move that fails puts back what was moved.
//! The workspace directory itself is never replaced: boxes that are running (kernels live for
//! hours) have it bound at `/workspace` and see the new contents. An entry a running box makes
//! during the swap is set aside with the old contents rather than mixed into the restore.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::error::SandboxError;
use crate::files::Confined;

/// The staging directory of one restore; removed (with whatever it holds) when dropped.
pub(crate) struct Staging<'a> {
    ws: &'a Confined,
    name: CString,
    dir: Option<OwnedFd>,
    /// Where the archive is unpacked.
    pub new: Confined,
    old: OwnedFd,
    late: OwnedFd,
}

fn io(what: &'static str, ws: &Confined, e: Errno) -> SandboxError {
    SandboxError::Io {
        what,
        path: ws.root().to_path_buf(),
        error: e.into(),
    }
}

fn open_dir(at: &OwnedFd, name: &CStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        at,
        name,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn make_dir(at: &OwnedFd, name: &CStr, mode: u32) -> Result<OwnedFd, Errno> {
    rustix::fs::mkdirat(at, name, Mode::from_raw_mode(mode))?;
    open_dir(at, name)
}

/// The names in a directory, `.` and `..` left out.
fn names(dir: &OwnedFd) -> Result<Vec<CString>, Errno> {
    let mut out = Vec::new();
    for ent in rustix::fs::Dir::read_from(dir)? {
        let ent = ent?;
        let n = ent.file_name();
        if n.to_bytes() != b"." && n.to_bytes() != b".." {
            out.push(n.to_owned());
        }
    }
    Ok(out)
}

/// Gives us write permission on the directory `name` (moving a directory to another parent
/// rewrites its `..`, which needs it; a box may have made one read-only). Changed through an
/// `O_PATH` descriptor, so a name swapped for a symlink meanwhile is never followed. Returns
/// whether it changed anything.
fn make_movable(at: &OwnedFd, name: &CStr) -> bool {
    let Ok(p) = rustix::fs::openat(
        at,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let Ok(st) = rustix::fs::fstat(&p) else {
        return false;
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory {
        return false;
    }
    let mode = Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700);
    rustix::fs::chmod(format!("/proc/self/fd/{}", p.as_raw_fd()), mode).is_ok()
}

/// `renameat2(RENAME_NOREPLACE)`, or a plain `renameat` where the file system lacks the flag.
fn move_new(from: &OwnedFd, name: &CStr, to: &OwnedFd) -> Result<(), Errno> {
    match rustix::fs::renameat_with(from, name, to, name, RenameFlags::NOREPLACE) {
        Err(Errno::INVAL) => rustix::fs::renameat(from, name, to, name),
        r => r,
    }
}

impl<'a> Staging<'a> {
    /// Makes the staging directory in `ws`, with `new/`, `old/` and `late/` in it.
    pub(crate) fn create(ws: &'a Confined) -> Result<Staging<'a>, SandboxError> {
        let (name, dir) = loop {
            let Ok(name) = CString::new(crate::hostpath::fresh_name(".hull-restore-")) else {
                continue;
            };
            match make_dir(ws.fd(), &name, 0o700) {
                Ok(d) => break (name, d),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(io("make a staging directory in", ws, e)),
            }
        };
        let subs = (|| {
            Ok::<_, Errno>((
                make_dir(&dir, c"new", 0o755)?,
                make_dir(&dir, c"old", 0o700)?,
                make_dir(&dir, c"late", 0o700)?,
            ))
        })();
        match subs {
            Ok((new, old, late)) => {
                let root = ws.root().join(name.to_string_lossy().as_ref()).join("new");
                Ok(Staging {
                    ws,
                    name,
                    dir: Some(dir),
                    new: Confined::from_fd(new, root).owned_as(ws),
                    old,
                    late,
                })
            }
            Err(e) => {
                let _ = hull_box::leftovers::empty_dir(dir);
                let _ = rustix::fs::unlinkat(ws.fd(), &name, AtFlags::REMOVEDIR);
                Err(io("make a staging directory in", ws, e))
            }
        }
    }

    /// Moves the workspace's entries out and the staged ones in; on failure, puts back what was
    /// moved. Either way the staging directory (with the old contents) is removed.
    pub(crate) fn swap(self) -> Result<(), SandboxError> {
        let ws = self.ws.fd();
        let olds = names(ws).map_err(|e| io("list", self.ws, e))?;
        let mut moved_old = Vec::new();
        for n in olds.iter().filter(|n| **n != self.name) {
            let mut result = rustix::fs::renameat(ws, n, &self.old, n);
            if result == Err(Errno::ACCESS) && make_movable(ws, n) {
                result = rustix::fs::renameat(ws, n, &self.old, n);
            }
            match result {
                Ok(()) => moved_old.push(n.as_c_str()),
                Err(Errno::NOENT) => {}
                Err(e) => {
                    self.put_back(&moved_old);
                    return Err(io("move the old contents out of", self.ws, e));
                }
            }
        }
        let news = names(self.new.fd()).map_err(|e| io("list", self.ws, e))?;
        let mut moved_new = Vec::new();
        let mut late = 0u32;
        for n in &news {
            let mut result = move_new(self.new.fd(), n, ws);
            // A running box made this name since the old contents went: set its entry aside.
            while matches!(result, Err(Errno::EXIST | Errno::NOTEMPTY))
                && late < 64
                && *n != self.name
            {
                late += 1;
                let aside = CString::new(late.to_string()).unwrap_or_default();
                if rustix::fs::renameat(ws, n, &self.late, &aside).is_err() {
                    break;
                }
                result = move_new(self.new.fd(), n, ws);
            }
            if let Err(e) = result {
                for m in &moved_new {
                    let _ = rustix::fs::renameat(ws, *m, self.new.fd(), *m);
                }
                self.put_back(&moved_old);
                return Err(io("move the restored contents into", self.ws, e));
            }
            moved_new.push(n.as_c_str());
        }
        Ok(())
    }

    /// Moves entries back from `old/` into the workspace (after a failed swap).
    fn put_back(&self, moved: &[&CStr]) {
        for n in moved {
            let _ = rustix::fs::renameat(&self.old, *n, self.ws.fd(), *n);
        }
    }
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            let _ = hull_box::leftovers::empty_dir(dir);
            let _ = rustix::fs::unlinkat(self.ws.fd(), &self.name, AtFlags::REMOVEDIR);
        }
    }
}
