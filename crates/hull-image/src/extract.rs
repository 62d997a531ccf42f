//! Unpacks one OCI/Docker image layer (a tar, plain, gzip or zstd) into a root directory, safely
//! against hostile archives.
//!
//! Every member is placed by walking its parent directories from the root with
//! `openat(O_NOFOLLOW | O_DIRECTORY)`, so no `..`, absolute path, or symlink planted by an
//! earlier member (of this layer or a lower one) can lead a write outside the root. Entries are
//! created with `*at` calls relative to that parent descriptor, and an existing entry is removed
//! (never written through) before a new one takes its name. Whiteouts (`.wh.NAME`) and opaque
//! whiteouts (`.wh..wh..opq`) from the OCI layer spec are applied; hard links must point inside
//! the root; device nodes are skipped unless asked for; setuid/setgid bits are dropped unless
//! asked for; total size and entry count are capped. Each refusal names the member.

use std::collections::HashSet;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

/// Caps and choices for one extraction.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Total bytes of file contents a layer may write.
    pub max_bytes: u64,
    /// Members a layer may hold.
    pub max_entries: u64,
    /// Keep setuid/setgid bits (they are dropped by default).
    pub keep_setuid: bool,
    /// Create device nodes (needs root on the host; skipped and reported otherwise).
    pub allow_devices: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bytes: 16 << 30,
            max_entries: 2_000_000,
            keep_setuid: false,
            allow_devices: false,
        }
    }
}

/// How a layer blob is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
    /// Decide from the first bytes (gzip and zstd magic numbers).
    Detect,
}

/// What an extraction did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub entries: u64,
    pub bytes: u64,
    pub whiteouts: u64,
    /// Device nodes that were not created, by member name.
    pub skipped_devices: Vec<String>,
    /// Members whose setuid/setgid bits were dropped.
    pub dropped_setuid: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error("layer member `{member}` refused: {why}")]
    Refused { member: String, why: String },
    #[error("layer member `{member}`")]
    Io { member: String, source: io::Error },
    #[error("layer refused at member `{member}`: {what} exceeds the limit of {limit}")]
    Limit {
        member: String,
        what: &'static str,
        limit: u64,
    },
    #[error("reading the layer archive")]
    Archive(#[source] io::Error),
    #[error("opening the extraction root {}", path.display())]
    Root { path: PathBuf, source: io::Error },
}

fn refused(member: &str, why: impl Into<String>) -> ExtractError {
    ExtractError::Refused {
        member: member.to_string(),
        why: why.into(),
    }
}

fn io_err(member: &str) -> impl Fn(rustix::io::Errno) -> ExtractError + '_ {
    move |e| ExtractError::Io {
        member: member.to_string(),
        source: e.into(),
    }
}

/// Splits a member path into checked components. Refuses absolute paths and `..`.
fn components(member: &str) -> Result<Vec<&str>, ExtractError> {
    if member.starts_with('/') {
        return Err(refused(member, "absolute path"));
    }
    let mut out = Vec::new();
    for c in member.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(refused(member, "`..` in the path would leave the root")),
            c => out.push(c),
        }
    }
    Ok(out)
}

const DIR_FLAGS: OFlags = OFlags::DIRECTORY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::RDONLY)
    .union(OFlags::CLOEXEC);

/// Opens (creating as needed) the directory chain `dirs` below `root`, never following a symlink.
fn walk(
    root: &OwnedFd,
    dirs: &[&str],
    member: &str,
    create: bool,
) -> Result<OwnedFd, ExtractError> {
    let mut cur =
        rustix::fs::openat(root, ".", DIR_FLAGS, Mode::empty()).map_err(io_err(member))?;
    for d in dirs {
        let next = match rustix::fs::openat(&cur, *d, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) if create => {
                rustix::fs::mkdirat(&cur, *d, Mode::from_raw_mode(0o755))
                    .map_err(io_err(member))?;
                rustix::fs::openat(&cur, *d, DIR_FLAGS, Mode::empty()).map_err(io_err(member))?
            }
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                return Err(refused(
                    member,
                    format!("its parent `{d}` is a symlink or not a directory"),
                ));
            }
            Err(e) => return Err(io_err(member)(e)),
        };
        cur = next;
    }
    Ok(cur)
}

