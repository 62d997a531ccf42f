//! Installing a filter on the calling thread, and probing what the kernel supports.
//!
//! [`install_raw`] and [`set_no_new_privs`] run in a child between `clone` and `execve` of a
//! possibly multi-threaded parent, so they are async-signal-safe: one raw syscall each, no
//! allocation, no locks. Errors are plain errno values for the same reason.

use std::ptr;

/// Reads errno without allocating (`std::io::Error::last_os_error` is a plain integer copy).
fn last_errno() -> libc::c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`: required before an unprivileged thread may install a
/// filter, and it keeps setuid binaries in the box from gaining privileges. Async-signal-safe.
pub fn set_no_new_privs() -> Result<(), libc::c_int> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only and touches no memory.
    let ret = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if ret == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// Installs `fprog` as a seccomp filter on the calling thread
/// (`seccomp(SECCOMP_SET_MODE_FILTER)`), with `SECCOMP_FILTER_FLAG_NEW_LISTENER` when
/// `listener` is true.
///
/// Returns the listener fd (close-on-exec, owned by the caller) when `listener` is true, else
/// 0; on failure the errno (EACCES: no_new_privs not set and no CAP_SYS_ADMIN; EINVAL: bad
/// program; EBUSY: an earlier filter already has a listener). Async-signal-safe: one
/// syscall, no allocation, no locks. The caller has already set no_new_privs.
///
/// # Safety
///
/// `fprog.filter` must point to `fprog.len` valid, initialised instructions that stay alive
/// for the duration of the call (a [`crate::Program`]'s `as_fprog` satisfies this while the
/// `Program` lives). After success every later syscall of this thread and its future
/// children is filtered, which the rest of the caller's code must be prepared for.
pub unsafe fn install_raw(
    fprog: &libc::sock_fprog,
    listener: bool,
) -> Result<libc::c_int, libc::c_int> {
    let flags = if listener {
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
    } else {
        0
    };
    let op = libc::c_ulong::from(libc::SECCOMP_SET_MODE_FILTER);
    let prog: *const libc::sock_fprog = fprog;
    // SAFETY: the kernel copies the sock_fprog and the instructions it points to, which the
    // caller guarantees are valid for the call; no other memory is touched.
    let ret = unsafe { libc::syscall(libc::SYS_seccomp, op, flags, prog) };
    if ret < 0 {
        return Err(last_errno());
    }
    libc::c_int::try_from(ret).map_err(|_| libc::EOVERFLOW)
}

/// What the running kernel offers; see [`probe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    /// `SECCOMP_SET_MODE_FILTER` exists (Linux 3.5, CONFIG_SECCOMP_FILTER).
    pub filter: bool,
    /// `SECCOMP_RET_KILL_PROCESS` is available (Linux 4.14).
    pub kill_process: bool,
    /// `SECCOMP_RET_USER_NOTIF` and listener fds are available (Linux 5.0).
    pub user_notif: bool,
}

fn action_available(action: u32) -> bool {
    let op = libc::c_ulong::from(libc::SECCOMP_GET_ACTION_AVAIL);
    let action_ptr: *const u32 = &action;
    // SAFETY: SECCOMP_GET_ACTION_AVAIL only reads one u32 through the pointer, which points
    // to a live local; it changes no state.
    let ret = unsafe { libc::syscall(libc::SYS_seccomp, op, 0 as libc::c_ulong, action_ptr) };
    ret == 0
}

/// Asks the kernel what it supports, without installing anything in the caller.
pub fn probe() -> Support {
    let op = libc::c_ulong::from(libc::SECCOMP_SET_MODE_FILTER);
    let null: *const libc::sock_fprog = ptr::null();
    // SAFETY: with a NULL program the kernel fails the copy from user memory with EFAULT
    // before installing anything; a kernel without filter support fails with EINVAL (or the
    // call is ENOSYS). Nothing is installed either way.
    let ret = unsafe { libc::syscall(libc::SYS_seccomp, op, 0 as libc::c_ulong, null) };
    let filter = ret == -1 && last_errno() == libc::EFAULT;
    Support {
        filter,
        kill_process: filter && action_available(libc::SECCOMP_RET_KILL_PROCESS),
        user_notif: filter && action_available(libc::SECCOMP_RET_USER_NOTIF),
    }
}
