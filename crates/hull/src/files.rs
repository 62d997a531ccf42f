//! File operations confined to a sandbox's workspace, done from the host side.
//!
//! The workspace is shared with code nobody has read, which can plant symlinks, FIFOs and
//! device-looking names in it at any moment. So every path is resolved from a descriptor of the
//! workspace with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`: a
//! symlink anywhere in the path (the last component too) fails the call instead of being
//! followed, and `..` cannot climb out. Files are opened `O_NONBLOCK` and checked with `fstat`
//! before any byte moves, so a FIFO or a device is refused and never blocks the server.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use serde::Serialize;

use crate::error::SandboxError;

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// The most entries a listing or a change scan walks; past it the walk stops (and says so).
pub const MAX_ENTRIES: usize = 100_000;
/// The most path bytes a listing or a change scan holds (paths under deep trees are long, so
/// the entry cap alone would allow gigabytes); past it the walk stops (and says so).
pub const MAX_PATH_BYTES: usize = 16 << 20;
/// How many levels below its start a listing or change scan descends; directories deeper than
/// this are listed but not entered (and the walk says it is incomplete).
pub const MAX_DEPTH: usize = 256;

/// A workspace directory, held open so later renames of its path do not redirect us.
#[derive(Debug)]
pub struct Confined {
    dir: OwnedFd,
    root: PathBuf,
    /// Held by snapshot and restore: a restore stages inside the workspace and then moves every
    /// entry, which another snapshot or restore must not see half done.
    archive: std::sync::Mutex<()>,
    /// As host root, the workspace's owner when that is not host root (a directory given to
    /// hull's range for a VM, or a user's): what the host's writes are given, so the program,
    /// whose root is that owner, can change them as its own.
    owner: Option<(u32, u32)>,
}

/// One entry of a listing.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the workspace, `/`-separated.
    pub path: String,
    /// `file`, `dir`, `symlink`, `fifo`, `socket`, `char_device`, `block_device`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub size: u64,
    pub mtime_ns: i128,
    /// The path's bytes when a name in it is not UTF-8 (`path` then shows U+FFFD for the bad
    /// bytes, so two such names can look alike): serialized as `path_b64` (base64), which the
    /// file operations take back; change tracking compares these.
    #[serde(
        rename = "path_b64",
        skip_serializing_if = "Option::is_none",
        serialize_with = "base64_bytes"
    )]
    raw: Option<Vec<u8>>,
}

fn base64_bytes<S: serde::Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    use base64::Engine;
    match v {
        Some(b) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b)),
        None => s.serialize_none(),
    }
}

impl Entry {
    /// The path's bytes: distinct for distinct names, UTF-8 or not.
    pub fn path_bytes(&self) -> &[u8] {
        self.raw.as_deref().unwrap_or(self.path.as_bytes())
    }
}

fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "char_device",
        FileType::BlockDevice => "block_device",
        FileType::Unknown => "unknown",
    }
}

/// Normalises a caller's path to a relative one: `x/y`, `/workspace/x/y` and `./x` are accepted;
/// other absolute paths, `..`, empty components and NUL are refused, naming the path.
pub fn relative(path: &str) -> Result<String, SandboxError> {
    relative_bytes(path.as_bytes()).map(|r| String::from_utf8_lossy(&r).into_owned())
}

/// [`relative`] for a path given as bytes (names that are not UTF-8, e.g. from `path_b64`).
pub fn relative_bytes(path: &[u8]) -> Result<Vec<u8>, SandboxError> {
    let shown = String::from_utf8_lossy(path);
    if path.contains(&0) {
        return Err(SandboxError::path(&shown, "contains a NUL byte"));
    }
    let rest: &[u8] = if path == b"/workspace" {
        b""
    } else if let Some(r) = path.strip_prefix(b"/workspace/") {
        r
    } else if path.starts_with(b"/") {
        return Err(SandboxError::path(
            &shown,
            "absolute paths must lie under /workspace (or give a path relative to it)",
        ));
    } else {
        path
    };
    let mut out = Vec::with_capacity(rest.len());
    for c in rest.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                return Err(SandboxError::path(
                    &shown,
                    "`..` is not allowed: paths stay inside the workspace",
                ))
            }
            c => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(c);
            }
        }
    }
    Ok(out)
}

