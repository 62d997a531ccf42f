//! File access to cgroup control files, plus the one seam tests need.
//!
//! Control files are read and written as ordinary files (a write never creates a file, so a
//! missing control file shows up as ENOENT exactly as on cgroupfs). Directory creation and removal
//! go through [`DirOps`] because that is where cgroupfs differs from a plain filesystem: `mkdir`
//! makes the kernel populate control files and `rmdir` removes a directory full of them. Tests
//! plug in a double that imitates this over a tempdir.

use std::fmt::Debug;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// How box cgroup directories are made and removed. [`RealDirs`] everywhere but in tests.
pub trait DirOps: Send + Sync + Debug {
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    fn rmdir(&self, path: &Path) -> io::Result<()>;
}

/// Plain mkdir(2)/rmdir(2): on cgroupfs these create and destroy cgroups.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealDirs;

impl DirOps for RealDirs {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)
    }
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir(path)
    }
}

/// Writes `value` to an existing control file in one write(2).
pub(crate) fn write_value(path: &Path, value: &str) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).truncate(true).open(path)?;
    file.write_all(value.as_bytes())
}

/// Writes `value`, turning a failure into the human-readable reason `unenforced` carries.
pub(crate) fn write_reason(path: &Path, value: &str) -> Result<(), String> {
    write_value(path, value).map_err(|e| format!("writing {value:?} to {}: {e}", path.display()))
}

pub(crate) fn read_value(path: &Path) -> io::Result<String> {
    fs::read_to_string(path)
}

/// The number after `key` in a flat-keyed file such as `memory.events` or `memory.oom_control`.
pub(crate) fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some(key)).then(|| words.next()?.parse().ok())?
    })
}

/// Whitespace-separated words of a control file such as `cgroup.controllers`, without the `+`
/// a test double may have kept from our own `+memory` write.
pub(crate) fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.trim_start_matches('+').to_owned())
        .collect()
}

/// The pids listed in a `cgroup.procs` file, or `None` if it cannot be read.
pub(crate) fn read_pids(path: &Path) -> io::Result<Vec<libc::pid_t>> {
    let text = read_value(path)?;
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_values() {
        let text = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(keyed_value(text, "oom_kill"), Some(3));
        assert_eq!(keyed_value(text, "oom"), None);
        assert_eq!(keyed_value("max junk\n", "max"), None);
    }

    #[test]
    fn write_never_creates() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_value(&dir.path().join("memory.max"), "1").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
