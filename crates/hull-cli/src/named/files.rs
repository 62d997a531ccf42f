//! File operations on a running sandbox, done by its keeper (`Request::File`): read, write,
//! stat, list, delete. Every path is resolved beneath the box's root directory (an `O_PATH`
//! descriptor of pid 1's `/`, in the box's mount namespace, see `Resident::root_dir`) with
//! `openat2` and `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`: `..` and absolute symlinks stop at
//! the box's root, as they would for a process in the box, so no symlink leads to a host file;
//! the last component of a delete or a stat is never followed. Nothing runs in the box, so an
//! image without `sh` or coreutils is served the same. `/proc` and `/sys` are refused (the
//! keeper's privileges are not the box's there), and only regular files are read or written
//! (never a device or a FIFO).
//!
//! Ownership: files and directories are made as the sandbox's user ([`owner_of_written_files`]).
//! The keeper's thread takes that user's host ids as its file-system ids for the operation
//! (host root: the box's ids are hull's range; rootless: the box's root is the caller, whose
//! ids the keeper has already).

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One file operation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "do", rename_all = "snake_case")]
pub enum FileOp {
    /// The file's bytes (at most `max_bytes`; lines `start_line..=end_line`, from 1, when
    /// given) as STDOUT frames, then `{size}`.
    Read {
        path: String,
        max_bytes: Option<u64>,
        start_line: Option<u64>,
        end_line: Option<u64>,
    },
    /// The client's STDIN frames, to their end, become the file (parents made, an existing
    /// file overwritten); `{bytes}`.
    Write {
        path: String,
    },
    Stat {
        path: String,
    },
    List {
        path: String,
    },
    Delete {
        path: String,
    },
}

/// A typed failure: `kind` as `hull serve` reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FileError {
    pub kind: &'static str,
    pub message: String,
}

fn fail(kind: &'static str, message: impl Into<String>) -> FileError {
    FileError {
        kind,
        message: message.into(),
    }
}

fn io(path: &str, what: &str, e: rustix::io::Errno) -> FileError {
    fail("io", format!("{path}: {what}: {}", std::io::Error::from(e)))
}

/// The ids (inside the box) a file operation runs as, and so owns what it writes: the
/// sandbox's `--user` (resolved in its `/etc/passwd` at start), else root.
pub fn owner_of_written_files(user: Option<&super::users::User>) -> (u32, u32) {
    user.map_or((0, 0), |u| (u.uid, u.gid))
}

/// An operation's outcome as the keeper's `RESULT` frame carries it.
pub fn answer(r: Result<Value, FileError>) -> Value {
    match r {
        Ok(v) => json!({ "ok": v }),
        Err(e) => json!({ "error": { "kind": e.kind, "message": e.message } }),
    }
}

/// A refusal as the keeper's `RESULT` frame carries it.
pub fn refused(kind: &'static str, message: impl Into<String>) -> Value {
    answer(Err(fail(kind, message)))
}

/// How an operation takes its owner's ids.
#[derive(Debug)]
enum Ids {
    /// Host root: the owner's host ids, through the box's id maps (`uid_map`, `gid_map` text).
    Maps(String, String),
    /// In the box's user namespace (`hull __files`): the owner's ids as they are.
    Namespace,
    /// Rootless, in the keeper: its own ids are the box root's, and it can take no other (a
    /// user's ids are sub-ids): an owner other than root goes through `hull __files`.
    Own,
}

/// What the keeper needs for file operations.
#[derive(Debug)]
pub struct Files {
    root: OwnedFd,
    /// Relative paths are below it (the sandbox's working directory).
    cwd: String,
    ids: Ids,
}

/// The host id an id inside the box maps to, from a `/proc/PID/{uid,gid}_map` text.
fn map_out(map: &str, id: u32) -> Option<u32> {
    map.lines().find_map(|l| {
        let f: Vec<u32> = l
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        match f[..] {
            [inside, outside, count] if id >= inside && id - inside < count => {
                Some(outside + (id - inside))
            }
            _ => None,
        }
    })
}

impl Files {
    /// `pid1` is the box's pid 1 as the keeper sees it (its id maps are the box's). As host
    /// root, a user whose host ids cannot be found (or are host root's) is refused: the keeper
    /// never touches a sandbox's files with its own privileges.
    pub fn new(root: OwnedFd, cwd: String, pid1: i32) -> Result<Files, String> {
        let ids = if rustix::process::geteuid().is_root() {
            let map = |f: &str| {
                std::fs::read_to_string(format!("/proc/{pid1}/{f}"))
                    .map_err(|e| format!("read the box's {f}: {e}"))
            };
            Ids::Maps(map("uid_map")?, map("gid_map")?)
        } else {
            Ids::Own
        };
        let files = Files { root, cwd, ids };
        files.fs_ids((0, 0))?;
        Ok(files)
    }

