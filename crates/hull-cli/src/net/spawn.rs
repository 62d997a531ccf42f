//! The supervisor's side of a box's gateway: starting `hull __net` with the box's TAP, waiting
//! for it to serve (so the box's command never runs without its network), changing its policy
//! and ports while the box runs, and ending it with the box. The gateway is given the TAP and
//! its log as descriptors (over a socket, `SCM_RIGHTS`), the policy on its stdin: nothing of
//! them on a command line.
//!
//! The process is started ahead ([`Spare`]): while the box is being built, before its TAP
//! exists, so the exec and the start of `hull __net` (~2 ms) are off the box's path; the TAP
//! and the start line are handed to it when the box makes them.
//!
//! Ending is not waited for: the gateway's exit closes the TAP, which takes the kernel ~23 ms
//! to unregister, so [`GatewayProcess`]'s drop closes the gateway's stdin and reaps it on a
//! thread of its own, off the box's result path.

use std::io::{BufRead, BufReader, IoSlice, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

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

/// The memory a box's gateway may hold (its cgroup's cap): its connections' buffers at the
/// connection cap, DNS and TLS state, with room; past it the kernel's OOM killer ends the
/// gateway, and the box is left without network (fail closed), never the host short of memory.
pub const GATEWAY_MEMORY: u64 = 256 << 20;

/// A running gateway of one box (see the module comment).
#[derive(Debug)]
pub struct GatewayProcess {
    child: Option<Child>,
    /// Its cgroup ([`GATEWAY_MEMORY`]), removed once it is reaped.
    cgroup: Option<hull_box::helper_cgroup::Capping>,
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
        Spare::spawn()?.serve(tap, start, log)
    }

    /// [`GatewayProcess::start`] with the `hull` binary at `exe` (a test's, a caller that is not
    /// hull itself).
    pub fn start_with(
        exe: &std::path::Path,
        tap: OwnedFd,
        start: &Start,
        log: Option<std::fs::File>,
    ) -> Result<GatewayProcess, GatewayError> {
        Spare::spawn_with(exe)?.serve(tap, start, log)
    }

    /// Replaces the policy: the box's next connections and DNS queries are judged by it.
    pub fn set_policy(&mut self, policy: &PolicySpec) -> Result<(), GatewayError> {
        self.ask(&Control::SetPolicy {
            policy: policy.clone(),
        })
        .map(drop)
    }

    /// Replaces the broker's request transformations (`TransformSpec`s as JSON); refused by a
    /// gateway started without brokering, or for a transformation it cannot use.
    pub fn set_transformations(
        &mut self,
        transformations: serde_json::Value,
    ) -> Result<(), GatewayError> {
        self.ask(&Control::SetTransformations {
            transformations: super::wire::Hidden(transformations),
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
            Answer::Error { message } => Err(GatewayError::Refused(message)),
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

    /// Ends the gateway now and waits for it (its stdin's end stops it; killed if it has not
    /// gone in 2 s), then removes its cgroup: for a process about to exit itself (a named
    /// sandbox's keeper at stop), which would leave the reaping thread of a drop unfinished.
    pub fn end_now(mut self) {
        drop(self.stdin.take());
        if let Some(mut child) = self.child.take() {
            let t0 = std::time::Instant::now();
            while matches!(child.try_wait(), Ok(None)) {
                if t0.elapsed() > std::time::Duration::from_secs(2) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        if let Some(cg) = self.cgroup.take() {
            cg.end();
        }
    }

    /// The gateway's pid (tests, `hull doctor`).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// A gateway process started ahead of its box: it waits for its start line and descriptors.
/// Dropped unused, it ends (its stdin closes) and is reaped off the caller's path.
#[derive(Debug)]
pub struct Spare {
    child: Option<Child>,
    cgroup: Option<hull_box::helper_cgroup::Capping>,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    /// Our end of the socket the TAP and the log go through (the gateway's is its fd 3).
    handoff: OwnedFd,
}

impl Spare {
    /// Starts `hull __net` (this very binary).
    pub fn spawn() -> Result<Spare, GatewayError> {
        Spare::spawn_capped(false)
    }

    /// [`Spare::spawn`], and with `capped` the gateway is moved into a cgroup of its own whose
    /// memory is capped at [`GATEWAY_MEMORY`], by a thread once the cgroup exists. Not for every
    /// gateway: moving a process between cgroups takes the kernel's cgroup-wide lock, whose
    /// writer waits for an RCU grace period while every fork and exit on the host waits for it
    /// (measured here: a gateway box's start went from 4.8 to 13-17 ms with every gateway
    /// capped). A named sandbox's gateway lives for hours and starts once; a call's lives as
    /// long as its call's deadline.
    pub fn spawn_capped(capped: bool) -> Result<Spare, GatewayError> {
        let exe = std::env::current_exe().map_err(GatewayError::Exe)?;
        let mut s = Spare::spawn_with(&exe)?;
        if capped {
            s.cgroup = s
                .child
                .as_ref()
                .map(|c| hull_box::helper_cgroup::Capping::start("net", GATEWAY_MEMORY, c.id()));
        }
        Ok(s)
    }

    /// Starts `exe __net`.
    pub fn spawn_with(exe: &std::path::Path) -> Result<Spare, GatewayError> {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| GatewayError::Spawn(e.into()))?;
        // Above the number it goes to, so placing it never overwrites another source.
        let theirs = rustix::io::fcntl_dupfd_cloexec(&theirs, 10)
            .map_err(|e| GatewayError::Spawn(e.into()))?;
        let mut cmd = Command::new(exe);
        cmd.arg("__net")
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        crate::sys::give_fd(&mut cmd, theirs.as_raw_fd(), super::gateway::HANDOFF_FD);
        #[allow(clippy::cast_sign_loss)] // a small descriptor number
        crate::sys::cloexec_from(&mut cmd, (super::gateway::HANDOFF_FD + 1) as libc::c_uint);
        let mut child = cmd.spawn().map_err(GatewayError::Spawn)?;
        drop(theirs);
        Ok(Spare {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            child: Some(child),
            cgroup: None,
            handoff: ours,
        })
    }

    /// Hands the box's TAP, `log` and `start` to the gateway (with copies of the CA's two open
    /// files when `start` brokers); returns once it serves the box.
    pub fn serve(
        mut self,
        tap: OwnedFd,
        start: &Start,
        log: Option<std::fs::File>,
    ) -> Result<GatewayProcess, GatewayError> {
        // Copies of the pair opened when the brokering was set up (the gateway reads them
        // from their start).
        let ca = match (&start.broker, &start.ca_files.0) {
            (Some(_), Some(pair)) => Some((
                pair.0.try_clone().map_err(GatewayError::Io)?,
                pair.1.try_clone().map_err(GatewayError::Io)?,
            )),
            _ => None,
        };
        {
            let mut fds = vec![tap.as_fd()];
            let mut flags = 0u8;
            if let Some(l) = &log {
                fds.push(l.as_fd());
                flags |= super::gateway::HANDOFF_LOG;
            }
            if let Some((c, k)) = &ca {
                fds.push(c.as_fd());
                fds.push(k.as_fd());
                flags |= super::gateway::HANDOFF_CA;
            }
            let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            control.push(SendAncillaryMessage::ScmRights(&fds));
            rustix::net::sendmsg(
                &self.handoff,
                &[IoSlice::new(&[b'T', flags])],
                &mut control,
                SendFlags::empty(),
            )
            .map_err(|e| GatewayError::Io(e.into()))?;
        }
        // Only the gateway holds them now.
        drop((tap, log, ca));
        let (Some(stdin), Some(stdout), Some(child)) =
            (self.stdin.take(), self.stdout.take(), self.child.take())
        else {
            return Err(GatewayError::Gone);
        };
        let mut g = GatewayProcess {
            child: Some(child),
            cgroup: self.cgroup.take(),
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
}

impl Drop for Spare {
    fn drop(&mut self) {
        end_off_path(self.stdin.take(), self.child.take(), self.cgroup.take());
    }
}

/// Ends a gateway process: its stdin's end stops it, and it is reaped on a thread of its own,
/// off the caller's path (see the module comment).
fn end_off_path(
    stdin: Option<ChildStdin>,
    child: Option<Child>,
    cgroup: Option<hull_box::helper_cgroup::Capping>,
) {
    drop(stdin);
    if let Some(mut child) = child {
        std::thread::spawn(move || {
            let _ = child.wait();
            if let Some(cg) = cgroup {
                cg.end();
            }
        });
    } else if let Some(cg) = cgroup {
        cg.end();
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        end_off_path(self.stdin.take(), self.child.take(), self.cgroup.take());
    }
}
