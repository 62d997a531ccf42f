//! The crate's error type. Only structural problems are errors; a limit the host cannot enforce is
//! not an error but an entry in `BoxCgroup::unenforced`, so a box still runs on a host without
//! delegated cgroups.

use std::io;
use std::path::PathBuf;

/// Why detection, creation or removal of box cgroups failed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A `/proc` file (or a control file needed to decide the layout) could not be read.
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A cgroup line of mountinfo or /proc/self/cgroup did not have the expected shape.
    #[error("malformed {file} line {line:?}: {why}")]
    Parse {
        file: &'static str,
        line: String,
        why: &'static str,
    },
    /// Neither a cgroup v1 hierarchy nor a cgroup2 filesystem is mounted.
    #[error("no cgroup filesystem is mounted (mountinfo has no cgroup or cgroup2 entry)")]
    NotMounted,
    /// `HULL_CGROUP_PARENT` (or the override passed to `detect_from`) is not a plain relative path.
    #[error("invalid HULL_CGROUP_PARENT {value:?}: {why}")]
    InvalidParent { value: String, why: &'static str },
    /// The caller-chosen box cgroup name could escape its parent or is not a plain directory name.
    #[error("invalid box cgroup name {name:?}: {why}")]
    InvalidName { name: String, why: &'static str },
    /// A box cgroup of that name already exists (a stale box, or a name reused while alive).
    #[error("box cgroup {path} already exists")]
    Exists { path: PathBuf },
    /// A path cannot be passed to the kernel (it contains a NUL byte).
    #[error("path {path:?} contains a NUL byte")]
    NulInPath { path: PathBuf },
    /// Writing a pid into a box's `cgroup.procs` failed.
    #[error("moving pid {pid} into {path}")]
    Join {
        pid: u32,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A box cgroup directory could not be removed (still busy after the retry window, or denied).
    #[error("removing box cgroup {path}")]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}
