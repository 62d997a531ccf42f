//! The supervisor's end of a box's channel (a `SOCK_SEQPACKET` socket carrying
//! [`Message`]s): receiving one, waiting for one, and the `expect_*` helpers that take the one
//! message due at a point of the protocol and turn anything else into a typed error (a setup
//! failure naming its step, or [`UnexpectedMessage`]).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::error::BoxError;
use crate::plan::Step;
use crate::proto::{Message, ProtoError, UnexpectedMessage};
use crate::split::Steps;
use crate::sys::{self, Errno, SysResult};

/// Our end of a box's channel.
pub(crate) struct Channel(OwnedFd);

/// What one receive brought.
pub(crate) enum Recv {
    /// A message, with the descriptor it carried.
    Message(Message, Option<OwnedFd>),
    /// The box's end is closed.
    Closed,
    /// The read failed.
    Failed(Errno),
}

impl Channel {
    pub(crate) fn new(fd: OwnedFd) -> Channel {
        Channel(fd)
    }

    /// What to poll.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// Sends `m` to the box (the only message we send is `IdsMapped`).
    pub(crate) fn send(&self, m: Message) -> SysResult<()> {
        sys::send_with_fd(self.0.as_raw_fd(), &m.encode(), None)
    }

    /// Sends a datagram that is not a [`Message`] (a ready box's go datagram).
    pub(crate) fn send_bytes(&self, data: &[u8]) -> SysResult<()> {
        sys::send_with_fd(self.0.as_raw_fd(), data, None)
    }

    /// Receives one message without waiting (the caller polled); a malformed one is an error.
    pub(crate) fn recv(&self) -> Result<Recv, ProtoError> {
        let mut m = [0u8; 64];
        match sys::recv_with_fd(self.0.as_fd(), &mut m) {
            Ok((0, _)) => Ok(Recv::Closed),
            Ok((len, fd)) => Ok(Recv::Message(Message::decode(&m[..len])?, fd)),
            Err(errno) => Ok(Recv::Failed(errno)),
        }
    }

    /// Waits up to `timeout_ms` for one message, with the descriptor it carries.
    pub(crate) fn wait(&self, timeout_ms: i32) -> Result<(Message, Option<OwnedFd>), BoxError> {
        let mut fds = [sys::poll_in(self.0.as_fd())];
        let n = sys::poll(&mut fds, timeout_ms).map_err(|errno| BoxError::Sys {
            what: "wait for the box",
            errno,
        })?;
        if n == 0 {
            return Err(BoxError::Sys {
                what: "wait for the box's first message",
                errno: Errno(libc::ETIMEDOUT),
            });
        }
        match self.recv()? {
            Recv::Message(m, fd) => Ok((m, fd)),
            Recv::Closed => Err(BoxError::SetupVanished(0)),
            Recv::Failed(errno) => Err(BoxError::Sys {
                what: "read the box channel",
                errno,
            }),
        }
    }

    /// Waits for `Ready` (its setup is done) and returns the descriptor it carries (the
    /// seccomp listener of a box, a template's host mount namespace). Steps of `plan` name a
    /// setup failure.
    pub(crate) fn expect_ready(
        &self,
        timeout_ms: i32,
        plan: &dyn Steps,
    ) -> Result<Option<OwnedFd>, BoxError> {
        match self.wait(timeout_ms)? {
            (Message::Ready, fd) => Ok(fd),
            (m, _) => Err(unexpected(plan, "Ready", m)),
        }
    }

    /// Waits for the box's `WantIdMaps` (it unshared its user namespace and waits for maps).
    pub(crate) fn expect_want_id_maps(
        &self,
        timeout_ms: i32,
        plan: &dyn Steps,
    ) -> Result<(), BoxError> {
        match self.wait(timeout_ms)? {
            (Message::WantIdMaps, _) => Ok(()),
            (m, _) => Err(unexpected(plan, "WantIdMaps", m)),
        }
    }
}

/// The error for `got` where `expected` was due: the box's own report when it is a setup
/// failure, else [`UnexpectedMessage`].
pub(crate) fn unexpected(plan: &dyn Steps, expected: &'static str, got: Message) -> BoxError {
    match got {
        Message::SetupFailed { step, errno } => setup_error(plan, step, errno),
        m => UnexpectedMessage {
            expected,
            got: m.name(),
        }
        .into(),
    }
}

/// The error for step `step` of `plan` failing with `errno`, as the box reported it.
pub(crate) fn setup_error(plan: &dyn Steps, step: u32, errno: i32) -> BoxError {
    let idx = usize::try_from(step).unwrap_or(usize::MAX);
    let s = plan.step(idx);
    BoxError::Setup {
        index: idx + 1,
        step: s.map_or("unknown step", |s| s.name()),
        path: s.and_then(|s| s.path()),
        errno: Errno(errno),
        hint: s
            .as_ref()
            .and_then(|s| s.as_box())
            .and_then(|s| setup_hint(s, errno)),
        field: s.as_ref().and_then(|s| s.as_box()).and_then(step_field),
    }
}