    /// Files of a box whose user namespace this process has joined (`hull __files`).
    pub fn in_namespace(root: OwnedFd, cwd: String) -> Files {
        Files {
            root,
            cwd,
            ids: Ids::Namespace,
        }
    }

    /// The box's root directory (an `O_PATH` descriptor) and the working directory.
    pub fn root(&self) -> (BorrowedFd<'_>, &str) {
        (self.root.as_fd(), &self.cwd)
    }

    /// Whether an operation as `owner` must run in the box's user namespace (`hull __files`)
    /// rather than in this process.
    pub fn needs_namespace(&self, owner: (u32, u32)) -> bool {
        matches!(self.ids, Ids::Own) && owner != (0, 0)
    }

    /// The fs ids to take for `owner`, None for this process's own. As host root a user
    /// whose host ids cannot be found (or are host root's) is refused: the keeper never
    /// touches a sandbox's files with its own privileges.
    fn fs_ids(&self, owner: (u32, u32)) -> Result<Option<(u32, u32)>, String> {
        match &self.ids {
            Ids::Maps(u, g) => map_out(u, owner.0)
                .zip(map_out(g, owner.1))
                .filter(|&(u, g)| u != 0 && g != 0)
                .map(Some)
                .ok_or_else(|| {
                    format!(
                        "the sandbox user {}:{} has no host ids other than root's in the box's id maps",
                        owner.0, owner.1
                    )
                }),
            Ids::Namespace => Ok(Some(owner)),
            Ids::Own if owner == (0, 0) => Ok(None),
            Ids::Own => Err(format!(
                "the sandbox user {}:{} is not the keeper's own ids (run it through hull __files)",
                owner.0, owner.1
            )),
        }
    }

    /// Runs one operation as `owner` (ids inside the box: its permissions, and what it makes
    /// is its): `out` gets a read's bytes, `input` is a write's data.
    pub fn run(
        &self,
        op: &FileOp,
        owner: (u32, u32),
        out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
        input: &mut dyn Read,
    ) -> Result<Value, FileError> {
        let fs = self.fs_ids(owner).map_err(|e| fail("sandbox_error", e))?;
        let _ids = fs
            .map(|(u, g)| crate::sys::FsIds::set(u, g))
            .transpose()
            .map_err(|e| fail("sandbox_error", e.to_string()))?;
        match op {
            FileOp::Read {
                path,
                max_bytes,
                start_line,
                end_line,
            } => self.read(path, *max_bytes, (*start_line, *end_line), out),
            FileOp::Write { path } => self.write(path, input),
            FileOp::Stat { path } => self.stat(path),
            FileOp::List { path } => self.list(path),
            FileOp::Delete { path } => self.delete(path),
        }
    }

