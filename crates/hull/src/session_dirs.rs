//! The host directories a session makes in `$TMPDIR` (its session directory, each runner box's
//! private socket directory): how they are named, so a later hull sweeps them, and their mode.
//! A leaf module: the sandbox and the runner boxes both make such directories.

use std::path::Path;

/// A name prefix for host directories a session makes in `$TMPDIR`: hull-box's temporary
/// workspace pattern (`hull-ws-<owner id>-...`, see `hull_box::owner`), so if this process is
/// SIGKILLed, the next `hull run` or `hull doctor` removes them as it removes a dead hull's box
/// workspaces.
pub(crate) fn leftover_prefix(kind: &str) -> String {
    format!("hull-ws-{}-{kind}-", hull_box::owner::id())
}

/// Session directories are the caller's alone (0700): the workspace holds the box's files, which
/// other host users have no business reading.
pub(crate) fn private_dir_mode() -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    std::fs::Permissions::from_mode(0o700)
}

/// Makes `p` with [`private_dir_mode`].
pub(crate) fn private_dir(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(p)
}
