//! The guest's initramfs: hull's static binary as `/init`, the kernel modules the guest init
//! loads (in `modules.order`), and `/dev/console`; a gzip'd newc archive, the format the
//! kernel unpacks. Built once per (agent, modules) pair and kept in a cache directory under a
//! name made of their digest, so a VM's start reads one file instead of packing one. The
//! digest itself is found without reading the inputs when they have not changed: an index
//! file named from their paths and `stat` (size, modification and change times, inode) holds
//! the archive's name, so a start stats a few files instead of hashing the agent's ~14 MB.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};

use crate::assets::Guest;

/// Bumped when the archive's layout changes, so an old cached archive is not used.
const LAYOUT: &[u8] = b"hull-initramfs-1";

/// One file of the archive.
struct Member {
    name: String,
    mode: u32,
    data: Vec<u8>,
}

/// The inputs of the archive for `guest`: the agent, then the modules.
fn inputs(guest: &Guest) -> Vec<&Path> {
    std::iter::once(guest.agent.as_path())
        .chain(guest.modules.iter().map(PathBuf::as_path))
        .collect()
}

/// The index file's name for `guest`'s inputs as they are now on disk: their paths and
/// `stat`. The change time cannot be set by a user, so a file rewritten in place with its
/// size and modification time restored still gets another name.
fn index_name(guest: &Guest) -> io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let mut digest = Sha256::new();
    digest.update(LAYOUT);
    for p in inputs(guest) {
        let m = fs::metadata(p)?;
        digest.update(p.as_os_str().as_encoded_bytes());
        digest.update([0]);
        for n in [
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime().cast_unsigned(),
            m.mtime_nsec().cast_unsigned(),
            m.ctime().cast_unsigned(),
            m.ctime_nsec().cast_unsigned(),
        ] {
            digest.update(n.to_le_bytes());
        }
    }
    Ok(format!("index-{}", hex(&digest.finalize()[..12])))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The archive for `guest` in `cache` (made there if it is not yet): its path.
pub fn ensure(guest: &Guest, cache: &Path) -> io::Result<PathBuf> {
    ensure_reading(guest, cache, &|p| fs::read(p))
}

/// [`ensure`], reading the inputs with `read` (only when the index does not know them).
fn ensure_reading(
    guest: &Guest,
    cache: &Path,
    read: &dyn Fn(&Path) -> io::Result<Vec<u8>>,
) -> io::Result<PathBuf> {
    let index = cache.join(index_name(guest)?);
    if let Ok(name) = fs::read_to_string(&index) {
        let path = cache.join(name.trim());
        if name.starts_with("initramfs-") && !name.contains('/') && path.is_file() {
            return Ok(path);
        }
    }
    let path = build(guest, cache, read)?;
    // The index is written whole or not at all (as the archive); without it the next start
    // only hashes again.
    let mut tmp = tempfile::NamedTempFile::new_in(cache)?;
    tmp.write_all(path.file_name().unwrap_or_default().as_encoded_bytes())?;
    tmp.persist(&index).map_err(|e| e.error)?;
    Ok(path)
}

/// The archive for `guest`, found or made under the digest of its contents.
fn build(
    guest: &Guest,
    cache: &Path,
    read: &dyn Fn(&Path) -> io::Result<Vec<u8>>,
) -> io::Result<PathBuf> {
    let members = members(guest, read)?;
    let mut digest = Sha256::new();
    digest.update(LAYOUT);
    for m in &members {
        digest.update(m.name.as_bytes());
        digest.update(m.mode.to_le_bytes());
        digest.update((m.data.len() as u64).to_le_bytes());
        digest.update(&m.data);
    }
    let path = cache.join(format!(
        "initramfs-{}.cpio.gz",
        hex(&digest.finalize()[..12])
    ));
    if path.is_file() {
        return Ok(path);
    }
    fs::create_dir_all(cache)?;
    // Written beside its final name and renamed into place: a VM starting at the same time
    // sees the whole archive or none (a crash leaves only the temporary file's name).
    let mut tmp = tempfile::NamedTempFile::new_in(cache)?;
    write_archive(&members, tmp.as_file_mut())?;
    tmp.as_file().sync_all()?;
    tmp.persist(&path).map_err(|e| e.error)?;
    Ok(path)
}

fn members(guest: &Guest, read: &dyn Fn(&Path) -> io::Result<Vec<u8>>) -> io::Result<Vec<Member>> {
    let mut out = vec![Member {
        name: "init".into(),
        mode: 0o100_755,
        data: read(&guest.agent)?,
    }];
    let mut order = String::new();
    for m in &guest.modules {
        let name = m
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "module name"))?;
        order.push_str(name);
        order.push('\n');
        out.push(Member {
            name: format!("modules/{name}"),
            mode: 0o100_644,
            data: read(m)?,
        });
    }
    out.push(Member {
        name: "modules.order".into(),
        mode: 0o100_644,
        data: order.into_bytes(),
    });
    Ok(out)
}