    /// The path relative to the root (a relative one below the working directory), its
    /// components without `.` or empty ones.
    fn parts(&self, path: &str) -> Result<Vec<String>, FileError> {
        if path.is_empty() || path.contains('\0') {
            return Err(fail(
                "invalid_argument",
                "path: empty or with a NUL byte; give a path in the sandbox",
            ));
        }
        let full = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{path}", self.cwd)
        };
        Ok(full
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_string)
            .collect())
    }

    fn open(&self, rel: &str, flags: OFlags, mode: Mode) -> rustix::io::Result<OwnedFd> {
        let rel = if rel.is_empty() { "." } else { rel };
        // openat2 refuses flags that mean nothing with O_PATH.
        let extra = if flags.contains(OFlags::PATH) {
            OFlags::CLOEXEC
        } else {
            OFlags::CLOEXEC | OFlags::NOCTTY
        };
        rustix::fs::openat2(
            &self.root,
            rel,
            flags | extra,
            mode,
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        )
    }

    /// Refuses what is not the box's own disk: /proc and /sys.
    fn not_kernel(path: &str, fd: &OwnedFd) -> Result<(), FileError> {
        let fs = rustix::fs::fstatfs(fd).map_err(|e| io(path, "statfs", e))?;
        let t = fs.f_type;
        #[allow(clippy::unnecessary_cast, clippy::cast_possible_wrap)]
        if t as i64 == rustix::fs::PROC_SUPER_MAGIC as i64 || t as i64 == 0x6265_6572 {
            return Err(fail(
                "not_a_file",
                format!("{path}: /proc and /sys are not served by file operations; use exec"),
            ));
        }
        Ok(())
    }

    fn read(
        &self,
        path: &str,
        max: Option<u64>,
        lines: (Option<u64>, Option<u64>),
        out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<Value, FileError> {
        let rel = self.parts(path)?.join("/");
        let fd = match self.open(&rel, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Ok(Value::Null),
            Err(e) => return Err(io(path, "open", e)),
        };
        Self::not_kernel(path, &fd)?;
        regular(path, &fd)?;
        let mut f = std::fs::File::from(fd);
        let max = max.unwrap_or(u64::MAX);
        let mut sent = 0u64;
        let mut buf = vec![0u8; 64 << 10];
        let (first, last) = (lines.0.unwrap_or(1).max(1), lines.1.unwrap_or(u64::MAX));
        let by_lines = lines.0.is_some() || lines.1.is_some();
        let mut line = 1u64;
        let sink = |data: &[u8], out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>| {
            out(data).map_err(|e| fail("io", format!("{path}: send: {e}")))
        };
        while sent < max && line <= last {
            let n = match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => return Err(fail("io", format!("{path}: read: {e}"))),
            };
            let mut chunk = &buf[..n];
            if by_lines {
                // Only the bytes of lines first..=last.
                let mut keep = Vec::new();
                while !chunk.is_empty() && line <= last {
                    let end = chunk
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(chunk.len(), |i| i + 1);
                    if line >= first {
                        keep.extend_from_slice(&chunk[..end]);
                    }
                    if chunk[end - 1] == b'\n' {
                        line += 1;
                    }
                    chunk = &chunk[end..];
                }
                let take = usize::try_from((max - sent).min(keep.len() as u64)).unwrap_or(0);
                sink(&keep[..take], out)?;
                sent += take as u64;
            } else {
                let take = usize::try_from((max - sent).min(n as u64)).unwrap_or(0);
                sink(&chunk[..take], out)?;
                sent += take as u64;
            }
        }
        Ok(json!({ "size": sent }))
    }

    /// Makes every directory of `parts` that is missing (as `mkdir -p`), each resolved from
    /// the root again.
    fn make_parents(&self, path: &str, parts: &[String]) -> Result<(), FileError> {
        for i in 0..parts.len() {
            let prefix = parts[..=i].join("/");
            match self.open(&prefix, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()) {
                Ok(_) => continue,
                Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(io(path, &format!("open {prefix}"), e)),
            }
            let parent = self
                .open(
                    &parts[..i].join("/"),
                    OFlags::PATH | OFlags::DIRECTORY,
                    Mode::empty(),
                )
                .map_err(|e| io(path, "open the parent", e))?;
            match rustix::fs::mkdirat(&parent, parts[i].as_str(), Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(io(path, &format!("make {prefix}"), e)),
            }
        }
        Ok(())
    }

    fn write(&self, path: &str, input: &mut dyn Read) -> Result<Value, FileError> {
        let parts = self.parts(path)?;
        let Some(last) = parts.last() else {
            return Err(fail("is_a_directory", format!("{path} is a directory")));
        };
        if last == ".." {
            return Err(fail(
                "invalid_argument",
                format!("path: `{path}` ends in `..`; name the file"),
            ));
        }
        let rel = parts.join("/");
        if let Ok(fd) = self.open(&rel, OFlags::PATH, Mode::empty()) {
            regular(path, &fd)?;
        }
        self.make_parents(path, &parts[..parts.len() - 1])?;
        let fd = self
            .open(
                &rel,
                OFlags::WRONLY | OFlags::CREATE | OFlags::NONBLOCK,
                Mode::from_raw_mode(0o644),
            )
            .map_err(|e| io(path, "open", e))?;
        Self::not_kernel(path, &fd)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| io(path, "stat", e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(fail("not_a_file", format!("{path} is not a regular file")));
        }
        rustix::fs::ftruncate(&fd, 0).map_err(|e| io(path, "truncate", e))?;
        let mut f = std::fs::File::from(fd);
        let n =
            std::io::copy(input, &mut f).map_err(|e| fail("io", format!("{path}: write: {e}")))?;
        f.flush()
            .map_err(|e| fail("io", format!("{path}: write: {e}")))?;
        Ok(json!({ "bytes": n }))
    }

    fn stat(&self, path: &str) -> Result<Value, FileError> {
        let rel = self.parts(path)?.join("/");
        let fd = match self.open(&rel, OFlags::PATH | OFlags::NOFOLLOW, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Ok(Value::Null),
            Err(e) => return Err(io(path, "open", e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| io(path, "stat", e))?;
        Ok(json!({
            "type": kind(st.st_mode),
            "size": st.st_size,
            "mtime_s": st.st_mtime,
            "mode": st.st_mode & 0o7777,
        }))
    }

    fn list(&self, path: &str) -> Result<Value, FileError> {
        let rel = self.parts(path)?.join("/");
        let fd = match self.open(&rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(Value::Null),
            Err(rustix::io::Errno::NOTDIR) => {
                return match self.open(&rel, OFlags::PATH, Mode::empty()) {
                    Ok(_) => Err(fail(
                        "not_a_directory",
                        format!("{path} is not a directory"),
                    )),
                    Err(_) => Ok(Value::Null),
                }
            }
            Err(e) => return Err(io(path, "open", e)),
        };
        Self::not_kernel(path, &fd)?;
        let dir = rustix::fs::Dir::read_from(&fd).map_err(|e| io(path, "read", e))?;
        let mut entries = Vec::new();
        for e in dir {
            let e = e.map_err(|e| io(path, "read", e))?;
            let name = e.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let Ok(st) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            entries.push(json!({
                "name": name.to_string_lossy(),
                "type": kind(st.st_mode),
                "size": st.st_size,
                "mtime_s": st.st_mtime,
            }));
        }
        Ok(json!({ "entries": entries }))
    }

    fn delete(&self, path: &str) -> Result<Value, FileError> {
        let parts = self.parts(path)?;
        let Some(last) = parts.last() else {
            return Err(fail(
                "invalid_argument",
                "path: the sandbox's root cannot be deleted",
            ));
        };
        if last == ".." {
            return Err(fail(
                "invalid_argument",
                format!("path: `{path}` ends in `..`; name what to delete"),
            ));
        }
        let parent = match self.open(
            &parts[..parts.len() - 1].join("/"),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => {
                return Ok(json!({ "deleted": false }))
            }
            Err(e) => return Err(io(path, "open the parent", e)),
        };
        Self::not_kernel(path, &parent)?;
        let st = match rustix::fs::statat(&parent, last.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(json!({ "deleted": false })),
            Err(e) => return Err(io(path, "stat", e)),
        };
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            let name = std::ffi::CString::new(last.as_str())
                .map_err(|_| fail("invalid_argument", "path: a NUL byte"))?;
            remove_tree(&parent, &name).map_err(|e| io(path, "remove", e))?;
        } else {
            rustix::fs::unlinkat(&parent, last.as_str(), AtFlags::empty())
                .map_err(|e| io(path, "remove", e))?;
        }
        Ok(json!({ "deleted": true }))
    }
}