fn io_err(what: &'static str, path: &Path, e: impl Into<std::io::Error>) -> SandboxError {
    SandboxError::Io {
        what,
        path: path.to_path_buf(),
        error: e.into(),
    }
}

/// Explains an `openat2` refusal in the caller's terms.
fn resolve_err(rel: &[u8], e: rustix::io::Errno) -> SandboxError {
    let rel = &*String::from_utf8_lossy(rel);
    if e == rustix::io::Errno::LOOP {
        SandboxError::path(
            rel,
            "a symlink is in the path; workspace file operations never follow symlinks",
        )
    } else if e == rustix::io::Errno::XDEV {
        SandboxError::path(rel, "the path leaves the workspace")
    } else if e == rustix::io::Errno::NXIO {
        SandboxError::path(
            rel,
            "is a FIFO or socket with no reader; only regular files can be written",
        )
    } else {
        SandboxError::PathFailed {
            path: rel.to_string(),
            error: e.into(),
        }
    }
}

impl Confined {
    /// Opens the workspace directory itself (a path the host chose, so it may be followed).
    pub fn open(root: &Path) -> Result<Confined, SandboxError> {
        let dir = rustix::fs::open(
            root,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open workspace", root, e))?;
        Ok(Confined::from_fd(dir, root.to_path_buf()))
    }

    /// A directory already opened (no-follow) by the caller; `root` is its path, for messages.
    pub(crate) fn from_fd(dir: OwnedFd, root: PathBuf) -> Confined {
        let owner = rustix::process::geteuid()
            .is_root()
            .then(|| rustix::fs::fstat(&dir).ok())
            .flatten()
            .filter(|st| st.st_uid != 0)
            .map(|st| (st.st_uid, st.st_gid));
        Confined {
            dir,
            root,
            archive: std::sync::Mutex::new(()),
            owner,
        }
    }

    /// A directory inside `ws` (a restore's staging) whose files go to `ws`'s owner.
    pub(crate) fn owned_as(mut self, ws: &Confined) -> Confined {
        self.owner = ws.owner;
        self
    }

    /// Gives what the host just made to the workspace's owner (see `owner`): only a file of
    /// host root's with no other link (one hull made, never one a hard link shares with a
    /// file elsewhere, nor another user's).
    fn adopt(&self, fd: &OwnedFd, rel: &[u8]) -> Result<(), SandboxError> {
        let Some((uid, gid)) = self.owner else {
            return Ok(());
        };
        let st = rustix::fs::fstat(fd).map_err(|e| resolve_err(rel, e))?;
        let dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
        if st.st_uid != 0 || (!dir && st.st_nlink != 1) {
            return Ok(());
        }
        rustix::fs::fchown(
            fd,
            Some(rustix::process::Uid::from_raw(uid)),
            Some(rustix::process::Gid::from_raw(gid)),
        )
        .map_err(|e| resolve_err(rel, e))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The workspace directory's descriptor.
    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.dir
    }

    /// One snapshot or restore of this workspace at a time.
    pub(crate) fn archive_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.archive
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn open_rel(&self, rel: &[u8], flags: OFlags, mode: Mode) -> Result<OwnedFd, SandboxError> {
        let p = if rel.is_empty() { &b"."[..] } else { rel };
        rustix::fs::openat2(
            &self.dir,
            p,
            flags | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK,
            mode,
            RESOLVE,
        )
        .map_err(|e| resolve_err(rel, e))
    }

    /// A directory below the workspace (the workspace itself for `""`).
    pub fn open_dir(&self, rel: impl AsRef<[u8]>) -> Result<OwnedFd, SandboxError> {
        self.open_rel(
            rel.as_ref(),
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
    }

    /// Opens a regular file for reading (no-follow, non-blocking, checked with `fstat` before
    /// anything is read). `path` is text or, for names that are not UTF-8, bytes. Returns the
    /// file and its size.
    pub fn open_regular(
        &self,
        path: impl AsRef<[u8]>,
    ) -> Result<(std::fs::File, u64), SandboxError> {
        let path = path.as_ref();
        let rel = relative_bytes(path)?;
        let fd = self.open_rel(&rel, OFlags::RDONLY, Mode::empty())?;
        let st = rustix::fs::fstat(&fd).map_err(|e| io_err("stat", &self.host_path(&rel), e))?;
        let t = FileType::from_raw_mode(st.st_mode);
        if t != FileType::RegularFile {
            return Err(SandboxError::path(
                &String::from_utf8_lossy(path),
                format!(
                    "is a {}, not a regular file; only regular files are read",
                    kind_name(t)
                ),
            ));
        }
        Ok((
            std::fs::File::from(fd),
            u64::try_from(st.st_size).unwrap_or(0),
        ))
    }

    /// Where `rel` is on the host, for messages.
    fn host_path(&self, rel: &[u8]) -> PathBuf {
        use std::os::unix::ffi::OsStrExt;
        self.root.join(std::ffi::OsStr::from_bytes(rel))
    }

    /// Reads at most `max_bytes` of a regular file. Returns the bytes and the file's size.
    pub fn read_file(
        &self,
        path: impl AsRef<[u8]>,
        max_bytes: u64,
    ) -> Result<(Vec<u8>, u64), SandboxError> {
        let path = path.as_ref();
        let (f, size) = self.open_regular(path)?;
        let mut data = Vec::new();
        f.take(max_bytes).read_to_end(&mut data).map_err(|e| {
            io_err(
                "read",
                &self.host_path(&relative_bytes(path).unwrap_or_default()),
                e,
            )
        })?;
        Ok((data, size))
    }

    /// Makes the parent directories of `rel` (each one created with `mkdirat` on a descriptor
    /// opened no-follow) and returns a descriptor of the last, and the last name.
    fn parent_dir<'r>(&self, rel: &'r [u8]) -> Result<(OwnedFd, &'r [u8]), SandboxError> {
        let (parents, name) = match rel.iter().rposition(|b| *b == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (&b""[..], rel),
        };
        let mut dir = self.open_dir("")?;
        for comp in parents.split(|b| *b == b'/').filter(|c| !c.is_empty()) {
            let made = match rustix::fs::mkdirat(&dir, comp, Mode::from_raw_mode(0o755)) {
                Ok(()) => true,
                Err(e) if e == rustix::io::Errno::EXIST => false,
                Err(e) => return Err(resolve_err(rel, e)),
            };
            dir = rustix::fs::openat2(
                &dir,
                comp,
                OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
                RESOLVE,
            )
            .map_err(|e| resolve_err(rel, e))?;
            if made {
                self.adopt(&dir, rel)?;
            }
        }
        Ok((dir, name))
    }

    /// Writes `data` to a regular file, creating it and its parent directories. An existing
    /// symlink, FIFO, device or directory at the path is refused before anything is written.
    /// `path` is text or, for names that are not UTF-8, bytes.
    pub fn write_file(&self, path: impl AsRef<[u8]>, data: &[u8]) -> Result<(), SandboxError> {
        let path = path.as_ref();
        let shown = String::from_utf8_lossy(path);
        let rel = relative_bytes(path)?;
        if rel.is_empty() {
            return Err(SandboxError::path(
                &shown,
                "names the workspace itself; give a file path",
            ));
        }
        let (dir, name) = self.parent_dir(&rel)?;
        let fd = rustix::fs::openat2(
            &dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK,
            Mode::from_raw_mode(0o644),
            RESOLVE,
        )
        .map_err(|e| resolve_err(&rel, e))?;
        let host = self.host_path(&rel);
        let st = rustix::fs::fstat(&fd).map_err(|e| io_err("stat", &host, e))?;
        let t = FileType::from_raw_mode(st.st_mode);
        if t != FileType::RegularFile {
            return Err(SandboxError::path(
                &shown,
                format!(
                    "is a {}, not a regular file; only regular files are written",
                    kind_name(t)
                ),
            ));
        }
        rustix::fs::ftruncate(&fd, 0).map_err(|e| io_err("truncate", &host, e))?;
        self.adopt(&fd, &rel)?;
        let mut f = std::fs::File::from(fd);
        f.write_all(data).map_err(|e| io_err("write", &host, e))?;
        Ok(())
    }

    /// Creates a directory (and its parents) no-follow; an existing directory is fine.
    pub fn make_dir(&self, rel: impl AsRef<[u8]>) -> Result<OwnedFd, SandboxError> {
        let rel = rel.as_ref();
        let (dir, name) = self.parent_dir(rel)?;
        if name.is_empty() {
            return Ok(dir);
        }
        let made = match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
            Ok(()) => true,
            Err(e) if e == rustix::io::Errno::EXIST => false,
            Err(e) => return Err(resolve_err(rel, e)),
        };
        let fd = rustix::fs::openat2(
            &dir,
            name,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            RESOLVE,
        )
        .map_err(|e| resolve_err(rel, e))?;
        if made {
            self.adopt(&fd, rel)?;
        }
        Ok(fd)
    }

