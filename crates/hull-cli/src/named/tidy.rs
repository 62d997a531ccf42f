//! Small helpers the verbs and the template store share (a leaf: imports no other module of
//! `named`): removing a tree the sandbox may have made unreadable, and short ages.

/// Removes `path` and everything under it; a missing one is fine.
pub fn remove_tree(path: &std::path::Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            // Directories the sandbox (or overlayfs: `work/work` is mode 000) made unreadable
            // to their owner: opened up, then removed.
            open_up(path, 0);
            match std::fs::remove_dir_all(path) {
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    remove_as_subids(path).map_err(|()| e)
                }
                r => r,
            }
        }
        r => r,
    }
}

/// Removes what a sandbox of an unprivileged caller gave to its other users (`--user`: files
/// of ids of the caller's /etc/subuid range, which the caller cannot remove as itself), from a
/// user namespace mapped as the sandbox's was (hull-box's `remove_tree_mapped`).
fn remove_as_subids(path: &std::path::Path) -> Result<(), ()> {
    let (uid, gid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    if uid == 0 {
        return Err(());
    }
    let (uids, gids) = hull_box::subids::lookup(uid, gid).map_err(drop)?;
    hull_box::subids::remove_tree_mapped(path, &uids, &gids).map_err(drop)
}

/// Gives every directory under `p` (not following links) its owner's rwx.
fn open_up(p: &std::path::Path, depth: usize) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return;
    };
    if !md.is_dir() || depth > 256 {
        return;
    }
    let mode = md.permissions().mode() | 0o700;
    let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            open_up(&e.path(), depth + 1);
        }
    }
}

/// A short age: `42s`, `5m`, `3h`, `2d`.
pub fn age(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}
