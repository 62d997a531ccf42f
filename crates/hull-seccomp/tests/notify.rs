//! User-notification tests: a filtered child passes its listener fd to the parent over a unix
//! socketpair (SCM_RIGHTS), then makes a `kill` syscall; the parent receives the notification.

mod common;

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use common::{default_program, require_user_notif, spawn, Child, Exit};
use hull_seccomp::{recv_notification, respond_errno, KillMode, Program};

/// Room for one `cmsghdr` carrying one fd, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; 32]);

fn socketpair() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two fds into a live array.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0, "socketpair: {}", std::io::Error::last_os_error());
    // SAFETY: just created, owned by nobody else.
    let first = unsafe { OwnedFd::from_raw_fd(fds[0]) };
    // SAFETY: as for `first`, and a different fd.
    let second = unsafe { OwnedFd::from_raw_fd(fds[1]) };
    (first, second)
}

/// Sends `fd` over `sock` with SCM_RIGHTS; async-signal-safe (stack buffers only).
fn send_fd(sock: RawFd, fd: RawFd) -> bool {
    let mut byte = 0u8;
    let mut iov = libc::iovec {
        iov_base: std::ptr::addr_of_mut!(byte).cast(),
        iov_len: 1,
    };
    let mut cmsg = CmsgBuf([0; 32]);
    // SAFETY: msghdr is plain data; zero is a valid "empty" value for every field.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is pure arithmetic.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as _;
    // The control buffer is 32 aligned bytes, more than CMSG_SPACE(4).
    // SAFETY: reads `msg`'s control fields, just set; a header fits, so this is the start of
    // the buffer, never null.
    let hdr = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    // SAFETY: `hdr` is the start of the live, aligned, zeroed buffer, which nothing else
    // reaches while this reference lives.
    let header = unsafe { &mut *hdr };
    header.cmsg_level = libc::SOL_SOCKET;
    header.cmsg_type = libc::SCM_RIGHTS;
    // SAFETY: CMSG_LEN is pure arithmetic.
    header.cmsg_len = unsafe { libc::CMSG_LEN(4) } as _;
    // SAFETY: CMSG_DATA only computes the address just past the header.
    let data = unsafe { libc::CMSG_DATA(hdr) };
    // SAFETY: CMSG_SPACE(4) leaves room for one fd after the header, inside the buffer; the
    // data's alignment is not promised, so the write is unaligned.
    unsafe { data.cast::<RawFd>().write_unaligned(fd) };
    // SAFETY: sendmsg reads only the live locals `msg` refers to.
    let sent = unsafe { libc::sendmsg(sock, &msg, 0) };
    sent == 1
}

/// Receives one fd sent by [`send_fd`].
fn recv_fd(sock: &OwnedFd) -> OwnedFd {
    let mut byte = 0u8;
    let mut iov = libc::iovec {
        iov_base: std::ptr::addr_of_mut!(byte).cast(),
        iov_len: 1,
    };
    let mut cmsg = CmsgBuf([0; 32]);
    // SAFETY: msghdr is plain data; zero is a valid "empty" value for every field.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is pure arithmetic.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as _;
    // SAFETY: recvmsg writes into the live buffers `msg` points to.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    assert_eq!(n, 1, "recvmsg: {}", std::io::Error::last_os_error());
    // SAFETY: reads `msg`'s control fields (the buffer and the length the kernel filled in);
    // null unless a whole header fits.
    let hdr = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    assert!(!hdr.is_null(), "no control message");
    // SAFETY: non-null, so a whole header lies inside the live, aligned buffer; only read.
    let header = unsafe { &*hdr };
    assert_eq!(
        (header.cmsg_level, header.cmsg_type),
        (libc::SOL_SOCKET, libc::SCM_RIGHTS)
    );
    // SAFETY: CMSG_DATA only computes the address just past the header.
    let data = unsafe { libc::CMSG_DATA(hdr) };
    // SAFETY: an SCM_RIGHTS message carries one fd after its header, inside the buffer; read
    // unaligned, as its alignment is not promised.
    let raw = unsafe { data.cast::<RawFd>().read_unaligned() };
    // SAFETY: the kernel installed this fd for us with the message; nobody else owns it.
    unsafe { OwnedFd::from_raw_fd(raw) }
}

/// Waits up to 10 s for the listener to turn readable, so a broken test fails, not hangs.
fn wait_readable(fd: &OwnedFd) {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll reads and writes one live pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, 10_000) };
    assert_eq!(n, 1, "no notification within 10 s");
    assert_ne!(
        pfd.revents & libc::POLLIN,
        0,
        "listener revents {:#x}",
        pfd.revents
    );
}

