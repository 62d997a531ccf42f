//! Reading a file of a tree hull does not trust (an image root, a sandbox's layer) without
//! following a link: a link in an image pointing at a host file must never make hull read that
//! file and hand its text to a box.

use std::io::Read;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// How reading ended when it did not give the text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unread {
    /// Nothing at that path.
    Missing,
    /// A link on the way, not a regular file, unreadable, or more than `max` bytes.
    Refused,
}

/// The bytes of `rel` below `dir`: a regular file reached with no symbolic link on the way
/// (`RESOLVE_NO_SYMLINKS`, beneath `dir`), at most `max` bytes of it (a larger file is
/// `Refused`: a truncated copy would be worse than none).
pub(crate) fn read(dir: &Path, rel: &Path, max: u64) -> Result<Vec<u8>, Unread> {
    let root = rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| Unread::Missing)?;
    let fd = match rustix::fs::openat2(
        &root,
        rel,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Err(Unread::Missing),
        Err(_) => return Err(Unread::Refused),
    };
    let st = rustix::fs::fstat(&fd).map_err(|_| Unread::Refused)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(Unread::Refused);
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| Unread::Refused)?;
    if bytes.len() as u64 > max {
        return Err(Unread::Refused);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::{read, Unread};
    use std::path::Path;

    #[test]
    fn a_link_on_the_way_is_refused_and_a_file_is_read_whole() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("etc")).unwrap();
        std::fs::write(d.path().join("etc/a"), "text").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", d.path().join("etc/link")).unwrap();
        std::os::unix::fs::symlink("etc", d.path().join("via")).unwrap();
        assert_eq!(read(d.path(), Path::new("etc/a"), 10), Ok(b"text".to_vec()));
        assert_eq!(
            read(d.path(), Path::new("etc/link"), 10),
            Err(Unread::Refused)
        );
        assert_eq!(read(d.path(), Path::new("via/a"), 10), Err(Unread::Refused));
        assert_eq!(
            read(d.path(), Path::new("etc/none"), 10),
            Err(Unread::Missing)
        );
        assert_eq!(read(d.path(), Path::new("etc/a"), 3), Err(Unread::Refused));
        assert_eq!(read(d.path(), Path::new("etc"), 10), Err(Unread::Refused));
    }
}