/// The caller's field a step comes from, where only one can (the front end names its flag).
fn step_field(step: &Step) -> Option<crate::SpecField> {
    match step {
        Step::BindBelow { .. } => Some(crate::SpecField::Mounts),
        Step::TmpfsBelow { .. } => Some(crate::SpecField::Tmpfs),
        Step::Chdir { .. } => Some(crate::SpecField::Cwd),
        _ => None,
    }
}

fn setup_hint(step: &Step, errno: i32) -> Option<String> {
    match (step, errno) {
        (Step::Chdir { path }, libc::ENOENT) => Some(format!(
            "the working directory {} does not exist in the box; pass --cwd with an existing path",
            path.shown
        )),
        (Step::JoinCgroup { .. }, libc::EACCES | libc::EPERM) => {
            Some("the cgroup is not delegated to this user; see `hull doctor`".into())
        }
        (Step::OpenTun { .. }, libc::EACCES | libc::EPERM | libc::ENOENT) => Some(format!(
            "the gateway network needs {dev}: `chmod 0666 {dev}` (as root; most distributions ship it so), or load the tun module; `hull doctor` checks it",
            dev = crate::tap::TUN_DEVICE
        )),
        (Step::Tap { .. }, libc::EPERM) => Some(
            "the box could not make its TAP (CAP_NET_ADMIN in its own user namespace was refused)".into(),
        ),
        (Step::Seal { .. }, libc::ENOSYS) => {
            Some("mount_setattr(2) needs Linux 5.12 or newer".into())
        }
        (
            Step::BindBelow { target, .. } | Step::TmpfsBelow { target, .. },
            libc::ENOTDIR | libc::ELOOP,
        ) => Some(format!(
            "a symbolic link or a file is on the way to {target} (hull follows no link in a host directory, an image or a sandbox's own disk); remove it or choose another target"
        )),
        (Step::BindBelow { target, .. } | Step::TmpfsBelow { target, .. }, libc::EXDEV) => {
            Some(format!("another mount is on the way to {target}"))
        }
        (Step::BindBelow { target, .. } | Step::TmpfsBelow { target, .. }, libc::EROFS) => Some(
            format!("{target} cannot be made: the directory it would be in is read-only"),
        ),
        (Step::Proc { .. }, libc::EPERM) => Some(
            "procfs cannot be mounted here (an over-mounted /proc on the host prevents it)".into(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Channel, OwnedFd) {
        let (a, b) = sys::seqpacket_pair().expect("socketpair");
        (Channel::new(a), b)
    }

    fn plan() -> crate::plan::BoxPlan {
        crate::plan::BoxPlan {
            steps: vec![Step::UnshareCgroupNs, Step::NoNewPrivs],
            clone_flags: 0,
        }
    }

    fn send(to: &OwnedFd, m: Message) {
        sys::send_with_fd(to.as_raw_fd(), &m.encode(), None).expect("send");
    }

    #[test]
    fn a_message_out_of_turn_is_named_with_what_was_due() {
        let (ch, box_end) = pair();
        send(&box_end, Message::Pid1 { pid: 7 });
        let e = ch
            .expect_ready(1000, &plan())
            .expect_err("Pid1 is not Ready");
        assert!(
            matches!(
                e,
                BoxError::Unexpected(UnexpectedMessage {
                    expected: "Ready",
                    got: "Pid1"
                })
            ),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "the box sent Pid1 where Ready was due");
        assert_eq!(e.kind(), "protocol");
        send(&box_end, Message::IdsMapped);
        let e = ch
            .expect_want_id_maps(1000, &plan())
            .expect_err("IdsMapped is not WantIdMaps");
        assert_eq!(
            e.to_string(),
            "the box sent IdsMapped where WantIdMaps was due"
        );
    }

    #[test]
    fn a_setup_failure_names_the_step_of_the_plan() {
        let (ch, box_end) = pair();
        send(
            &box_end,
            Message::SetupFailed {
                step: 1,
                errno: libc::EPERM,
            },
        );
        match ch.expect_ready(1000, &plan()) {
            Err(BoxError::Setup {
                index, step, errno, ..
            }) => {
                assert_eq!(
                    (index, step, errno),
                    (2, "set no_new_privs", Errno(libc::EPERM))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_due_message_comes_back_and_a_hangup_is_a_vanished_box() {
        let (ch, box_end) = pair();
        send(&box_end, Message::WantIdMaps);
        ch.expect_want_id_maps(1000, &plan()).expect("due");
        send(&box_end, Message::Ready);
        assert!(ch.expect_ready(1000, &plan()).expect("due").is_none());
        drop(box_end);
        assert!(matches!(
            ch.expect_ready(1000, &plan()),
            Err(BoxError::SetupVanished(0))
        ));
    }

    #[test]
    fn silence_is_a_timeout() {
        let (ch, _box_end) = pair();
        match ch.wait(10) {
            Err(BoxError::Sys { errno, .. }) => assert_eq!(errno, Errno(libc::ETIMEDOUT)),
            other => panic!("{other:?}"),
        }
    }
}
