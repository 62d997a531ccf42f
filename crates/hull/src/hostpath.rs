//! Host paths a caller names for snapshot and restore, opened without following any symlink.
//!
//! A snapshot's destination and a restore's source are host paths, but they may lie in a
//! directory a box can write (its own workspace, another sandbox's, a folder mounted into one),
//! where it can plant a symlink to anywhere on the host: the snapshot would then be written
//! into a host directory of the box's choosing, or a host file handed to a sandbox. So these
//! paths are resolved with `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`: a symlink in
//! any component fails the call instead of being followed, and the error names the link. Every
//! symlink is refused, not only those in box-writable directories, because hull cannot know
//! every directory a box can write; a caller whose path runs through a link it trusts gives the
//! resolved path.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags, CWD};

use crate::error::SandboxError;

const RESOLVE: ResolveFlags = ResolveFlags::NO_SYMLINKS.union(ResolveFlags::NO_MAGICLINKS);

/// The refusal for `path`, naming its first symlink component when one can be found.
fn refused(path: &Path, e: rustix::io::Errno, what: &str) -> SandboxError {
    if e == rustix::io::Errno::LOOP {
        let link = path
            .ancestors()
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .filter(|p| !p.as_os_str().is_empty())
            .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()));
        let at = link.map_or_else(String::new, |l| format!(" ({} is one)", l.display()));
        return SandboxError::path(
            &path.display().to_string(),
            format!("passes through a symbolic link{at}; {what} never follows symlinks, since a box can plant them where it writes: give a path without one"),
        );
    }
    SandboxError::Io {
        what: "open",
        path: path.to_path_buf(),
        error: e.into(),
    }
}

/// Opens an existing regular file for reading (a restore's source), no symlink followed, a
/// FIFO never waited for.
pub fn open_file(path: &Path, what: &str) -> Result<File, SandboxError> {
    let fd = rustix::fs::openat2(
        CWD,
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK,
        Mode::empty(),
        RESOLVE,
    )
    .map_err(|e| refused(path, e, what))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| SandboxError::Io {
        what: "stat",
        path: path.to_path_buf(),
        error: e.into(),
    })?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(SandboxError::path(
            &path.display().to_string(),
            "is not a regular file; give the path of a .tar.gz",
        ));
    }
    // O_NONBLOCK kept the open from waiting on a FIFO; it does nothing to a regular file.
    Ok(File::from(fd))
}

/// A directory to create a file in (a snapshot's destination): its descriptor, opened with no
/// symlink followed, and the file's name in it.
pub struct Parent {
    pub dir: OwnedFd,
    pub name: OsString,
    /// The directory's path as given, for messages.
    pub path: PathBuf,
}

/// Opens the parent directory of `path` (a file to be created or replaced), no symlink followed.
pub fn open_parent(path: &Path, what: &str) -> Result<Parent, SandboxError> {
    let name = match path.file_name() {
        Some(n) if !path.as_os_str().as_bytes().ends_with(b"/") => n.to_os_string(),
        _ => {
            return Err(SandboxError::path(
                &path.display().to_string(),
                "names no file; give the path of the .tar.gz to write",
            ))
        }
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = rustix::fs::openat2(
        CWD,
        &parent,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    )
    .map_err(|e| refused(path, e, what))?;
    Ok(Parent {
        dir,
        name,
        path: parent,
    })
}

/// A name no one can predict for a file or directory hull creates exclusively (`O_EXCL`,
/// `mkdirat`): `PREFIX<pid>-<random>`.
pub(crate) fn fresh_name(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{prefix}{}-{:016x}", std::process::id(), h.finish())
}