/// Exit codes of the notified child after its `ptrace` returns.
const PTRACE_GOT_EPERM: i32 = 42;
const PTRACE_GOT_OTHER: i32 = 43;

/// Forks a child that installs `program` with a listener, sends the listener over a
/// socketpair, and calls `ptrace(PTRACE_TRACEME)`. Returns the child and the listener.
fn spawn_notifying_child(program: &Program) -> (Child, OwnedFd) {
    let (parent_sock, child_sock) = socketpair();
    let fprog = program.as_fprog();
    let child_raw = child_sock.as_raw_fd();
    let child = spawn(|| {
        if hull_seccomp::set_no_new_privs().is_err() {
            return 1;
        }
        // SAFETY: `fprog` points into `program`, alive in the parent and so in this child.
        let Ok(listener) = (unsafe { hull_seccomp::install_raw(&fprog, true) }) else {
            return 2;
        };
        if !send_fd(child_raw, listener) {
            return 3;
        }
        // SAFETY: closes our copy of the listener, which nothing here uses any more.
        unsafe { libc::close(listener) };
        // SAFETY: PTRACE_TRACEME takes no pointers.
        let r = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
        if r == -1 && common::errno() == libc::EPERM {
            PTRACE_GOT_EPERM
        } else {
            PTRACE_GOT_OTHER
        }
    });
    drop(child_sock);
    let listener = recv_fd(&parent_sock);
    (child, listener)
}

#[test]
fn user_notif_reports_ptrace_and_parent_kills() {
    if !require_user_notif() {
        return;
    }
    let program = default_program(KillMode::UserNotif);
    let (child, listener) = spawn_notifying_child(&program);
    wait_readable(&listener);
    let n = recv_notification(listener.as_fd()).expect("recv notification");
    assert_eq!(
        i64::from(n.nr),
        hull_seccomp::default_policy()
            .iter()
            .find(|r| r.name == "ptrace")
            .unwrap()
            .nr
    );
    assert_eq!(hull_seccomp::syscall_name(i64::from(n.nr)), Some("ptrace"));
    assert_eq!(n.syscall_name(), Some("ptrace"));
    assert_eq!(n.arch, hull_seccomp::AUDIT_ARCH_NATIVE);
    assert_eq!(i64::from(n.pid), i64::from(child.pid));
    assert_eq!(n.args[0], 0, "PTRACE_TRACEME is request 0");
    // SAFETY: signals our own child.
    assert_eq!(unsafe { libc::kill(child.pid, libc::SIGKILL) }, 0);
    assert_eq!(child.wait(), Exit::Signal(libc::SIGKILL));
}

#[test]
fn respond_errno_resumes_the_child_and_stale_ids_fail() {
    if !require_user_notif() {
        return;
    }
    let program = default_program(KillMode::UserNotif);
    let (child, listener) = spawn_notifying_child(&program);
    wait_readable(&listener);
    let n = recv_notification(listener.as_fd()).expect("recv notification");
    assert_eq!(n.syscall_name(), Some("ptrace"));
    let bad = respond_errno(listener.as_fd(), n.id, 0).expect_err("errno 0 is refused");
    assert_eq!(bad.kind(), std::io::ErrorKind::InvalidInput);
    respond_errno(listener.as_fd(), n.id, libc::EPERM).expect("respond");
    assert_eq!(child.wait(), Exit::Code(PTRACE_GOT_EPERM));
    let stale = respond_errno(listener.as_fd(), n.id, libc::EPERM).expect_err("stale id");
    assert_eq!(stale.raw_os_error(), Some(libc::ENOENT), "{stale}");
}

#[test]
fn recv_notification_on_a_non_listener_fails() {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into a live array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: just created, owned by nobody else.
    let r = unsafe { OwnedFd::from_raw_fd(fds[0]) };
    // SAFETY: as for `r`, and a different fd.
    let _w = unsafe { OwnedFd::from_raw_fd(fds[1]) };
    let err = recv_notification(r.as_fd()).expect_err("a pipe is not a listener");
    assert_eq!(err.raw_os_error(), Some(libc::ENOTTY), "{err}");
    let err = respond_errno(r.as_fd(), 1, libc::EPERM).expect_err("a pipe is not a listener");
    assert_eq!(err.raw_os_error(), Some(libc::ENOTTY), "{err}");
}
