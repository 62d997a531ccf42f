//! As host root, the host ids a VM's root takes on each directory it shares. A namespace box's
//! root is hull's range there (`hull_box::remap`), and a directory it writes reaches it
//! idmapped, its owner shown as the box's root, with setuid and setgid bits refused by the
//! box's seccomp policy. A VM's files go through virtiofsd, and the guest's kernel is not
//! hull's to filter: whatever owner the guest's root writes as, it can also leave a setuid
//! program of that owner's on the host. So that owner is never host root: the image (read
//! only) and a directory hull made for the VM are hull's range; a directory the caller gave is
//! its owner's (with the range's group, so no group the owner was not given), refused writable
//! when host root owns it, and refused when reached through a symlink.

use std::path::Path;

use hull_box::spec::{SpecError, SpecField};
use hull_box::BoxError;
use hull_vm::vm::Ids;

/// hull's range (the ids host root's boxes map their root to), `None` for an unprivileged
/// caller (the guest's root is the caller on every share).
pub fn range() -> Option<Ids> {
    hull_box::remap::box_root().map(|(uid, gid)| Ids { uid, gid })
}

/// Refuses, naming the flag it came from, a caller's directory `dir` that the VM would refuse
/// as a share chosen by its owner (`hull_vm::share::ShareIds::Owner`, host root only): host
/// root's (writable), or one reached through a symlink (host root must not follow a link
/// another user planted). The VM decides again on the directory as it opens it.
pub fn check_share(
    dir: &Path,
    read_only: bool,
    field: SpecField,
    range: Ids,
) -> Result<(), BoxError> {
    let refuse = |why: String| {
        BoxError::Spec(SpecError::Invalid {
            field,
            why: format!("{}: {why}", dir.display()),
        })
    };
    let fd = hull_vm::share::open_no_symlinks(dir).map_err(|e| {
        refuse(format!(
            "cannot be opened without following a symlink ({e}); as host root a VM's shares are opened that way: give the directory's real path"
        ))
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| BoxError::Io {
        what: format!("looking up the owner of {}", dir.display()),
        error: e.into(),
    })?;
    hull_vm::share::owner_ids(st.st_uid, read_only, range).map_err(|e| {
        refuse(format!(
            "{e}: give the directory to another user (hull's own range is {}:{}), share it read-only, or run hull as an unprivileged user",
            range.uid, range.gid
        ))
    })?;
    Ok(())
}
