//! The gateway process's own confinement (`hull __net`): it parses a box's hostile frames (and,
//! with credential brokering, its TLS and HTTP) and may hold secrets and the CA key, so once it
//! has what it needs from the host (its descriptors, the host resolver's configuration, its
//! listening sockets) it gives up everything else: no host file (an empty read-only root in a
//! mount namespace of its own), no capability, no privilege to gain, not dumpable (its memory
//! and `/proc` entries closed to the caller's other processes), and the boxes' own seccomp
//! allowlist. It keeps the host's network namespace: it dials the upstreams.
//!
//! Host root's gateway first becomes [`GATEWAY_ID`], an id of no box and no host user.

use hull_seccomp::{CompileOptions, KillMode};

/// The host id host root's gateways run as: just past hull's id range for boxes (whose roots
/// and users are `hull_box::remap`'s range), so no box's id is the gateway's.
pub const GATEWAY_ID: u32 = hull_box::remap::BASE + 65_536;

/// Why the gateway could not confine itself (it then refuses to serve: a box never gets a
/// network through an unconfined gateway).
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("the gateway could not isolate itself")]
    Isolate(#[from] crate::sys::IsolateError),
    #[error("the gateway's seccomp filter")]
    Seccomp(#[source] std::io::Error),
    #[error("compile the gateway's seccomp filter")]
    Compile(#[from] hull_seccomp::SeccompError),
}

/// Confines this process for good. Must run before it starts a thread.
pub fn confine() -> Result<(), ConfineError> {
    // Compiled before the root goes away (nothing is read from disk, but the allocation and
    // the policy's parse happen here, not under the filter).
    let program = hull_seccomp::compile(
        hull_seccomp::default_policy(),
        &CompileOptions {
            kill_mode: KillMode::KillProcess,
            ..CompileOptions::default()
        },
    )?;
    let ids = rustix::process::geteuid()
        .is_root()
        .then_some((GATEWAY_ID, GATEWAY_ID));
    crate::sys::isolate_self(ids)?;
    crate::sys::install_seccomp(&program).map_err(ConfineError::Seccomp)
}
