//! The descriptor socket of `hull serve --fd-socket FD`: an inherited Unix socket over which the
//! server hands its caller descriptors that JSON lines cannot carry. `kernel.attach` sends a
//! kernel's channel here, so an SDK's cells reach the interpreter with no process in between.
//!
//! Each hand-off is one message: the kernel's id as its bytes, one descriptor as SCM_RIGHTS.
//! The caller makes the pair as `SOCK_SEQPACKET`, so messages keep their bounds.

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::sync::Mutex;

use rustix::fs::FileType;
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

/// Why `--fd-socket` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("--fd-socket {0}: no such descriptor was inherited (pass the number of a Unix socket this process inherits)")]
    NotOpen(i32),
    #[error(
        "--fd-socket {0}: the descriptor is not a socket (pass one end of a Unix socket pair)"
    )]
    NotSocket(i32),
    #[error("--fd-socket {0}: cannot inspect or set up the descriptor")]
    Stat(i32, #[source] std::io::Error),
}

/// The socket descriptors are handed over on; one hand-off at a time.
#[derive(Debug)]
pub struct Handoff(Mutex<OwnedFd>);

impl Handoff {
    /// Takes the inherited descriptor `fd`, which must be an open socket.
    pub fn inherited(fd: i32) -> Result<Handoff, HandoffError> {
        let owned = crate::sys::take_inherited_fd(fd).ok_or(HandoffError::NotOpen(fd))?;
        let st = rustix::fs::fstat(&owned).map_err(|e| HandoffError::Stat(fd, e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Socket {
            // Not ours to close: a descriptor the caller named by mistake stays open.
            let _ = owned.into_raw_fd();
            return Err(HandoffError::NotSocket(fd));
        }
        // Not inherited further: the processes serve starts (gateways, keepers) must not hold
        // a way to send its caller descriptors.
        rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)
            .map_err(|e| HandoffError::Stat(fd, e.into()))?;
        Ok(Handoff(Mutex::new(owned)))
    }

    /// Sends `fd` with `tag` (what it is, for the caller to check) as one message.
    pub fn send(&self, tag: &[u8], fd: BorrowedFd<'_>) -> std::io::Result<()> {
        let sock = self
            .0
            .lock()
            .map_err(|_poison| std::io::Error::other("hand-off lock poisoned"))?;
        let fds = [fd];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        rustix::net::sendmsg(
            sock.as_fd(),
            &[IoSlice::new(tag)],
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
        Ok(())
    }
}
