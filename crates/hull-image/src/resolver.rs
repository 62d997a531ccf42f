//! The `/etc/resolv.conf` an image gets when its layers carry none. Images built by docker and
//! its kin leave the file out (their engine mounts one at run time); without it a program's
//! resolver asks 127.0.0.1, which in a box is the box's own loopback, where nothing answers. The
//! store adds the file once, when an image is published, and to images published before it did
//! when they are next resolved: it names the sandbox network's resolver (`hull-net` answers DNS
//! at its gateway address, whatever a query's destination, but a query to loopback never leaves
//! the box). A box on the host's network gets the host's file mounted over it; a box without
//! network has no resolver, and the line does nothing there.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// What the added file says (the address is the gateway's in every box: `10.0.2.2`).
pub const RESOLV_CONF: &[u8] = b"# Added by hull: this image had no /etc/resolv.conf. With --network deny-all,\n# allow-all or custom, the sandbox network's resolver answers here; with --network host\n# the host's file is mounted over this one.\nnameserver 10.0.2.2\n";

/// Adds `etc/resolv.conf` under the image root `rootfs` when nothing is there (no file, no link,
/// not even a dangling one: an image's own choice is kept), making `etc` too when the image has
/// none. An `etc` that is not a directory (a link, a file) is left alone. Returns whether a file
/// was added.
pub fn add_if_missing(rootfs: &Path) -> io::Result<bool> {
    let etc = rootfs.join("etc");
    match fs::symlink_metadata(&etc) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            match fs::DirBuilder::new().mode(0o755).create(&etc) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return add_if_missing(rootfs)
                }
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    }
    let path = etc.join("resolv.conf");
    // O_EXCL never follows a link at the last component, and an existing entry is kept.
    let made = rustix::fs::open(
        &path,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    );
    let mut f = match made {
        Ok(fd) => fs::File::from(fd),
        Err(rustix::io::Errno::EXIST) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    f.write_all(RESOLV_CONF)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::{add_if_missing, RESOLV_CONF};
    use std::fs;
    use std::os::unix::fs::symlink;

    #[test]
    fn an_image_without_the_file_gets_it_and_one_with_its_own_keeps_it() {
        let d = tempfile::tempdir().unwrap();
        // No /etc at all: made, with the file.
        assert!(add_if_missing(d.path()).unwrap());
        assert_eq!(
            fs::read(d.path().join("etc/resolv.conf")).unwrap(),
            RESOLV_CONF
        );
        // Twice: nothing changes.
        assert!(!add_if_missing(d.path()).unwrap());

        let own = tempfile::tempdir().unwrap();
        fs::create_dir(own.path().join("etc")).unwrap();
        fs::write(own.path().join("etc/resolv.conf"), "nameserver 192.0.2.1\n").unwrap();
        assert!(!add_if_missing(own.path()).unwrap());
        assert_eq!(
            fs::read_to_string(own.path().join("etc/resolv.conf")).unwrap(),
            "nameserver 192.0.2.1\n"
        );
    }

    #[test]
    fn links_are_never_followed_or_replaced() {
        // A dangling link (systemd's stub) is the image's choice: kept, nothing made at its target.
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("etc")).unwrap();
        symlink("../outside", d.path().join("etc/resolv.conf")).unwrap();
        assert!(!add_if_missing(d.path()).unwrap());
        assert!(!d.path().join("outside").exists());
        // An `etc` that is a link: left alone.
        let l = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        symlink(elsewhere.path(), l.path().join("etc")).unwrap();
        assert!(!add_if_missing(l.path()).unwrap());
        assert!(!elsewhere.path().join("resolv.conf").exists());
    }
}
