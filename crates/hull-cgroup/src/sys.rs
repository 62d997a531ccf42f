//! The raw syscalls this crate needs, each behind a safe wrapper: identity, an access probe, the
//! allocation-free join a freshly cloned child runs, and pid-reuse-safe signalling for `kill_all`.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The effective uid of this process.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// `path` as a C string, or `None` if it holds a NUL byte.
pub(crate) fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_bytes()).ok()
}

/// Whether this process (by its effective ids, as the kernel will judge a mkdir) may create
/// entries in directory `path`. Also reports a read-only mount as EROFS.
pub(crate) fn can_create_in(path: &Path) -> io::Result<()> {
    let c = c_path(path).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call; faccessat only reads it.
    let rc = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Where [`join_from_child`] stopped: the index into the procs list and the errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinError {
    pub index: usize,
    pub errno: i32,
}

/// Moves the calling process into every cgroup in `procs_files` by writing `"0"` to each.
///
/// Made for the first process of a box, right after clone/fork of a multi-threaded parent: it
/// uses only open/write/close and the thread's errno, allocates nothing and takes no lock, so it
/// is async-signal-safe. Stops at the first failure.
pub fn join_from_child(procs_files: &[CString]) -> Result<(), JoinError> {
    for (index, path) in procs_files.iter().enumerate() {
        write_zero(path).map_err(|errno| JoinError { index, errno })?;
    }
    Ok(())
}

fn write_zero(path: &CStr) -> Result<(), i32> {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY: `path` is a valid NUL-terminated string; open does not retain the pointer.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: `fd` is open and owned here; the buffer is a 1-byte static slice.
    let written = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
    let result = if written == 1 { Ok(()) } else { Err(errno()) };
    // SAFETY: `fd` was opened above and is closed exactly once.
    unsafe { libc::close(fd) };
    result
}

/// A handle on one specific process, immune to pid reuse (a pidfd), or the bare pid on kernels
/// before 5.3.
pub(crate) enum ProcessHandle {
    PidFd(OwnedFd),
    Pid(libc::pid_t),
}

impl ProcessHandle {
    /// Pins the process that currently has `pid`, or `None` if there is none.
    pub fn open(pid: libc::pid_t) -> Option<ProcessHandle> {
        // SAFETY: pidfd_open takes a pid and a flags word and returns a new fd or -1.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if rc >= 0 {
            let fd = i32::try_from(rc).ok()?;
            // SAFETY: the kernel just returned this fd to us and nothing else owns it.
            return Some(ProcessHandle::PidFd(unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOSYS) => Some(ProcessHandle::Pid(pid)),
            _ => None,
        }
    }

    /// Sends SIGKILL; an already-dead process is not an error worth reporting.
    pub fn kill(&self) {
        match self {
            ProcessHandle::PidFd(fd) => {
                // SAFETY: `fd` is a live pidfd; a null siginfo asks for a plain kill()-style signal.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        fd.as_raw_fd(),
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
            }
            ProcessHandle::Pid(pid) => {
                // SAFETY: kill takes plain integers; the worst outcome is ESRCH.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
        }
    }
}