    /// Creates a regular file for writing (restore); the name must not exist as anything but a
    /// regular file, which is replaced.
    pub fn create_file(
        &self,
        rel: impl AsRef<[u8]>,
        mode: u32,
    ) -> Result<std::fs::File, SandboxError> {
        let rel = rel.as_ref();
        let (dir, name) = self.parent_dir(rel)?;
        if let Ok(st) = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                rustix::fs::unlinkat(&dir, name, AtFlags::empty())
                    .map_err(|e| resolve_err(rel, e))?;
            }
        }
        let fd = rustix::fs::openat2(
            &dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(mode & 0o777),
            RESOLVE,
        )
        .map_err(|e| resolve_err(rel, e))?;
        self.adopt(&fd, rel)?;
        Ok(std::fs::File::from(fd))
    }

    /// Lists `subdir` (text, or bytes for a name that is not UTF-8) recursively without
    /// following symlinks, shallow entries first per directory.
    pub fn list(&self, subdir: impl AsRef<[u8]>) -> Result<(Vec<Entry>, bool), SandboxError> {
        let rel = relative_bytes(subdir.as_ref())?;
        let dir = self.open_dir(&rel)?;
        let mut out = Vec::new();
        let complete = match std::str::from_utf8(&rel) {
            Ok(shown) => walk(dir, shown, None, &mut out)?,
            Err(_) => walk(dir, &String::from_utf8_lossy(&rel), Some(&rel), &mut out)?,
        };
        Ok((out, complete))
    }

    /// What the workspace holds now, for telling which paths a run changed.
    pub fn scan(&self) -> Result<Snapshot, SandboxError> {
        let (entries, complete) = self.list("")?;
        // Keyed by the path's bytes, so names that differ only in non-UTF-8 bytes stay apart.
        let entries = entries
            .into_iter()
            .filter(|e| e.kind != "dir")
            .map(|mut e| {
                (
                    e.raw
                        .take()
                        .unwrap_or_else(|| std::mem::take(&mut e.path).into_bytes()),
                    e,
                )
            })
            .collect();
        Ok(Snapshot { entries, complete })
    }
}

