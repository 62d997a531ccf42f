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
            std::fs::remove_dir_all(path)
        }
        r => r,
    }
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
