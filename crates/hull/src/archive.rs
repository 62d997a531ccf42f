//! Snapshot and restore of a workspace as a `.tar.gz`.
//!
//! A snapshot holds regular files and directories only (symlinks, FIFOs, sockets and devices in
//! the workspace are skipped and named in the answer, since restore would refuse them). Restore
//! treats the archive as hostile: it reads every header first and refuses the whole archive, naming
//! the member, if any is absolute, has `..`, or is a symlink, hard link, device or FIFO, if two
//! members disagree about a name (a file and a directory, a file under a file, a file twice), or
//! if the archive is too large; only then does it unpack, into a staging directory
//! ([`crate::staging`]) through the confined, no-follow operations of [`crate::files`], checking
//! every member again, and swap the result into place, so a failed restore changes nothing.
//! The host paths themselves (the snapshot's destination, the restore's source) are opened with
//! no symlink followed ([`crate::hostpath`]): a box can plant links where it writes.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::Path;

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::Serialize;

use crate::error::SandboxError;
use crate::files::{relative, Confined};
use crate::hostpath;
use crate::staging::Staging;

/// Restore refuses archives that would unpack to more than this many bytes or entries.
pub const MAX_RESTORE_BYTES: u64 = 8 << 30;
pub const MAX_RESTORE_ENTRIES: usize = 200_000;

#[derive(Debug, Serialize)]
pub struct SnapshotReport {
    pub files: usize,
    pub bytes: u64,
    /// Non-regular entries left out (symlinks, FIFOs...), by path.
    pub skipped: Vec<String>,
}

fn io_err(what: &'static str, path: &Path, e: std::io::Error) -> SandboxError {
    SandboxError::Io {
        what,
        path: path.to_path_buf(),
        error: e,
    }
}

/// Writes the workspace as a gzip-compressed tar to `dest` (a host path, created or replaced).
pub fn snapshot(ws: &Confined, dest: &Path) -> Result<SnapshotReport, SandboxError> {
    let _one = ws.archive_lock();
    let (entries, complete) = ws.list("")?;
    if !complete {
        return Err(SandboxError::path(
            "/workspace",
            format!("holds more than {} entries, {} bytes of paths or {} levels of directories; too much to snapshot", crate::files::MAX_ENTRIES, crate::files::MAX_PATH_BYTES, crate::files::MAX_DEPTH),
        ));
    }
    // Refused up front, by the sizes the walk saw: a box can make a sparse file of any size in
    // no time, and streaming a terabyte of zeros would hold the call for hours. The limit is
    // the one restore enforces, so every snapshot can be restored.
    let files = entries.iter().filter(|e| e.kind == "file");
    let total = files.clone().fold(0u64, |t, e| t.saturating_add(e.size));
    if total > MAX_RESTORE_BYTES {
        let big = files.max_by_key(|e| e.size).map_or_else(String::new, |e| {
            format!("; the biggest is /workspace/{} ({} bytes)", e.path, e.size)
        });
        return Err(SandboxError::path("/workspace", format!("its files total {total} bytes, more than the {MAX_RESTORE_BYTES} a snapshot may hold (restore's limit){big}")));
    }
    // Written under a fresh random name in `dest`'s directory, which is opened with no symlink
    // followed (a box may have planted one on the way when `dest` lies where it writes); the
    // file is created O_EXCL|O_NOFOLLOW and renamed over `dest` (a link there is replaced).
    let parent = hostpath::open_parent(dest, "a snapshot")?;
    let partial = Partial::create(&parent)?;
    let tmp = parent.path.join(&partial.name);
    let out = partial
        .file
        .try_clone()
        .map_err(|e| io_err("open", &tmp, e))?;
    let mut tar = tar::Builder::new(GzEncoder::new(out, flate2::Compression::fast()));
    let mut report = SnapshotReport {
        files: 0,
        bytes: 0,
        skipped: Vec::new(),
    };
    for e in &entries {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(u64::try_from(e.mtime_ns / 1_000_000_000).unwrap_or(0));
        match e.kind {
            // A name that is not UTF-8 has no faithful tar name here (restore reads names as
            // UTF-8); it is skipped and named rather than stored under a look-alike.
            "file" | "dir" if e.path_bytes() != e.path.as_bytes() => {
                report.skipped.push(e.path.clone())
            }
            "dir" => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                tar.append_data(&mut h, format!("{}/", e.path), std::io::empty())
                    .map_err(|err| io_err("write", &tmp, err))?;
            }
            "file" => {
                // Opened through the confined open: the entry may have become a symlink or a
                // FIFO since the walk. Streamed, at the size fstat saw (a file that shrinks
                // meanwhile fails the snapshot rather than writing a short member).
                let (f, size) = match ws.open_regular(&e.path) {
                    Ok(x) => x,
                    Err(_) => {
                        report.skipped.push(e.path.clone());
                        continue;
                    }
                };
                if report.bytes.saturating_add(size) > MAX_RESTORE_BYTES {
                    return Err(SandboxError::path(&format!("/workspace/{}", e.path), format!("grew to {size} bytes during the snapshot, past the {MAX_RESTORE_BYTES} a snapshot may hold")));
                }
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                h.set_size(size);
                tar.append_data(
                    &mut h,
                    &e.path,
                    Exact {
                        inner: f.take(size),
                        left: size,
                    },
                )
                .map_err(|err| io_err("write", &tmp, err))?;
                report.files += 1;
                report.bytes += size;
            }
            _ => report.skipped.push(e.path.clone()),
        }
    }
    let gz = tar.into_inner().map_err(|e| io_err("write", &tmp, e))?;
    let mut f = gz.finish().map_err(|e| io_err("write", &tmp, e))?;
    f.flush().map_err(|e| io_err("write", &tmp, e))?;
    drop(f);
    partial.persist()?;
    Ok(report)
}

