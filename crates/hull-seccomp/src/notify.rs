//! The supervisor's side of `SECCOMP_RET_USER_NOTIF`: receive a [`Notification`] from a
//! listener fd and answer it.
//!
//! The structs and ioctl numbers come from libc (`seccomp_notif`, `seccomp_notif_resp`,
//! `SECCOMP_IOCTL_NOTIF_RECV/SEND`), which carries the kernel's `<linux/seccomp.h>` layout.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// One syscall a filtered task is blocked in, waiting for the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notification {
    /// Cookie for [`respond_errno`]; only valid while the task stays blocked.
    pub id: u64,
    /// The task's thread id in the listener's pid namespace (0 if it has none there).
    pub pid: u32,
    pub nr: i32,
    /// `AUDIT_ARCH_*` of the call; the default filter only lets the native one through.
    pub arch: u32,
    pub args: [u64; 6],
}

impl Notification {
    /// The syscall's name, if the default policy names it.
    pub fn syscall_name(&self) -> Option<&'static str> {
        crate::syscall_name(i64::from(self.nr))
    }

    /// What the call was, for a fault report: the policy's name for a native call, else the
    /// ABI it came through (a foreign architecture's numbers mean other calls).
    pub fn describe(&self) -> String {
        let x32 = cfg!(target_arch = "x86_64")
            && u32::from_ne_bytes(self.nr.to_ne_bytes()) & crate::X32_SYSCALL_BIT != 0;
        if self.arch != crate::AUDIT_ARCH_NATIVE {
            format!(
                "a foreign-architecture system call (audit arch {:#x}, nr {})",
                self.arch, self.nr
            )
        } else if x32 {
            format!("an x32 system call (nr {:#x})", self.nr)
        } else {
            self.syscall_name().unwrap_or("unknown").to_string()
        }
    }
}

/// Blocks until a filtered task hits a `SECCOMP_RET_USER_NOTIF` rule
/// (`SECCOMP_IOCTL_NOTIF_RECV`). Fails with ENOENT if the task died before it was received;
/// EINTR is returned, not retried. Poll the fd first to wait with a timeout: it turns
/// readable on a pending notification and reports POLLHUP once no task uses the filter.
pub fn recv_notification(listener: BorrowedFd<'_>) -> io::Result<Notification> {
    // The kernel insists the buffer is zeroed (EINVAL otherwise); the struct has no padding,
    // so zeroing every field zeroes every byte.
    let mut notif = libc::seccomp_notif {
        id: 0,
        pid: 0,
        flags: 0,
        data: libc::seccomp_data {
            nr: 0,
            arch: 0,
            instruction_pointer: 0,
            args: [0; 6],
        },
    };
    let notif_ptr: *mut libc::seccomp_notif = &mut notif;
    // SAFETY: NOTIF_RECV writes one `struct seccomp_notif` (the size encoded in the request)
    // through a pointer to a live, properly sized local; the fd is borrowed for the call.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            notif_ptr,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Notification {
        id: notif.id,
        pid: notif.pid,
        nr: notif.data.nr,
        arch: notif.data.arch,
        args: notif.data.args,
    })
}

/// Fails the notified syscall with `errno` (positive, 1..=4095) and lets the task run on
/// (`SECCOMP_IOCTL_NOTIF_SEND`). Fails with ENOENT if the task is gone or `id` is stale.
pub fn respond_errno(listener: BorrowedFd<'_>, id: u64, errno: i32) -> io::Result<()> {
    if !(1..=4095).contains(&errno) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("errno {errno} is outside 1..=4095"),
        ));
    }
    // The kernel takes a negated errno in `error`; `val` is the return value only when
    // `error` is 0.
    let mut resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: -errno,
        flags: 0,
    };
    let resp_ptr: *mut libc::seccomp_notif_resp = &mut resp;
    // SAFETY: NOTIF_SEND reads one `struct seccomp_notif_resp` through a pointer to a live
    // local of exactly that type; the fd is borrowed for the call.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            resp_ptr,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
