//! As host root, the host ids a VM's root takes on each directory it shares. A namespace box's
//! root is hull's range there (`hull_box::remap`), and a directory it writes reaches it
//! idmapped, its owner shown as the box's root, with setuid and setgid bits refused by the
//! box's seccomp policy. A VM's files go through virtiofsd, and the guest's kernel is not
//! hull's to filter: whatever owner the guest's root writes as, it can also leave a setuid
//! program of that owner's on the host. So that owner is never host root: the image (read
//! only) and a directory hull made for the VM are hull's range; a directory the caller gave is
//! its owner's, and refused writable when host root owns it.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use hull_box::spec::{SpecError, SpecField};
use hull_box::BoxError;
use hull_vm::vm::Ids;

/// hull's range (the ids host root's boxes map their root to), `None` for an unprivileged
/// caller (the guest's root is the caller on every share).
pub fn range() -> Option<Ids> {
    hull_box::remap::box_root().map(|(uid, gid)| Ids { uid, gid })
}

/// The ids the guest's root writes `dir` as (host root only): its owner's, except host root's
/// (hull's range instead, and a writable directory of host root's refused naming `field`).
pub fn of_share(
    dir: &Path,
    read_only: bool,
    field: SpecField,
    range: Ids,
) -> Result<Ids, BoxError> {
    let meta = std::fs::metadata(dir).map_err(|error| BoxError::Io {
        what: format!("looking up the owner of {}", dir.display()),
        error,
    })?;
    if meta.uid() == 0 && !read_only {
        return Err(BoxError::Spec(SpecError::Invalid {
            field,
            why: format!(
                "{} is host root's, and a VM's root cannot write it as host root (the guest could leave a setuid-root program there; its kernel is not hull's to filter): give the directory to another user (hull's own range is {}:{}), share it read-only, or run hull as an unprivileged user",
                dir.display(),
                range.uid,
                range.gid
            ),
        }));
    }
    Ok(Ids {
        uid: if meta.uid() == 0 {
            range.uid
        } else {
            meta.uid()
        },
        gid: if meta.gid() == 0 {
            range.gid
        } else {
            meta.gid()
        },
    })
}