/// A snapshot being written: a fresh file in the destination's directory, removed unless it is
/// renamed into place.
struct Partial<'a> {
    parent: &'a hostpath::Parent,
    name: std::ffi::OsString,
    file: File,
    done: bool,
}

impl<'a> Partial<'a> {
    fn create(parent: &'a hostpath::Parent) -> Result<Partial<'a>, SandboxError> {
        let shown = parent.name.to_string_lossy();
        loop {
            let name =
                std::ffi::OsString::from(hostpath::fresh_name(&format!(".{shown}.")) + ".partial");
            match rustix::fs::openat(
                &parent.dir,
                name.as_os_str(),
                rustix::fs::OFlags::WRONLY
                    | rustix::fs::OFlags::CREATE
                    | rustix::fs::OFlags::EXCL
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::from_raw_mode(0o644),
            ) {
                Ok(fd) => {
                    return Ok(Partial {
                        parent,
                        name,
                        file: File::from(fd),
                        done: false,
                    })
                }
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(io_err("create a temporary file in", &parent.path, e.into())),
            }
        }
    }

    /// Renames the file over the destination (replacing a file or a link there, never
    /// following one).
    fn persist(mut self) -> Result<(), SandboxError> {
        rustix::fs::renameat(
            &self.parent.dir,
            self.name.as_os_str(),
            &self.parent.dir,
            self.parent.name.as_os_str(),
        )
        .map_err(|e| {
            io_err(
                "rename into place",
                &self.parent.path.join(&self.parent.name),
                e.into(),
            )
        })?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Partial<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = rustix::fs::unlinkat(
                &self.parent.dir,
                self.name.as_os_str(),
                rustix::fs::AtFlags::empty(),
            );
        }
    }
}

/// Reads exactly `left` bytes, or fails: a file that shrank after its header was written must
/// not produce a short member (which would misalign the rest of the archive).
struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file shrank while it was being archived",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// The most bytes a GNU long-name or PAX extension member may hold (a name is at most 4096
/// bytes on Linux; tar would read any size into memory before we saw the name).
pub const MAX_META_BYTES: u64 = 64 << 10;
/// The most bytes of a member's name an error repeats.
const SHOWN_NAME: usize = 200;
/// The most decompressed bytes restore reads: the data limit plus headers and padding for
/// the most entries (a gzip stream can expand a thousandfold; it is cut off here).
const MAX_RESTORE_STREAM: u64 =
    MAX_RESTORE_BYTES + (MAX_RESTORE_ENTRIES as u64) * 2048 + (64 << 20);

