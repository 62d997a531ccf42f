//! As host root, whose host ids the guest's root takes on a share: fixed ones (hull's range,
//! for the image and the directories hull makes) or the shared directory's owner's, decided on
//! the directory as opened, never on a path looked up twice. The guest's kernel is not hull's
//! to filter, so whoever its root writes as, it can leave a setuid program of theirs: never
//! host root, and never a group the owner was not given (the group is always hull's range).

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use crate::sys::Ids;

/// How a share's ids are chosen (host root only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareIds {
    /// These ids (a directory hull made for the VM, the image).
    Fixed(Ids),
    /// The opened directory's owner, with the range's group; host root's, only read-only
    /// (and then the range).
    Owner { range: Ids },
}

/// A writable share host root owns: the guest's root would write it as host root.
#[derive(Debug, thiserror::Error)]
#[error("it is host root's, and a VM's root cannot write it as host root (the guest could leave a setuid-root program there; its kernel is not hull's to filter)")]
pub struct OwnedByRoot;

/// The ids of a share whose owner is `owner_uid` under [`ShareIds::Owner`].
pub fn owner_ids(owner_uid: u32, read_only: bool, range: Ids) -> Result<Ids, OwnedByRoot> {
    match (owner_uid, read_only) {
        (0, false) => Err(OwnedByRoot),
        (0, true) => Ok(range),
        (uid, _) => Ok(Ids {
            uid,
            gid: range.gid,
        }),
    }
}

/// Opens the directory `dir` for a share chosen by its owner: no symlink anywhere in the path
/// (host root must not be pointed at another user's directory by a link that user owns).
pub fn open_no_symlinks(dir: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};
    rustix::fs::openat2(
        CWD,
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    )
    .map_err(io::Error::from)
}

/// Opens `dir` for a share with `how`, and the ids its helper then runs as.
pub fn open(dir: &Path, how: ShareIds, read_only: bool) -> Result<(OwnedFd, Ids), ShareError> {
    match how {
        ShareIds::Fixed(ids) => {
            let fd = rustix::fs::open(
                dir,
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| ShareError::Open(e.into()))?;
            Ok((fd, ids))
        }
        ShareIds::Owner { range } => {
            let fd = open_no_symlinks(dir).map_err(ShareError::Open)?;
            let st = rustix::fs::fstat(&fd).map_err(|e| ShareError::Open(e.into()))?;
            let ids = owner_ids(st.st_uid, read_only, range).map_err(ShareError::Root)?;
            Ok((fd, ids))
        }
    }
}

/// Why a share could not be opened for its helper.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    #[error("it could not be opened (a symlink in its path is refused)")]
    Open(#[source] io::Error),
    #[error(transparent)]
    Root(OwnedByRoot),
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANGE: Ids = Ids {
        uid: 0x7FFD_0000,
        gid: 0x7FFD_0000,
    };

    #[test]
    fn host_roots_directory_is_never_written_as_root_and_the_group_is_the_ranges() {
        assert!(owner_ids(0, false, RANGE).is_err());
        assert_eq!(owner_ids(0, true, RANGE).unwrap(), RANGE);
        assert_eq!(
            owner_ids(1001, false, RANGE).unwrap(),
            Ids {
                uid: 1001,
                gid: RANGE.gid
            }
        );
    }

    #[test]
    fn a_symlink_in_an_owner_chosen_share_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let how = ShareIds::Owner { range: RANGE };
        assert!(open(&real, how, true).is_ok());
        assert!(matches!(
            open(&dir.path().join("link"), how, true),
            Err(ShareError::Open(_))
        ));
        // hull's own directories are followed.
        assert!(open(&dir.path().join("link"), ShareIds::Fixed(RANGE), true).is_ok());
    }
}
