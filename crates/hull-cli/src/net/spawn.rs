//! The supervisor's side of a box's gateway: starting `hull __net` with the box's TAP, waiting
//! for it to serve (so the box's command never runs without its network), changing its policy
//! and ports while the box runs, and ending it with the box. The gateway is given the TAP and
//! its log as descriptors, the policy on its stdin: nothing of them on a command line.
//!
//! Ending is not waited for: the gateway's exit closes the TAP, which takes the kernel ~23 ms
//! to unregister, so [`GatewayProcess`]'s drop closes the gateway's stdin and reaps it on a
//! thread of its own, off the box's result path.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use super::wire::{Answer, Control, PolicySpec, Start};

/// Why a gateway could not be started or asked.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("find the hull binary")]
    Exe(#[source] std::io::Error),
    #[error("start the network gateway (hull __net)")]
    Spawn(#[source] std::io::Error),
    #[error("talk to the network gateway")]
    Io(#[source] std::io::Error),
    #[error("the network gateway ended without answering")]
    Gone,
    #[error("the network gateway: {0}")]
    Refused(String),
    #[error("the network gateway answered {0:?}")]
    Unexpected(Box<Answer>),
}

/// A running gateway of one box (see the module comment).
#[derive(Debug)]
pub struct GatewayProcess {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The published ports: (box port, host port on 127.0.0.1).
    pub ports: Vec<(u16, u16)>,
}

impl GatewayProcess {
    /// Starts the gateway of the box whose TAP is `tap`, with `start`'s policy and ports and
    /// `log` as its connection log; returns once it serves the box.
    pub fn start(
        tap: OwnedFd,
        start: &Start,
        log: Option<std::fs::File>,
    ) -> Result<GatewayProcess, GatewayError> {
        let exe = std::env::current_exe().map_err(GatewayError::Exe)?;
        GatewayProcess::start_with(&exe, tap, start, log)
    }

    /// [`GatewayProcess::start`] with the `hull` binary at `exe` (a test's, a caller that is not
    /// hull itself).
    pub fn start_with(
        exe: &std::path::Path,
        tap: OwnedFd,
        start: &Start,
        log: Option<std::fs::File>,
    ) -> Result<GatewayProcess, GatewayError> {
        // Above the numbers they go to, so placing one never overwrites the other's source.
        let tap =
            rustix::io::fcntl_dupfd_cloexec(&tap, 10).map_err(|e| GatewayError::Spawn(e.into()))?;
        let log = log
            .map(|l| rustix::io::fcntl_dupfd_cloexec(&l, 10))
            .transpose()
            .map_err(|e| GatewayError::Spawn(e.into()))?;
        let mut cmd = Command::new(exe);
        cmd.arg("__net")
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        crate::sys::give_fd(&mut cmd, tap.as_raw_fd(), super::gateway::TAP_FD);
        if let Some(l) = &log {
            crate::sys::give_fd(&mut cmd, l.as_raw_fd(), super::gateway::LOG_FD);
        }
        let mut child = cmd.spawn().map_err(GatewayError::Spawn)?;
        // Only the gateway holds them now.
        drop((tap, log));
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(GatewayError::Gone);
        };
        let mut g = GatewayProcess {
            child: Some(child),
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            ports: Vec::new(),
        };
        match g.ask_line(&serde_json::to_string(start).map_err(|e| GatewayError::Io(e.into()))?)? {
            Answer::Ready { ports } => {
                g.ports = ports;
                Ok(g)
            }
            other => Err(GatewayError::Unexpected(Box::new(other))),
        }
    }

    /// Replaces the policy: the box's next connections and DNS queries are judged by it.
    pub fn set_policy(&mut self, policy: &PolicySpec) -> Result<(), GatewayError> {
        self.ask(&Control::SetPolicy {
            policy: policy.clone(),
        })
        .map(drop)
    }

    /// Publishes one more box port; its host port.
    pub fn publish(&mut self, port: u16) -> Result<u16, GatewayError> {
        match self.ask(&Control::Publish { port })? {
            Some(v) => v
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .ok_or_else(|| GatewayError::Refused(format!("a host port of {v}"))),
            None => Err(GatewayError::Refused("no host port".into())),
        }
    }

    /// Withdraws a published port; whether it was published.
    pub fn withdraw(&mut self, port: u16) -> Result<bool, GatewayError> {
        Ok(self
            .ask(&Control::Withdraw { port })?
            .and_then(|v| v.as_bool())
            .unwrap_or(false))
    }

    fn ask(&mut self, c: &Control) -> Result<Option<serde_json::Value>, GatewayError> {
        let line = serde_json::to_string(c).map_err(|e| GatewayError::Io(e.into()))?;
        match self.ask_line(&line)? {
            Answer::Ok { value } => Ok(value),
            other => Err(GatewayError::Unexpected(Box::new(other))),
        }
    }

    fn ask_line(&mut self, line: &str) -> Result<Answer, GatewayError> {
        let stdin = self.stdin.as_mut().ok_or(GatewayError::Gone)?;
        writeln!(stdin, "{line}").map_err(GatewayError::Io)?;
        stdin.flush().map_err(GatewayError::Io)?;
        let mut got = String::new();
        if self.stdout.read_line(&mut got).map_err(GatewayError::Io)? == 0 {
            return Err(GatewayError::Gone);
        }
        match serde_json::from_str(&got).map_err(|e| GatewayError::Io(e.into()))? {
            Answer::Error { message } => Err(GatewayError::Refused(message)),
            a => Ok(a),
        }
    }

    /// The gateway's pid (tests, `hull doctor`).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        // Its stdin's end stops it; it is reaped off the caller's path (see the module comment).
        drop(self.stdin.take());
        if let Some(mut child) = self.child.take() {
            std::thread::spawn(move || {
                let _ = child.wait();
            });
        }
    }
}