/// Walks the tree below `root` depth first, each directory's entries (sorted) before its
/// subdirectories' (sorted). Iterative, with one directory open at a time: going back up opens
/// `..` and checks it is the directory we came down from (device and inode), so a directory the
/// box moves during the walk ends the walk (incomplete) instead of leading it elsewhere. Stops,
/// returning false, past [`MAX_ENTRIES`] entries or [`MAX_PATH_BYTES`] path bytes, and does not
/// enter directories [`MAX_DEPTH`] levels down.
/// A subdirectory still to visit: its raw name (non-UTF-8 names open as they are), its shown
/// path and, when that differs from its bytes, its raw path.
type Pending = Vec<(Vec<u8>, String, Option<Vec<u8>>)>;

fn walk(
    root: OwnedFd,
    prefix: &str,
    raw_prefix: Option<&[u8]>,
    out: &mut Vec<Entry>,
) -> Result<bool, SandboxError> {
    struct Up {
        id: (u64, u64),
        pending: Pending,
    }
    let mut bytes = 0usize;
    let mut complete = true;
    let mut cur = root;
    let mut ups: Vec<Up> = Vec::new();
    let Some(mut pending) = list_one(&cur, prefix, raw_prefix, out, &mut bytes)? else {
        return Ok(false);
    };
    loop {
        if let Some((name, path, raw)) = pending.pop() {
            if ups.len() + 1 >= MAX_DEPTH {
                complete = false;
                continue;
            }
            let Ok(sub) = rustix::fs::openat(
                &cur,
                name.as_slice(),
                OFlags::DIRECTORY
                    | OFlags::RDONLY
                    | OFlags::CLOEXEC
                    | OFlags::NOFOLLOW
                    | OFlags::NONBLOCK,
                Mode::empty(),
            ) else {
                continue;
            };
            let Ok(id) = dir_id(&cur) else {
                return Ok(false);
            };
            ups.push(Up {
                id,
                pending: std::mem::take(&mut pending),
            });
            cur = sub;
            match list_one(&cur, &path, raw.as_deref(), out, &mut bytes)? {
                Some(p) => pending = p,
                None => return Ok(false),
            }
        } else {
            let Some(up) = ups.pop() else {
                return Ok(complete);
            };
            let Ok(parent) = rustix::fs::openat(
                &cur,
                "..",
                OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
            ) else {
                return Ok(false);
            };
            if dir_id(&parent).ok() != Some(up.id) {
                return Ok(false);
            }
            cur = parent;
            pending = up.pending;
        }
    }
}