/// Removes directory `name` of `parent` and everything in it, never following a symlink
/// (each level is opened with `O_NOFOLLOW` relative to the one above).
/// Only a regular file is read or written: a directory and anything else are typed errors.
fn regular(path: &str, fd: &OwnedFd) -> Result<(), FileError> {
    let st = rustix::fs::fstat(fd).map_err(|e| io(path, "stat", e))?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(()),
        FileType::Directory => Err(fail("is_a_directory", format!("{path} is a directory"))),
        _ => Err(fail("not_a_file", format!("{path} is not a regular file"))),
    }
}

fn remove_tree(parent: &impl AsFd, name: &std::ffi::CStr) -> rustix::io::Result<()> {
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let names: Vec<(std::ffi::CString, bool)> = rustix::fs::Dir::read_from(&fd)?
        .filter_map(Result::ok)
        .filter(|e| e.file_name() != c"." && e.file_name() != c"..")
        .map(|e| {
            let dir = e.file_type() == FileType::Directory;
            (e.file_name().to_owned(), dir)
        })
        .collect();
    for (n, dir) in names {
        let is_dir = dir
            || rustix::fs::statat(&fd, n.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
        if is_dir {
            remove_tree(&fd, &n)?;
        } else {
            rustix::fs::unlinkat(&fd, n.as_c_str(), AtFlags::empty())?;
        }
    }
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)
}

fn kind(mode: u32) -> &'static str {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_out_through_an_id_map() {
        let map = "         0     100000      65536\n";
        assert_eq!(map_out(map, 0), Some(100_000));
        assert_eq!(map_out(map, 1000), Some(101_000));
        assert_eq!(map_out(map, 65536), None);
    }
}
