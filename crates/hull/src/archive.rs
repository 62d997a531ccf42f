//! Snapshot and restore of a workspace as a `.tar.gz`.
//!
//! A snapshot holds regular files and directories only (symlinks, FIFOs, sockets and devices in
//! the workspace are skipped and named in the answer, since restore would refuse them). Restore
//! treats the archive as hostile: it reads every header first and refuses the whole archive, naming
//! the member, if any is absolute, has `..`, or is a symlink, hard link, device or FIFO, or if the
//! archive is too large; only then does it replace the workspace's contents, creating each member
//! through the confined, no-follow operations of [`crate::files`].

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::Serialize;

use crate::error::SandboxError;
use crate::files::{relative, Confined};

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
    // Written under a fresh random name beside `dest` (created O_EXCL, so nothing planted there,
    // e.g. a symlink when `dest` lies in the workspace, is followed) and renamed into place.
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp_file = tempfile::Builder::new()
        .prefix(&format!(
            ".{}.",
            dest.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ))
        .suffix(".partial")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .tempfile_in(dir)
        .map_err(|e| io_err("create a temporary file in", dir, e))?;
    let tmp = tmp_file.path().to_path_buf();
    let out = tmp_file
        .as_file()
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
    tmp_file
        .persist(dest)
        .map_err(|e| io_err("rename into place", dest, e.error))?;
    Ok(report)
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

type Archive = tar::Archive<Capped<GzDecoder<File>>>;

/// Visits every member with its full name, reading the archive raw so that GNU long-name and
/// PAX members are size-checked before their contents are read (tar's own processing reads
/// them whole into memory first). A PAX `path` or GNU long name applies to the next member.
fn each_member(
    ar: &mut Archive,
    src: &Path,
    mut f: impl FnMut(
        String,
        tar::EntryType,
        &mut tar::Entry<'_, Capped<GzDecoder<File>>>,
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

fn open_archive(src: &Path) -> Result<Archive, SandboxError> {
    let f = File::open(src).map_err(|e| io_err("open", src, e))?;
    Ok(tar::Archive::new(Capped {
        inner: GzDecoder::new(f),
        left: MAX_RESTORE_STREAM,
    }))
}

#[derive(Debug, Serialize)]
pub struct RestoreReport {
    pub files: usize,
    pub bytes: u64,
}

/// Replaces the workspace's contents with the archive at `src` (a host path), after checking
/// every member.
pub fn restore(ws: &Confined, src: &Path) -> Result<RestoreReport, SandboxError> {
    // Pass 1: headers only; nothing is written unless every member is acceptable.
    let mut total = 0u64;
    let mut count = 0usize;
    let mut ar = open_archive(src)?;
    each_member(&mut ar, src, |name, kind, entry| {
        check_member(&name, kind)?;
        total = total.saturating_add(entry.size());
        count += 1;
        if total > MAX_RESTORE_BYTES || count > MAX_RESTORE_ENTRIES {
            return Err(SandboxError::Member { member: shown(&name), why: format!("the archive exceeds {MAX_RESTORE_BYTES} bytes or {MAX_RESTORE_ENTRIES} entries") });
        }
        Ok(())
    })?;
    // Pass 2: replace the contents (every member is checked again: the file may have changed).
    ws.clear()?;
    let mut report = RestoreReport { files: 0, bytes: 0 };
    let mut ar = open_archive(src)?;
    each_member(&mut ar, src, |name, kind, entry| {
        let rel = check_member(&name, kind)?;
        if rel.is_empty() {
            return Ok(());
        }
        match kind {
            tar::EntryType::Directory => {
                ws.make_dir(&rel)?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mode = entry.header().mode().unwrap_or(0o644) & 0o755;
                let mut f = ws.create_file(&rel, mode | 0o600)?;
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
    Ok(report)
}
