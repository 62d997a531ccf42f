//! A VM's file mounts: virtio-fs shares directories, so a file a box would get as a bind mount
//! is copied into the guest instead (bound read-only there by its init, `hull_vm::VmFile`). A
//! copy cannot write back, so only read-only file mounts are taken; a writable one is refused
//! naming `--mount`. The copies travel in the agent's boot request and live in the guest's
//! memory, so their total is capped. What a credential-brokered box trusts (the gateway CA in
//! its system bundles) reaches a VM this way. As host root a file is opened without following
//! a symlink, as a share's directory is; its mode is not judged (host root's namespace box reads
//! a root-only file it was given too).

use std::io::Read;
use std::os::fd::OwnedFd;

use hull_box::spec::{SpecError, SpecField};
use hull_box::{BindMount, BoxError, BoxSpec};
use hull_vm::vm::{Ids, VmFile};

/// The most bytes of files copied into one guest (the system CA bundles a brokered box's root
/// has are ~220 KiB each); with base64 they stay well inside the agent's 4 MiB request line.
pub const MAX_TOTAL: u64 = 2 << 20;

fn refuse(m: &BindMount, why: &str) -> BoxError {
    BoxError::Spec(SpecError::Invalid {
        field: SpecField::Mounts,
        why: format!("{}: {why}", m.source.display()),
    })
}

/// Whether `m` is a file mount (anything but a directory: a share).
pub fn is_file_mount(m: &BindMount) -> bool {
    !m.source.is_dir()
}

/// Opens the file of `m` as the copy will be read, and its length and permission bits; refuses
/// a writable one and one that is not a regular file (decided on a path descriptor, before any
/// open that could act on a device or wait on a FIFO), and, as host root (`range`), one
/// reached through a symlink (as a share is: a link another user owns must not point host
/// root's VM at a file of someone else's).
fn open(m: &BindMount, range: Option<Ids>) -> Result<(OwnedFd, u64, u32), BoxError> {
    use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};
    if !m.read_only {
        return Err(refuse(
            m,
            "a file mounted writable: a VM gets a copy of a file, which cannot write back; mount it read-only (`:ro`) or mount its directory",
        ));
    }
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    let spot = match range {
        Some(_) => rustix::fs::openat2(
            CWD,
            &m.source,
            flags,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS,
        ),
        None => rustix::fs::open(&m.source, flags, Mode::empty()),
    }
    .map_err(|e| {
        let how = if range.is_some() {
            " (as host root without following a symlink: give its real path)"
        } else {
            ""
        };
        refuse(m, &format!("cannot be opened{how}: {e}"))
    })?;
    let st = rustix::fs::fstat(&spot).map_err(|e| refuse(m, &format!("cannot be read: {e}")))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(refuse(
            m,
            "only a directory or a regular file can be mounted in a VM",
        ));
    }
    // The regular file the path descriptor holds, opened for reading (as the caller).
    let fd = rustix::fs::open(
        format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&spot)).as_str(),
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| refuse(m, &format!("cannot be read: {e}")))?;
    let len = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    Ok((fd, len, st.st_mode & 0o777))
}

/// Checks the file mounts of `spec` as [`copies`] takes them, without reading them.
pub fn check(spec: &BoxSpec, range: Option<Ids>) -> Result<(), BoxError> {
    let mut total = 0u64;
    for m in spec.mounts.iter().filter(|m| is_file_mount(m)) {
        let (_, len, _) = open(m, range)?;
        total = total.saturating_add(len);
        if total > MAX_TOTAL {
            return Err(too_much(m));
        }
    }
    Ok(())
}

fn too_much(m: &BindMount) -> BoxError {
    refuse(
        m,
        &format!(
            "the files mounted in a VM total more than {} MiB (each is copied into the guest's memory): mount their directory instead",
            MAX_TOTAL >> 20
        ),
    )
}

/// The copies of `spec`'s file mounts, in its order, each decided on the descriptor it is read
/// from.
pub fn copies(spec: &BoxSpec, range: Option<Ids>) -> Result<Vec<VmFile>, BoxError> {
    let mut out = Vec::new();
    let mut total = 0u64;
    for m in spec.mounts.iter().filter(|m| is_file_mount(m)) {
        let (fd, _, mode) = open(m, range)?;
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(MAX_TOTAL - total + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| refuse(m, &format!("cannot be read: {e}")))?;
        total += bytes.len() as u64;
        if total > MAX_TOTAL {
            return Err(too_much(m));
        }
        out.push(VmFile {
            bytes,
            target: m.target.clone(),
            mode,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn mount(source: &Path, read_only: bool) -> BindMount {
        BindMount {
            source: source.to_path_buf(),
            target: "/etc/x.pem".into(),
            read_only,
        }
    }

    fn spec_with(m: BindMount) -> BoxSpec {
        let mut s = BoxSpec::new(vec!["true".into()]);
        s.mounts.push(m);
        s
    }

    fn why(e: BoxError) -> String {
        match e {
            BoxError::Spec(SpecError::Invalid { field, why }) => {
                assert_eq!(field, SpecField::Mounts);
                why
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_read_only_file_is_copied_with_its_bits_and_a_writable_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ca.pem");
        std::fs::write(&f, "PEM\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o4640)).unwrap();
        let got = copies(&spec_with(mount(&f, true)), None).unwrap();
        assert_eq!(
            got,
            vec![VmFile {
                bytes: b"PEM\n".to_vec(),
                target: "/etc/x.pem".into(),
                mode: 0o640,
            }]
        );
        let w = why(check(&spec_with(mount(&f, false)), None).unwrap_err());
        assert!(w.contains("read-only (`:ro`)"), "{w}");
        // A directory is a share, not a copy.
        assert!(copies(&spec_with(mount(dir.path(), false)), None)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn copies_past_the_cap_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("big");
        std::fs::write(&f, vec![b'x'; usize::try_from(MAX_TOTAL).unwrap() + 1]).unwrap();
        let w = why(check(&spec_with(mount(&f, true)), None).unwrap_err());
        assert!(w.contains("mount their directory instead"), "{w}");
        let w = why(copies(&spec_with(mount(&f, true)), None).unwrap_err());
        assert!(w.contains("more than 2 MiB"), "{w}");
    }

    #[test]
    fn as_host_root_a_link_is_refused_and_a_fifo_never_opened() {
        let range = Ids {
            uid: 0x7FFD_0000,
            gid: 0x7FFD_0000,
        };
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("private");
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        // The caller's own file, whatever its mode: the caller mounted it for the box.
        assert!(check(&spec_with(mount(&f, true)), Some(range)).is_ok());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let w = why(check(&spec_with(mount(&link, true)), Some(range)).unwrap_err());
        assert!(w.contains("without following a symlink"), "{w}");
        // An unprivileged caller reads what it can, as it would itself.
        assert_eq!(
            copies(&spec_with(mount(&link, true)), None).unwrap().len(),
            1
        );
        // A FIFO would block an open for reading: refused from its path descriptor.
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let w = why(check(&spec_with(mount(&fifo, true)), None).unwrap_err());
        assert!(w.contains("only a directory or a regular file"), "{w}");
    }
}