fn dir_id(fd: &OwnedFd) -> rustix::io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    #[allow(clippy::useless_conversion)]
    Ok((u64::from(st.st_dev), u64::from(st.st_ino)))
}

/// Appends one directory's entries (sorted) to `out` and returns its subdirectories (raw name,
/// shown path), last-first so popping visits them in order; `None` when a cap was reached
/// (what fits is kept).
fn list_one(
    dir: &OwnedFd,
    prefix: &str,
    raw_prefix: Option<&[u8]>,
    out: &mut Vec<Entry>,
    bytes: &mut usize,
) -> Result<Option<Pending>, SandboxError> {
    let mut reader =
        rustix::fs::Dir::read_from(dir).map_err(|e| io_err("list", Path::new(prefix), e))?;
    let mut subdirs = Vec::new();
    let mut here = Vec::new();
    let mut full = false;
    while let Some(ent) = reader.read() {
        let Ok(ent) = ent else { break };
        let name = ent.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let t = FileType::from_raw_mode(st.st_mode);
        let nm = name.to_string_lossy();
        // Raw bytes are kept only when they differ from what is shown (a non-UTF-8 name here or above).
        let raw = if raw_prefix.is_some() || std::str::from_utf8(name.to_bytes()).is_err() {
            let mut r = raw_prefix.map_or_else(|| prefix.as_bytes().to_vec(), <[u8]>::to_vec);
            if !r.is_empty() {
                r.push(b'/');
            }
            r.extend_from_slice(name.to_bytes());
            Some(r)
        } else {
            None
        };
        let path = if prefix.is_empty() {
            nm.into_owned()
        } else {
            format!("{prefix}/{nm}")
        };
        let cost = path.len() + raw.as_ref().map_or(0, Vec::len);
        if out.len() + here.len() >= MAX_ENTRIES || *bytes + cost > MAX_PATH_BYTES {
            full = true;
            break;
        }
        *bytes += cost;
        let mtime_ns = i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec);
        if t == FileType::Directory {
            subdirs.push((name.to_bytes().to_vec(), path.clone(), raw.clone()));
        }
        here.push(Entry {
            path,
            kind: kind_name(t),
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime_ns,
            raw,
        });
    }
    drop(reader);
    here.sort_by(|a, b| {
        a.path
            .cmp(&b.path)
            .then_with(|| a.path_bytes().cmp(b.path_bytes()))
    });
    out.extend(here);
    if full {
        return Ok(None);
    }
    subdirs.sort_by(|a, b| b.1.cmp(&a.1));
    Ok(Some(subdirs))
}