/// A member's name for an error: at most [`SHOWN_NAME`] bytes (on a character boundary).
fn shown(name: &str) -> String {
    if name.len() <= SHOWN_NAME {
        return name.to_string();
    }
    let mut end = SHOWN_NAME;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &name[..end], name.len())
}

/// Fails reads past `left` bytes, so a decompression bomb ends as an error, not a stall.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| {
            std::io::Error::other(format!(
                "the archive decompresses to more than {MAX_RESTORE_STREAM} bytes"
            ))
        })?;
        Ok(n)
    }
}

type Archive<'f> = tar::Archive<Capped<GzDecoder<&'f File>>>;

/// Visits every member with its full name, reading the archive raw so that GNU long-name and
/// PAX members are size-checked before their contents are read (tar's own processing reads
/// them whole into memory first). A PAX `path` or GNU long name applies to the next member.
fn each_member(
    ar: &mut Archive<'_>,
    src: &Path,
    mut f: impl FnMut(
        String,
        tar::EntryType,
        &mut tar::Entry<'_, Capped<GzDecoder<&File>>>,
    ) -> Result<(), SandboxError>,
) -> Result<(), SandboxError> {
    let mut long_name: Option<Vec<u8>> = None;
    let mut pax_path: Option<Vec<u8>> = None;
    for entry in ar.entries().map_err(|e| io_err("read", src, e))?.raw(true) {
        let mut entry = entry.map_err(|e| io_err("read", src, e))?;
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            tar::EntryType::GNULongName
                | tar::EntryType::GNULongLink
                | tar::EntryType::XHeader
                | tar::EntryType::XGlobalHeader
        ) {
            let size = entry.header().entry_size().unwrap_or(u64::MAX);
            if size > MAX_META_BYTES {
                let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
                return Err(SandboxError::Member { member: shown(&name), why: format!("a long-name or PAX member of {size} bytes; at most {MAX_META_BYTES} are accepted") });
            }
            let mut data = Vec::new();
            (&mut entry)
                .take(MAX_META_BYTES)
                .read_to_end(&mut data)
                .map_err(|e| io_err("read", src, e))?;
            match kind {
                tar::EntryType::GNULongName => {
                    while data.last() == Some(&0) {
                        data.pop();
                    }
                    long_name = Some(data);
                }
                tar::EntryType::XHeader => {
                    for ext in tar::PaxExtensions::new(&data).flatten() {
                        if ext.key_bytes() == b"path" {
                            pax_path = Some(ext.value_bytes().to_vec());
                        }
                    }
                }
                _ => {}
            }
            continue;
        }
        let raw = match (pax_path.take(), long_name.take()) {
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) => entry.path_bytes().into_owned(),
        };
        f(String::from_utf8_lossy(&raw).into_owned(), kind, &mut entry)?;
    }
    Ok(())
}

/// Why a member is refused, or its relative path.
fn check_member(name: &str, kind: tar::EntryType) -> Result<String, SandboxError> {
    let refuse = |why: &str| SandboxError::Member {
        member: shown(name),
        why: why.to_string(),
    };
    if name.starts_with('/') {
        return Err(refuse(
            "absolute paths are refused; members must be relative",
        ));
    }
    if name.split('/').any(|c| c == "..") {
        return Err(refuse(
            "`..` is refused; members must stay inside the workspace",
        ));
    }
    match kind {
        tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::Directory => {}
        tar::EntryType::Symlink => return Err(refuse("symlinks are refused")),
        tar::EntryType::Link => return Err(refuse("hard links are refused")),
        tar::EntryType::Char | tar::EntryType::Block => {
            return Err(refuse("device nodes are refused"))
        }
        tar::EntryType::Fifo => return Err(refuse("FIFOs are refused")),
        _ => return Err(refuse("only regular files and directories are restored")),
    }
    relative(name).map_err(|e| refuse(&e.to_string()))
}

/// Reads the archive from its start (each pass rewinds the one descriptor, so both read the
/// same file whatever happens to `src`'s path meanwhile).
fn open_archive<'f>(file: &'f File, src: &Path) -> Result<Archive<'f>, SandboxError> {
    let mut f = file;
    f.rewind().map_err(|e| io_err("read", src, e))?;
    Ok(tar::Archive::new(Capped {
        inner: GzDecoder::new(file),
        left: MAX_RESTORE_STREAM,
    }))
}

