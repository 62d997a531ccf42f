//! Errors of the Sandbox layer. A call that ran and failed is not an error: that is an
//! [`crate::ExecResult`] with a fault. These are the calls that could not be made.
//!
//! Messages name the argument as the Sandbox's callers spell it (`mounts`, `memory_mb`: the
//! SDKs' argument names, `sandbox.create`'s keys) and never repeat their cause's text: a front
//! end shows the chain ([`hull_api::Chain`]).

use std::fmt;
use std::path::PathBuf;

use hull_box::{BoxError, SpecField};

/// Why a sandbox call could not be made. Each message names the argument or path and the fix.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A bad argument, refused before anything was created.
    #[error("{arg}: {why}")]
    Invalid { arg: String, why: String },
    /// The engine refused an argument (a sensitive mount source, a limit) or could not use a
    /// host path one names.
    #[error(transparent)]
    Refused(Named<BoxError>),
    /// The image could not be found or opened.
    #[error(transparent)]
    Image(Named<hull_image::ImageError>),
    /// The network asked for cannot be given by this build (a gateway mode before hull-net's
    /// gateway is wired).
    #[error(transparent)]
    Network(Named<crate::boxspec::NetworkUnavailable>),
    /// The box could not be built or started.
    #[error(transparent)]
    Box(#[from] BoxError),
    /// The setup command ended without success.
    #[error("setup `{command}` failed ({why}); its stderr ends with: {stderr_tail}")]
    SetupFailed {
        command: String,
        why: String,
        stderr_tail: String,
    },
    /// A workspace path was refused.
    #[error("{path}: {why}")]
    Path { path: String, why: String },
    /// A workspace path could not be opened for a reason of the system's (it does not exist,
    /// access was denied): the message names the path, the system's error is its source.
    #[error("{path}")]
    PathFailed {
        path: String,
        #[source]
        error: std::io::Error,
    },
    /// A file operation failed on the host.
    #[error("{what} {}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    /// An archive member was refused (restore).
    #[error("archive member `{member}` refused: {why}")]
    Member { member: String, why: String },
    /// The in-box runner could not be reached.
    #[error("the box's runner: could not {what}")]
    RunnerIo {
        what: &'static str,
        #[source]
        error: std::io::Error,
    },
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

/// An error about one argument, shown as `arg: error`. The error's own text is part of this
/// message, so its causes (not the error itself) come next in a chain.
#[derive(Debug)]
pub struct Named<E> {
    /// The argument as the caller spelled it.
    pub arg: &'static str,
    pub error: E,
}

impl<E: fmt::Display> fmt::Display for Named<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.arg, self.error)
    }
}

impl<E: std::error::Error> std::error::Error for Named<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// The Sandbox argument (`sandbox.create`'s key, the SDKs' argument) a spec field comes from.
pub fn sandbox_arg(field: SpecField) -> &'static str {
    match field {
        SpecField::Command => "argv",
        SpecField::Env => "env",
        SpecField::Root => "image",
        SpecField::Workspace => "workspace",
        SpecField::TmpSize | SpecField::Tmpfs => "tmpfs",
        SpecField::Mounts => "mounts",
        SpecField::CapAdd | SpecField::CapDrop => "cap_drop",
        SpecField::Memory => "memory_mb",
        SpecField::Pids => "pids",
        SpecField::Cpus => "cpus",
        SpecField::Timeout => "timeout_s",
        SpecField::MaxOutput => "max_output_bytes",
        SpecField::Cwd => "cwd",
        SpecField::Hostname => "hostname",
        SpecField::Subids => "subids",
        SpecField::RequireLimits => "require_limits",
        SpecField::Network => "network",
        SpecField::User => "user",
        SpecField::Stdin => "stdin",
    }
}

impl From<hull_api::RequestError> for SandboxError {
    fn from(e: hull_api::RequestError) -> SandboxError {
        SandboxError::Invalid {
            arg: e.arg,
            why: e.why,
        }
    }
}

impl SandboxError {
    /// A box-engine error, named by the Sandbox argument it is about when it is about one.
    pub fn from_box(e: BoxError) -> SandboxError {
        match e.field() {
            Some(f) => SandboxError::Refused(Named {
                arg: sandbox_arg(f),
                error: e,
            }),
            None => SandboxError::Box(e),
        }
    }

    /// The spec field the error is about, if any (front ends that spell arguments their own
    /// way, such as `hull mcp`'s variables, name it from this).
    pub fn field(&self) -> Option<SpecField> {
        match self {
            SandboxError::Refused(n) => n.error.field(),
            SandboxError::Image(_) => Some(SpecField::Root),
            _ => None,
        }
    }

    /// The argument the error is about, as the Sandbox's callers spell it.
    pub fn arg(&self) -> Option<&str> {
        match self {
            SandboxError::Invalid { arg, .. } => Some(arg),
            SandboxError::Refused(n) => Some(n.arg),
            SandboxError::Image(n) => Some(n.arg),
            SandboxError::Network(n) => Some(n.arg),
            _ => None,
        }
    }

    /// A stable word for JSON front ends (the Python SDK maps these to exception classes).
    pub fn kind(&self) -> &'static str {
        match self {
            SandboxError::Invalid { .. } | SandboxError::Image(_) => "invalid_argument",
            SandboxError::Network(_) => "network_unavailable",
            SandboxError::Refused(n) => match &n.error {
                BoxError::Spec(
                    hull_box::spec::SpecError::DuplicateTarget(_)
                    | hull_box::spec::SpecError::TmpfsCoversBind { .. },
                ) => "mount_refused",
                BoxError::Spec(e) if e.field() == SpecField::Mounts => "mount_refused",
                BoxError::Spec(_) => "invalid_argument",
                BoxError::Source {
                    field: SpecField::Mounts,
                    ..
                } => "mount_refused",
                e => e.kind(),
            },
            SandboxError::Box(e) => e.kind(),
            SandboxError::SetupFailed { .. } => "setup_failed",
            SandboxError::Path { .. }
            | SandboxError::PathFailed { .. }
            | SandboxError::Member { .. } => "path_refused",
            SandboxError::Io { .. } => "io",
            SandboxError::RunnerIo { .. } | SandboxError::Runner(_) => "runner",
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
