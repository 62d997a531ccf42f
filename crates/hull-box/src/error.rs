//! Errors of a box that could not be built or started. A box that ran and failed is not an
//! error: that is a [`crate::result::RunResult`] with a fault.

use std::path::PathBuf;

use crate::spec::SpecError;
use crate::sys::Errno;

/// Why a box could not run. The program never started in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum BoxError {
    /// The request was refused before anything was created.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A setup step inside the box failed; reported by the box itself over its channel.
    #[error("box setup failed at step {index} ({step}{}): {errno}{}", path.as_ref().map(|p| format!(" {p}")).unwrap_or_default(), hint.as_ref().map(|h| format!("; {h}")).unwrap_or_default())]
    Setup {
        index: usize,
        step: &'static str,
        path: Option<String>,
        errno: Errno,
        hint: Option<String>,
    },
    /// Creating the box's namespaces failed.
    #[error("could not create the box's namespaces: {errno}; {hint}")]
    Clone { errno: Errno, hint: String },
    /// A bind source could not be opened.
    #[error("{arg} {}: {errno}", path.display())]
    Source {
        arg: &'static str,
        path: PathBuf,
        errno: Errno,
    },
    /// As host root, a host directory the box may write could not be given to it as an
    /// idmapped copy (see [`crate::remap`]).
    #[error("{arg} {path}: cannot give it to the box without host root's ids (an idmapped mount failed: {errno}){}", idmap_hint(*errno))]
    Idmap {
        arg: &'static str,
        path: String,
        errno: Errno,
    },
    /// A limit was requested with --require-limits but cannot be enforced here.
    #[error("--require-limits: {0}")]
    LimitsUnenforced(String),
    /// The box's channel broke the protocol.
    #[error("the box sent a malformed message: {0}")]
    Protocol(#[from] crate::proto::ProtoError),
    /// The box sent a message out of turn.
    #[error(transparent)]
    Unexpected(#[from] crate::proto::UnexpectedMessage),
    /// The box ended before reporting that setup finished.
    #[error("the box exited during setup without reporting why (wait status {0:#x})")]
    SetupVanished(i32),
    /// `--subids` cannot be honoured: no range, or the uidmap helpers failed.
    #[error("--subids: {0}")]
    SubIds(String),
    #[error("cgroup: {0}")]
    Cgroup(#[from] hull_cgroup::CgroupError),
    #[error("seccomp: {0}")]
    Seccomp(String),
    #[error("{what}: {errno}")]
    Sys { what: &'static str, errno: Errno },
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
}

/// The fix for a failed idmapped mount.
fn idmap_hint(errno: Errno) -> &'static str {
    match errno.0 {
        libc::EINVAL | libc::EOPNOTSUPP => "; its file system does not support idmapped mounts (ext4, xfs, btrfs and tmpfs do): use a directory on one of those, or run hull as an unprivileged user",
        libc::ELOOP => "; a component of the path is a symlink: give the resolved path",
        _ => "",
    }
}

impl BoxError {
    /// The error's kind, a stable word for JSON front ends.
    pub fn kind(&self) -> &'static str {
        match self {
            BoxError::Spec(_) => "invalid_argument",
            BoxError::Setup { .. } | BoxError::SetupVanished(_) => "setup_failed",
            BoxError::Clone { .. } => "namespaces_unavailable",
            BoxError::Source { .. } | BoxError::Idmap { .. } => "mount_source",
            BoxError::LimitsUnenforced(_) => "limits_unenforced",
            BoxError::SubIds(_) => "subids_unavailable",
            BoxError::Protocol(_) | BoxError::Unexpected(_) => "protocol",
            BoxError::Cgroup(_) => "cgroup",
            BoxError::Seccomp(_) => "seccomp",
            BoxError::Sys { .. } | BoxError::Io { .. } => "host",
        }
    }
}
