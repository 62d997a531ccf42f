//! Host root's boxes: their ids map to a range of hull's own, never to host root.
//!
//! An unprivileged caller's box maps its root to the caller, so nothing the box does on a host
//! path carries more than the caller's own rights. Host root's box used to map its root to host
//! uid 0, so a file it made in a host directory (a named `--workspace`, a `--mount`) was host
//! root's, a setuid bit on it made a setuid-root program for every local user, and a file
//! capability it wrote was a host capability. Now, when hull runs as root, box ids 0..65535 map
//! to host ids [`BASE`]..[`BASE`]+65535, written by the supervisor (the box cannot map ids other
//! than its own), and the box switches to its root once its bind sources are open.
//!
//! Host directories the box may write reach it as idmapped copies the supervisor makes before
//! the box's namespaces exist (only root in the initial user namespace may idmap a host file
//! system): the directory's owner is shown to the box as its own root, and what the box creates
//! there belongs to that owner on disk, as a rootless box's files belong to its caller. A
//! temporary workspace, made by hull for one box, is given to [`BASE`] instead (one `chown`,
//! cheaper than an idmapped mount on the one-shot path). Setuid and setgid bits are refused by
//! the seccomp policy, so the owner's rights never travel with a file the box made.

use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;

use crate::sys::{self, Errno};

/// The first host uid and gid of the range host root's boxes map to: box id N is host id
/// `BASE + N`. Far above the ids distributions give users and services (`useradd` stops at
/// 60000, systemd's dynamic users end at 65519) and above systemd-nspawn's container range
/// (524288-1879048191), and below systemd's "foreign" range (2147352576-2147418111).
pub const BASE: u32 = 0x7FFD_0000;

/// How many ids the range holds (what `--subids` maps for host root).
pub const COUNT: u32 = 65536;

/// The host uid and gid a box's root maps to when that is not the caller's own: `Some` for
/// host root.
pub fn box_root() -> Option<(u32, u32)> {
    (sys::geteuid() == 0).then_some((BASE, BASE))
}

/// User namespaces already made for idmapped mounts, by the maps they hold: one per distinct
/// owner of a directory given to boxes (and one for `--subids`), for the life of the process.
static USERNS: Mutex<Vec<(String, OwnedFd)>> = Mutex::new(Vec::new());

/// An idmapped copy of the host directory or file `path` (opened without following symlinks)
/// for a box whose ids 0..`count` are host ids `to`..: with one id, its owner appears as the
/// box's root and what the box creates there belongs to that owner on disk; with `--subids`
/// (`count` > 1), ids on disk are the box's own (0..`count`), as host root's boxes had them.
/// The caller names `path` in its error (`BoxError::Idmap`).
pub(crate) fn tree(path: &CStr, to: (u32, u32), count: u32) -> Result<OwnedFd, Errno> {
    let src = sys::open_path_no_symlinks(path)?;
    let owner = if count > 1 {
        (0, 0)
    } else {
        sys::owner_of(src.as_fd())?
    };
    let maps = (
        format!("{} {} {count}\n", owner.0, to.0),
        format!("{} {} {count}\n", owner.1, to.1),
    );
    let ns = userns(&maps)?;
    sys::idmapped_tree(src.as_fd(), ns.as_fd())
}

/// The user namespace with these uid and gid maps (a descriptor of our own to use and drop).
fn userns(maps: &(String, String)) -> Result<OwnedFd, Errno> {
    let key = format!("{}/{}", maps.0, maps.1);
    let io = |e: std::io::Error| Errno(e.raw_os_error().unwrap_or(libc::EIO));
    let mut made = crate::poison::lock(&USERNS);
    if let Some((_, fd)) = made.iter().find(|(k, _)| *k == key) {
        return fd.try_clone().map_err(io);
    }
    let fd = sys::userns_with_maps(maps.0.as_bytes(), maps.1.as_bytes())?;
    let copy = fd.try_clone().map_err(io)?;
    made.push((key, fd));
    Ok(copy)
}