/// Removes `name` in `dir` whatever it is (a directory recursively), never following symlinks.
fn remove_entry(dir: &OwnedFd, name: &str, member: &str) -> Result<(), ExtractError> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(io_err(member)(e)),
        Ok(st)
            if rustix::fs::FileType::from_raw_mode(st.st_mode)
                == rustix::fs::FileType::Directory =>
        {
            let sub =
                rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()).map_err(io_err(member))?;
            clear_dir(&sub, member, &HashSet::new(), "")?;
            rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(io_err(member))
        }
        Ok(_) => rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(io_err(member)),
    }
}

/// Removes every entry of `dir` except those this layer created (`keep`, as paths under `prefix`).
fn clear_dir(
    dir: &OwnedFd,
    member: &str,
    keep: &HashSet<String>,
    prefix: &str,
) -> Result<(), ExtractError> {
    let names: Vec<String> = {
        let fd = rustix::fs::openat(dir, ".", DIR_FLAGS, Mode::empty()).map_err(io_err(member))?;
        let d = rustix::fs::Dir::read_from(&fd).map_err(io_err(member))?;
        let mut v = Vec::new();
        for e in d {
            let e = e.map_err(io_err(member))?;
            let n = e.file_name().to_string_lossy().into_owned();
            if n != "." && n != ".." {
                v.push(n);
            }
        }
        v
    };
    for n in names {
        let full = if prefix.is_empty() {
            n.clone()
        } else {
            format!("{prefix}/{n}")
        };
        if !keep.contains(&full) {
            remove_entry(dir, &n, member)?;
        }
    }
    Ok(())
}

fn wrap<'a, R: Read + 'a>(
    mut reader: R,
    compression: Compression,
) -> io::Result<Box<dyn Read + 'a>> {
    let kind = if compression == Compression::Detect {
        let mut head = [0u8; 4];
        let mut n = 0;
        while n < 4 {
            let got = reader.read(&mut head[n..])?;
            if got == 0 {
                break;
            }
            n += got;
        }
        let kind = if n >= 2 && head[..2] == [0x1f, 0x8b] {
            Compression::Gzip
        } else if n == 4 && head == [0x28, 0xb5, 0x2f, 0xfd] {
            Compression::Zstd
        } else {
            Compression::None
        };
        let chained = io::Cursor::new(head[..n].to_vec()).chain(reader);
        return wrap_known(Box::new(chained), kind);
    } else {
        compression
    };
    wrap_known(Box::new(reader), kind)
}

fn wrap_known<'a>(reader: Box<dyn Read + 'a>, kind: Compression) -> io::Result<Box<dyn Read + 'a>> {
    Ok(match kind {
        Compression::Gzip => Box::new(flate2::read::GzDecoder::new(reader)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(reader)?),
        Compression::None | Compression::Detect => reader,
    })
}

