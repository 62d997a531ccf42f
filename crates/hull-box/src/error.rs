//! Errors of a box that could not be built or started. A box that ran and failed is not an
//! error: that is a [`crate::result::RunResult`] with a fault.

use std::path::PathBuf;

use crate::field::SpecField;
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
        /// The spec field whose step failed, where one is the caller's (a mount below a host
        /// directory, the working directory), for the front end to name its flag.
        field: Option<SpecField>,
    },
    /// Creating the box's namespaces failed.
    #[error("could not create the box's namespaces: {errno}; {hint}")]
    Clone { errno: Errno, hint: String },
    /// A bind source could not be opened.
    #[error("source {}: {errno}", path.display())]
    Source {
        field: SpecField,
        path: PathBuf,
        errno: Errno,
    },
    /// As host root, a host directory the box may write could not be given to it as an
    /// idmapped copy (see [`crate::remap`]). `field` is where the directory came from (the
    /// workspace or a mount), which front ends name as their caller spelled it.
    #[error("{path}: cannot give it to the box without host root's ids (an idmapped mount failed: {errno}){}", idmap_hint(*errno))]
    Idmap {
        field: SpecField,
        path: String,
        errno: Errno,
    },
    /// Limits were required (`require_limits`) but cannot all be enforced here: each cap that
    /// is not, and why.
    #[error(transparent)]
    LimitsUnenforced(crate::unenforced::UnenforcedCaps),
    /// The box's channel broke the protocol.
    #[error("the box sent a malformed message")]
    Protocol(#[from] crate::proto::ProtoError),
    /// The box sent a message out of turn.
    #[error(transparent)]
    Unexpected(#[from] crate::proto::UnexpectedMessage),
    /// The box ended before reporting that setup finished.
    #[error("the box exited during setup without reporting why (wait status {0:#x})")]
    SetupVanished(i32),
    /// `subids` cannot be honoured: no range, or the uidmap helpers failed.
    #[error(transparent)]
    SubIds(#[from] SubIdsError),
    #[error("could not set up the box's cgroup")]
    Cgroup(#[from] hull_cgroup::CgroupError),
    /// The kernel cannot filter system calls, and hull runs no code unfiltered.
    #[error("the kernel has no seccomp filter support (CONFIG_SECCOMP_FILTER); hull will not run code unfiltered")]
    NoSeccomp,
    /// The seccomp policy did not compile into a filter.
    #[error("the seccomp policy does not compile")]
    Seccomp(#[from] hull_seccomp::SeccompError),
    #[error("{what}: {errno}")]
    Sys { what: &'static str, errno: Errno },
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        error: std::io::Error,
    },
    /// The gateway network was asked for, but this user cannot open `/dev/net/tun` (the open's
    /// error is the cause). Never a fallback to no network or the host's.
    #[error("the gateway network needs {}, which this user cannot open; `chmod 0666 {}` (as root) makes it usable as most distributions ship it (`hull doctor` checks it)", crate::tap::TUN_DEVICE, crate::tap::TUN_DEVICE)]
    TunUnavailable {
        #[source]
        error: std::io::Error,
    },
    /// The gateway network was asked for without a [`crate::tap::TapHandler`] to take the TAP
    /// (see [`crate::tap::Handoff`]): the box would run without its gateway.
    #[error(
        "a box with the gateway network needs a handler for its TAP (Handoff::tap); none was given"
    )]
    NoTapHandler,
    /// The caller's [`crate::tap::TapHandler`] failed: the box was ended before its program.
    #[error("the box's gateway did not take its TAP")]
    Gateway {
        #[source]
        error: std::io::Error,
    },
    /// An invariant of hull's own code did not hold: a bug in hull, never the caller's doing.
    /// An error rather than a panic because hull's release builds abort on panic, and a
    /// long-lived front end (`hull serve`) would take every other caller's boxes down with it;
    /// this way only the call that hit the bug fails.
    #[error("internal error: {0} (a bug in hull; please report it)")]
    Internal(&'static str),
    /// Another isolation backend (the microVM tier) could not run the box: `what` names it,
    /// `kind` is the JSON front ends' word for it, the cause is the backend's own error.
    #[error("{what} could not run the program")]
    Backend {
        what: &'static str,
        kind: &'static str,
        #[source]
        error: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Why ids 1-65536 could not be mapped to the caller's sub-id ranges (see [`crate::subids`]).
#[derive(Debug, thiserror::Error)]
pub enum SubIdsError {
    #[error("cannot read {path} (install the uidmap package and give {name} a range: usermod --add-subuids/--add-subgids)")]
    Read {
        path: &'static str,
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} has no range for {name} (uid {uid}); add one, e.g. `usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {name}`")]
    NoRange {
        path: &'static str,
        name: String,
        uid: u32,
    },
    #[error("cannot run {helper} (install the uidmap package)")]
    Spawn {
        helper: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{helper} {pid} {args} failed ({status}): {stderr}")]
    Helper {
        helper: &'static str,
        pid: i32,
        args: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("rm -rf {} in a user namespace mapped like the box's failed (wait status {status:#x})", path.display())]
    Remove { path: PathBuf, status: i32 },
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
    /// The spec field the error is about, for a front end to name as its caller spelled it.
    pub fn field(&self) -> Option<SpecField> {
        match self {
            BoxError::Spec(e) => Some(e.field()),
            BoxError::Source { field, .. } | BoxError::Idmap { field, .. } => Some(*field),
            BoxError::Setup { field, .. } => *field,
            BoxError::LimitsUnenforced(_) => Some(SpecField::RequireLimits),
            BoxError::SubIds(_) => Some(SpecField::Subids),
            _ => None,
        }
    }

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
            BoxError::NoSeccomp | BoxError::Seccomp(_) => "seccomp",
            BoxError::Internal(_) => "internal",
            BoxError::Backend { kind, .. } => kind,
            BoxError::TunUnavailable { .. } => "network_unavailable",
            BoxError::NoTapHandler => "invalid_argument",
            BoxError::Gateway { .. } => "gateway",
            BoxError::Sys { .. } | BoxError::Io { .. } => "host",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seccomp policy that does not compile is a typed cause (what a front end's chain shows
    /// once), not text folded into the message.
    #[test]
    fn a_policy_that_does_not_compile_keeps_its_cause() {
        let opts = hull_seccomp::CompileOptions {
            kill_mode: hull_seccomp::KillMode::KillProcess,
            default_errno: 0,
        };
        let cause = hull_seccomp::compile(hull_seccomp::default_policy(), &opts).unwrap_err();
        let e = BoxError::from(cause.clone());
        assert_eq!(e.kind(), "seccomp");
        let source = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<hull_seccomp::SeccompError>());
        assert_eq!(source, Some(&cause));
        assert!(!e.to_string().contains(&cause.to_string()), "{e}");
    }
}