/// The workspace's non-directory entries at one moment.
pub struct Snapshot {
    entries: BTreeMap<Vec<u8>, Entry>,
    /// False when the scan stopped at a cap (entries, path bytes, depth).
    pub complete: bool,
}

/// How many entries and whether the scan was complete (a snapshot may hold 100,000 entries).
impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("entries", &self.entries.len())
            .field("complete", &self.complete)
            .finish()
    }
}

/// How a call changed one workspace path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Created,
    Modified,
    Deleted,
}

/// One path a call created, modified or deleted: relative to the workspace, as `list_files`
/// gives paths (`path_b64` holds the exact bytes of a name that is not UTF-8), with its size
/// now (none once deleted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileChange {
    pub path: String,
    #[serde(
        rename = "path_b64",
        skip_serializing_if = "Option::is_none",
        serialize_with = "base64_bytes"
    )]
    pub raw: Option<Vec<u8>>,
    pub size: Option<u64>,
    pub change: Change,
}

impl Snapshot {
    /// Paths created, modified (size, mtime or type differ) or deleted since `self`, sorted by
    /// path.
    pub fn changed_since(&self, now: &Snapshot) -> Vec<FileChange> {
        // The snapshot keys hold the paths (its entries gave theirs up to them).
        let change = |p: &Vec<u8>, size: Option<u64>, change| FileChange {
            path: String::from_utf8_lossy(p).into_owned(),
            raw: std::str::from_utf8(p).is_err().then(|| p.clone()),
            size,
            change,
        };
        let mut out: Vec<FileChange> = now
            .entries
            .iter()
            .filter_map(|(p, e)| match self.entries.get(p) {
                None => Some(change(p, Some(e.size), Change::Created)),
                Some(old)
                    if old.size != e.size || old.mtime_ns != e.mtime_ns || old.kind != e.kind =>
                {
                    Some(change(p, Some(e.size), Change::Modified))
                }
                Some(_) => None,
            })
            .collect();
        out.extend(
            self.entries
                .iter()
                .filter(|(p, _)| !now.entries.contains_key(*p))
                .map(|(p, _)| change(p, None, Change::Deleted)),
        );
        out.sort_by(|a, b| {
            a.raw
                .as_deref()
                .unwrap_or(a.path.as_bytes())
                .cmp(b.raw.as_deref().unwrap_or(b.path.as_bytes()))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert_eq!(relative("a/b").unwrap(), "a/b");
        assert_eq!(relative("/workspace/a/./b").unwrap(), "a/b");
        assert_eq!(relative("/workspace").unwrap(), "");
        assert!(relative("/etc/passwd").is_err());
        assert!(relative("a/../../etc").is_err());
        assert!(relative("/workspacex/a").is_err());
        assert_eq!(
            relative_bytes(b"/workspace/d\xff/./x\xfe").unwrap(),
            b"d\xff/x\xfe"
        );
        assert!(relative_bytes(b"d\xff/../../x").is_err());
        assert!(relative_bytes(b"a\0b").is_err());
    }
}
