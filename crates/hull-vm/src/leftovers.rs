//! What a hull killed before its VM ended leaves behind: its VM's private directory (sockets,
//! logs, QEMU's empty root), a temporary workspace, a KVM trial's directory. Each is named after
//! the pid of the hull that made it, so the next run can tell a dead owner's from a live one's.

use std::path::Path;

/// The names of a VM's private directories (and of a temporary workspace's, with `ws-`):
/// `hull-vm-[ws-]<pid of the hull that made it>-<random>`, so [`sweep`] can tell whose they are.
pub const DIR_PREFIX: &str = "hull-vm-";

/// Removes the private directories and temporary workspaces in `scratch` that a hull killed
/// before it could remove them left behind (their maker's pid no longer runs). QEMU and
/// virtiofsd died with that hull (their death signal).
pub fn sweep(scratch: &Path) {
    let Ok(dir) = std::fs::read_dir(scratch) else {
        return;
    };
    let me = rustix::process::getuid();
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let rest = rest.strip_prefix("ws-").unwrap_or(rest);
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let ours = e
            .metadata()
            .is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == me.as_raw() && m.is_dir());
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