/// Extracts one layer into `root` (an existing directory holding the lower layers, if any).
pub fn extract_layer<R: Read>(
    reader: R,
    compression: Compression,
    root: &Path,
    limits: &Limits,
) -> Result<Report, ExtractError> {
    let root_fd =
        rustix::fs::open(root, DIR_FLAGS, Mode::empty()).map_err(|e| ExtractError::Root {
            path: root.to_path_buf(),
            source: e.into(),
        })?;
    let input = wrap(reader, compression).map_err(ExtractError::Archive)?;
    let mut archive = tar::Archive::new(input);
    let mut report = Report::default();
    // Paths this layer created, so an opaque whiteout removes only what lower layers left.
    let mut created: HashSet<String> = HashSet::new();
    for entry in archive.entries().map_err(ExtractError::Archive)? {
        let mut entry = entry.map_err(ExtractError::Archive)?;
        let raw = entry.path_bytes().into_owned();
        let member = String::from_utf8_lossy(&raw).into_owned();
        report.entries += 1;
        if report.entries > limits.max_entries {
            return Err(ExtractError::Limit {
                member,
                what: "the number of entries",
                limit: limits.max_entries,
            });
        }
        let comps = components(&member)?;
        let Some((name, parents)) = comps.split_last() else {
            continue;
        };
        let parent = walk(&root_fd, parents, &member, true)?;
        let rel = comps.join("/");
        let parent_rel = parents.join("/");

        if *name == ".wh..wh..opq" {
            clear_dir(&parent, &member, &created, &parent_rel)?;
            report.whiteouts += 1;
            continue;
        }
        if let Some(hidden) = name.strip_prefix(".wh.") {
            if hidden.is_empty() || hidden == "." || hidden == ".." {
                return Err(refused(&member, "malformed whiteout"));
            }
            remove_entry(&parent, hidden, &member)?;
            report.whiteouts += 1;
            continue;
        }

        let header = entry.header().clone();
        let mut mode = header.mode().map_err(|e| ExtractError::Io {
            member: member.clone(),
            source: e,
        })? & 0o7777;
        if mode & 0o6000 != 0 && !limits.keep_setuid {
            mode &= !0o6000;
            report.dropped_setuid.push(member.clone());
        }
        let kind = header.entry_type();
        // An entry replaces whatever had its name, except a directory over a directory (merge).
        let existing_dir = rustix::fs::statat(&parent, *name, AtFlags::SYMLINK_NOFOLLOW)
            .map(|st| {
                rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
            })
            .unwrap_or(false);
        if !(kind.is_dir() && existing_dir) {
            remove_entry(&parent, name, &member)?;
        }
        match kind {
            tar::EntryType::Directory => {
                if !existing_dir {
                    rustix::fs::mkdirat(&parent, *name, Mode::from_raw_mode(mode))
                        .map_err(io_err(&member))?;
                }
                let d = rustix::fs::openat(&parent, *name, DIR_FLAGS, Mode::empty())
                    .map_err(io_err(&member))?;
                rustix::fs::fchmod(&d, Mode::from_raw_mode(mode | 0o700))
                    .map_err(io_err(&member))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = header.size().unwrap_or(0);
                if report.bytes + size > limits.max_bytes {
                    return Err(ExtractError::Limit {
                        member,
                        what: "the layer's total size",
                        limit: limits.max_bytes,
                    });
                }
                let fd = rustix::fs::openat(
                    &parent,
                    *name,
                    OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::WRONLY
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(io_err(&member))?;
                let mut file = std::fs::File::from(fd);
                let copied = io::copy(&mut (&mut entry).take(size), &mut file).map_err(|e| {
                    ExtractError::Io {
                        member: member.clone(),
                        source: e,
                    }
                })?;
                report.bytes += copied;
                rustix::fs::fchmod(file.as_fd(), Mode::from_raw_mode(mode))
                    .map_err(io_err(&member))?;
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| refused(&member, "symlink without a target"))?
                    .into_owned();
                // The target is stored as is: it is never followed here, and inside the box it
                // resolves against the box's own root.
                rustix::fs::symlinkat(target.as_slice(), &parent, *name)
                    .map_err(io_err(&member))?;
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| refused(&member, "hard link without a target"))?
                    .into_owned();
                let target = String::from_utf8_lossy(&target).into_owned();
                let tcomps = components(&target).map_err(|_| {
                    refused(
                        &member,
                        format!("hard link target `{target}` is outside the root"),
                    )
                })?;
                let Some((tname, tparents)) = tcomps.split_last() else {
                    return Err(refused(&member, "hard link to the root"));
                };
                let tparent = walk(&root_fd, tparents, &member, false).map_err(|_| refused(&member, format!("hard link target `{target}` is not reachable inside the root without following a symlink")))?;
                rustix::fs::linkat(&tparent, *tname, &parent, *name, AtFlags::empty())
                    .map_err(io_err(&member))?;
            }
            tar::EntryType::Char | tar::EntryType::Block => {
                if !limits.allow_devices {
                    report.skipped_devices.push(member.clone());
                    continue;
                }
                let ft = if kind == tar::EntryType::Char {
                    rustix::fs::FileType::CharacterDevice
                } else {
                    rustix::fs::FileType::BlockDevice
                };
                let major = header.device_major().ok().flatten().unwrap_or(0);
                let minor = header.device_minor().ok().flatten().unwrap_or(0);
                rustix::fs::mknodat(
                    &parent,
                    *name,
                    ft,
                    Mode::from_raw_mode(mode),
                    rustix::fs::makedev(major, minor),
                )
                .map_err(io_err(&member))?;
            }
            tar::EntryType::Fifo => {
                rustix::fs::mknodat(
                    &parent,
                    *name,
                    rustix::fs::FileType::Fifo,
                    Mode::from_raw_mode(mode),
                    0,
                )
                .map_err(io_err(&member))?;
            }
            // PAX and GNU long-name headers are consumed by the tar crate; anything else is
            // metadata this extractor does not need.
            _ => continue,
        }
        created.insert(rel);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_refuse_escapes() {
        assert_eq!(components("./usr/bin/x").unwrap(), vec!["usr", "bin", "x"]);
        assert!(components("/etc/passwd").is_err());
        assert!(components("a/../../x").is_err());
        assert!(components("..").is_err());
    }
}