/// What the archive has said so far: every name (and each name's parents) as a file or a
/// directory, and the totals, so conflicting or oversized archives are refused.
#[derive(Default)]
struct Members {
    /// `true` for a directory.
    kinds: HashMap<String, bool>,
    bytes: u64,
    count: usize,
    name_bytes: usize,
}

impl Members {
    /// Checks one member against the rules and the members before it; returns its relative path.
    fn add(&mut self, name: &str, kind: tar::EntryType, size: u64) -> Result<String, SandboxError> {
        let rel = check_member(name, kind)?;
        let refuse = |why: String| SandboxError::Member {
            member: shown(name),
            why,
        };
        self.bytes = self.bytes.saturating_add(size);
        self.count += 1;
        self.name_bytes += rel.len();
        if self.bytes > MAX_RESTORE_BYTES || self.count > MAX_RESTORE_ENTRIES {
            return Err(refuse(format!(
                "the archive exceeds {MAX_RESTORE_BYTES} bytes or {MAX_RESTORE_ENTRIES} entries"
            )));
        }
        if self.name_bytes > crate::files::MAX_PATH_BYTES {
            return Err(refuse(format!(
                "the archive's names exceed {} bytes",
                crate::files::MAX_PATH_BYTES
            )));
        }
        let is_dir = kind == tar::EntryType::Directory;
        if rel.is_empty() {
            return if is_dir {
                Ok(rel)
            } else {
                Err(refuse("names the workspace itself".into()))
            };
        }
        for (i, _) in rel.match_indices('/') {
            let parent = &rel[..i];
            match self.kinds.get(parent) {
                Some(false) => {
                    return Err(refuse(format!(
                        "lies under `{}`, which the archive also has as a file",
                        shown(parent)
                    )))
                }
                Some(true) => {}
                None => {
                    self.kinds.insert(parent.to_string(), true);
                }
            }
        }
        match self.kinds.get(&rel) {
            None => {
                self.kinds.insert(rel.clone(), is_dir);
                Ok(rel)
            }
            Some(true) if is_dir => Ok(rel),
            Some(&was_dir) if was_dir != is_dir => Err(refuse(format!(
                "`{}` is both a file and a directory in the archive",
                shown(&rel)
            ))),
            Some(_) => Err(refuse(format!(
                "`{}` appears twice in the archive",
                shown(&rel)
            ))),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct RestoreReport {
    pub files: usize,
    pub bytes: u64,
}

/// Replaces the workspace's contents with the archive at `src` (a host path), after checking
/// every member; a restore that fails leaves the workspace as it was.
pub fn restore(ws: &Confined, src: &Path) -> Result<RestoreReport, SandboxError> {
    let _one = ws.archive_lock();
    let file = hostpath::open_file(src, "a restore")?;
    // Pass 1: headers only; nothing is written unless every member is acceptable.
    let mut members = Members::default();
    each_member(&mut open_archive(&file, src)?, src, |name, kind, entry| {
        members.add(&name, kind, entry.size()).map(drop)
    })?;
    // Pass 2: unpack into a staging directory, every member checked again (the file may have
    // changed), then swap it in. Any error drops the staging directory and its contents.
    let stage = Staging::create(ws)?;
    let mut members = Members::default();
    let mut report = RestoreReport { files: 0, bytes: 0 };
    each_member(&mut open_archive(&file, src)?, src, |name, kind, entry| {
        let rel = members.add(&name, kind, entry.size())?;
        if rel.is_empty() {
            return Ok(());
        }
        match kind {
            tar::EntryType::Directory => {
                stage.new.make_dir(&rel)?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                // Never setuid, setgid or sticky, nor writable by others.
                let mode = entry.header().mode().unwrap_or(0o644) & 0o755;
                let mut f = stage.new.create_file(&rel, mode | 0o600)?;
                let room = MAX_RESTORE_BYTES.saturating_sub(report.bytes);
                let n = std::io::copy(&mut entry.take(room), &mut f)
                    .map_err(|e| io_err("write", &ws.root().join(&rel), e))?;
                report.files += 1;
                report.bytes += n;
            }
            _ => {}
        }
        Ok(())
    })?;
    stage.swap()?;
    Ok(report)
}
