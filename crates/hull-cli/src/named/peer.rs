//! Who may drive a keeper: only processes of the keeper's own user in the keeper's own user
//! namespace. The control socket is 0600, but file modes are not enough: a rootless box's root
//! *is* the host user, so a box given a read-only view of the sandboxes directory (a `--mount`
//! of it, or a parent of it) could connect and run commands in every named sandbox, and write
//! their host workspaces. A box always lives in a user namespace of its own, so the namespace
//! check refuses it whatever it can see.

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;

/// Why a connection was refused (said on stderr of the keeper only; the peer just sees the
/// connection close).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("could not read the peer's credentials")]
    Credentials(#[source] std::io::Error),
    #[error("the peer runs as uid {peer}, the keeper as uid {ours}")]
    OtherUser { peer: u32, ours: u32 },
    #[error("the peer's process is not visible from the keeper's pid namespace")]
    Invisible,
    #[error("could not inspect the peer's process {pid}")]
    Inspect {
        pid: i32,
        #[source]
        source: std::io::Error,
    },
    #[error("the peer (pid {pid}) is in another user namespace (a box, or another container)")]
    OtherUserNamespace { pid: i32 },
}

/// The (device, inode) of a user namespace, its identity.
fn user_ns(path: &str) -> std::io::Result<(u64, u64)> {
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// Accepts the connection's peer only when it is our uid in our user namespace. The pid is
/// pinned with a pidfd while its namespace is read, and checked alive after, so a peer that
/// exits and whose pid is reused by a host process cannot pass as that process.
pub fn check(conn: &UnixStream) -> Result<(), Refused> {
    let cred = crate::sys::peer_cred(conn.as_fd()).map_err(Refused::Credentials)?;
    let ours = rustix::process::geteuid().as_raw();
    if cred.uid != ours {
        return Err(Refused::OtherUser {
            peer: cred.uid,
            ours,
        });
    }
    // A peer in a pid namespace the keeper cannot see is reported as pid 0.
    let Some(pid) = rustix::process::Pid::from_raw(cred.pid) else {
        return Err(Refused::Invisible);
    };
    let raw = cred.pid;
    let inspect = |source: std::io::Error| Refused::Inspect { pid: raw, source };
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
        .map_err(|e| inspect(e.into()))?;
    let theirs = user_ns(&format!("/proc/{raw}/ns/user")).map_err(inspect)?;
    let mine = user_ns("/proc/self/ns/user").map_err(inspect)?;
    // The pidfd turns readable once the process has exited: then /proc/<pid> may have been
    // another process's.
    let mut fds = [rustix::event::PollFd::new(
        &pidfd,
        rustix::event::PollFlags::IN,
    )];
    let exited = rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default()))
        .map_err(|e| inspect(e.into()))?
        > 0;
    if exited {
        return Err(Refused::Invisible);
    }
    if theirs != mine {
        return Err(Refused::OtherUserNamespace { pid: raw });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_process_of_ours_in_our_namespace_is_accepted() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        super::check(&a).unwrap();
    }
}