/// Writes the gzip'd newc archive of `members` (with `/dev`, `/dev/console` and `/modules`).
fn write_archive(members: &[Member], out: &mut fs::File) -> io::Result<()> {
    let mut gz = GzEncoder::new(io::BufWriter::new(out), flate2::Compression::fast());
    let mut ino = 1u32;
    let mut next = || {
        ino += 1;
        ino
    };
    for dir in ["dev", "modules"] {
        let w = cpio::newc::Builder::new(dir)
            .ino(next())
            .mode(0o040_755)
            .nlink(2)
            .write(&mut gz, 0);
        w.finish()?;
    }
    // The kernel opens /dev/console for init's standard streams before /init runs.
    let w = cpio::newc::Builder::new("dev/console")
        .ino(next())
        .mode(0o020_600)
        .nlink(1)
        .rdev_major(5)
        .rdev_minor(1)
        .write(&mut gz, 0);
    w.finish()?;
    for m in members {
        let size = u32::try_from(m.data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "member over 4 GiB"))?;
        let mut w = cpio::newc::Builder::new(&m.name)
            .ino(next())
            .mode(m.mode)
            .nlink(1)
            .write(&mut gz, size);
        w.write_all(&m.data)?;
        w.finish()?;
    }
    cpio::newc::trailer(&mut gz)?;
    gz.finish()?.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn the_archive_holds_init_the_modules_in_order_and_the_console() {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("hull");
        fs::write(&agent, b"\x7fELF-agent").unwrap();
        let (a, b) = (dir.path().join("b.ko.xz"), dir.path().join("a.ko.xz"));
        fs::write(&a, b"module-b").unwrap();
        fs::write(&b, b"module-a").unwrap();
        let guest = Guest {
            kernel: dir.path().join("vmlinuz"),
            modules: vec![a, b],
            agent,
        };
        let cache = dir.path().join("cache");
        let path = ensure(&guest, &cache).unwrap();
        assert_eq!(ensure(&guest, &cache).unwrap(), path, "cached by content");
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(fs::File::open(&path).unwrap())
            .read_to_end(&mut raw)
            .unwrap();
        let mut seen = Vec::new();
        let mut rest = &raw[..];
        loop {
            let mut r = cpio::newc::Reader::new(rest).unwrap();
            if r.entry().is_trailer() {
                break;
            }
            let (name, mode, rdev) = (
                r.entry().name().to_owned(),
                r.entry().mode(),
                (r.entry().rdev_major(), r.entry().rdev_minor()),
            );
            let mut data = Vec::new();
            r.read_to_end(&mut data).unwrap();
            seen.push((name, mode, rdev, data));
            rest = r.finish().unwrap();
        }
        let find = |n: &str| seen.iter().find(|s| s.0 == n).unwrap();
        assert_eq!(find("init").1, 0o100_755);
        assert_eq!(find("init").3, b"\x7fELF-agent");
        assert_eq!(find("dev/console").2, (5, 1));
        assert_eq!(find("modules.order").3, b"b.ko.xz\na.ko.xz\n");
        assert_eq!(find("modules/a.ko.xz").3, b"module-a");
        // A changed agent is another archive; the old one stays for VMs still using it.
        fs::write(&guest.agent, b"\x7fELF-agent-2").unwrap();
        let second = ensure(&guest, &cache).unwrap();
        assert_ne!(second, path);
        assert!(path.is_file());
        // Unchanged inputs are found through the index, without reading them.
        let refuse = |p: &Path| -> io::Result<Vec<u8>> { panic!("{} was read", p.display()) };
        assert_eq!(ensure_reading(&guest, &cache, &refuse).unwrap(), second);
        // Rewritten with the same size and modification time, the agent is still seen as
        // changed (its change time moved).
        let mtime = fs::metadata(&guest.agent).unwrap().modified().unwrap();
        fs::write(&guest.agent, b"\x7fELF-agent-3").unwrap();
        fs::File::options()
            .write(true)
            .open(&guest.agent)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let third = ensure(&guest, &cache).unwrap();
        assert_ne!(third, second);
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(fs::File::open(&third).unwrap())
            .read_to_end(&mut raw)
            .unwrap();
        let want: &[u8] = b"\x7fELF-agent-3";
        assert!(raw.windows(want.len()).any(|w| w == want));
    }
}
