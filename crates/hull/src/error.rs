//! Errors of the Sandbox layer. A call that ran and failed is not an error: that is an
//! [`crate::ExecResult`] with a fault. These are the calls that could not be made.

use std::path::PathBuf;

/// Why a sandbox call could not be made. Each message names the argument or path and the fix.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A bad argument, refused before anything was created.
    #[error("{arg}: {why}")]
    Invalid { arg: String, why: String },
    /// A mount the box engine refused (a sensitive source or target).
    #[error("mounts: {0}")]
    MountRefused(#[source] hull_box::BoxError),
    /// The box could not be built or started.
    #[error(transparent)]
    Box(#[from] hull_box::BoxError),
    /// The setup command ended without success.
    #[error("setup `{command}` failed ({why}); its stderr ends with: {stderr_tail}")]
    SetupFailed {
        command: String,
        why: String,
        stderr_tail: String,
    },
    /// A workspace path was refused or could not be used.
    #[error("{path}: {why}")]
    Path { path: String, why: String },
    /// A file operation failed on the host.
    #[error("{what} {}: {error}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    /// An archive member was refused (restore).
    #[error("archive member `{member}` refused: {why}")]
    Member { member: String, why: String },
    /// The in-box runner broke its protocol or vanished before it was ready.
    #[error("the box's runner {0}")]
    Runner(String),
    /// The kernel's interpreter is gone (a timeout or crash killed it).
    #[error("kernel {0} is no longer running ({1}); start a new one with kernel()")]
    KernelDead(String, String),
    /// The sandbox was destroyed.
    #[error("the sandbox was destroyed; create a new one")]
    Destroyed,
}

impl SandboxError {
    /// A stable word for JSON front ends (the Python SDK maps these to exception classes).
    pub fn kind(&self) -> &'static str {
        match self {
            SandboxError::Invalid { .. } => "invalid_argument",
            SandboxError::MountRefused(_) => "mount_refused",
            SandboxError::Box(e) => e.kind(),
            SandboxError::SetupFailed { .. } => "setup_failed",
            SandboxError::Path { .. } | SandboxError::Member { .. } => "path_refused",
            SandboxError::Io { .. } => "io",
            SandboxError::Runner(_) => "runner",
            SandboxError::KernelDead(..) => "kernel_dead",
            SandboxError::Destroyed => "destroyed",
        }
    }

    pub(crate) fn invalid(arg: &str, why: impl Into<String>) -> SandboxError {
        SandboxError::Invalid {
            arg: arg.to_string(),
            why: why.into(),
        }
    }

    pub(crate) fn path(path: &str, why: impl Into<String>) -> SandboxError {
        SandboxError::Path {
            path: path.to_string(),
            why: why.into(),
        }
    }
}
