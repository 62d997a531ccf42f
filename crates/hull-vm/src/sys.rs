//! The guest init's one unsafe step: what the program's process does between fork and exec
//! (std's `pre_exec`): join the program's cgroup, give up every capability and the bounding
//! set, and set no_new_privs, so the program is the guest's root without root's powers (as a
//! namespace box's program is), and cannot lift the caps its cgroup holds.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The capset(2) header and data of version 3.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn check(ret: libc::c_long) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// In the forked child: joins the cgroup whose `cgroup.procs` is `procs`, drops every
/// capability (bounding, ambient, effective, permitted, inheritable) and sets no_new_privs.
/// Only async-signal-safe calls (raw system calls, no allocation): it runs after fork in a
/// process that may have had other threads.
fn confine(procs: libc::c_int) -> io::Result<()> {
    // SAFETY: writes two bytes from a static buffer to a descriptor the parent keeps open
    // until the child has been spawned.
    check(unsafe { libc::write(procs, b"0\n".as_ptr().cast(), 2) } as libc::c_long)?;
    for cap in 0..64u32 {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) } < 0 {
            let err = io::Error::last_os_error();
            // EINVAL: past the kernel's last capability; anything else leaves one kept.
            if err.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(err);
        }
    }
    let clear_all = libc::c_ulong::from(libc::PR_CAP_AMBIENT_CLEAR_ALL.unsigned_abs());
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_CAP_AMBIENT, clear_all, 0, 0, 0) };
    check(ret.into())?;
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: the header and two data elements have the layout capset(2) v3 reads.
    check(unsafe { libc::syscall(libc::SYS_capset, std::ptr::from_ref(&header), data.as_ptr()) })?;
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }.into())
}

/// Makes `cmd`'s process join the cgroup of `procs` and drop every privilege before its exec.
/// `procs` must stay open until `cmd` is spawned (the caller keeps it).
pub fn confine_on_exec(cmd: &mut Command, procs: &OwnedFd) {
    let fd = procs.as_raw_fd();
    // SAFETY: the closure only makes async-signal-safe system calls (see `confine`), on a
    // descriptor that outlives the spawn.
    unsafe {
        cmd.pre_exec(move || confine(fd));
    }
}

/// In the forked child of a VM's helper (QEMU, virtiofsd): every signal unblocked (a thread of
/// `hull serve` may block some, and QEMU's TCG kicks its vCPU thread with a signal: blocked,
/// the guest never sees a timer tick), and SIGKILL when the thread that started it ends, so a
/// hull that dies leaves no VM behind. Only async-signal-safe calls.
fn helper_defaults(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: an empty set, initialized by sigemptyset before use.
    let mut none: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `none` is a valid sigset_t to initialize.
    unsafe { libc::sigemptyset(&raw mut none) };
    // SAFETY: sets this thread's mask from a valid set; the old mask is not asked for.
    let ret =
        unsafe { libc::sigprocmask(libc::SIG_SETMASK, &raw const none, std::ptr::null_mut()) };
    check(ret.into())?;
    let kill = libc::c_ulong::from(libc::SIGKILL.unsigned_abs());
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, kill, 0, 0, 0) }.into())?;
    // The parent may have ended before the death signal was armed.
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Starts `cmd` (a VM's helper) with every signal unblocked and killed when the calling thread
/// ends (see [`helper_defaults`]).
pub fn as_helper(cmd: &mut Command) {
    let parent = rustix::process::getpid().as_raw_nonzero().get();
    // SAFETY: the closure only makes async-signal-safe system calls (see `helper_defaults`).
    unsafe {
        cmd.pre_exec(move || helper_defaults(parent));
    }
}

/// Gives the calling thread (the guest's init, before it changes root) a file-system context of
/// its own. The kernel starts init sharing its root with kthreadd, so every program the kernel
/// runs on its own (`modprobe` for a socket family, `request-key`, a core dump's pipe) would
/// otherwise be looked up in the root init changes to: the program's, which it can write.
/// Unshared, kernel helpers keep the initramfs's root, which holds none of them.
pub fn own_fs_context() -> io::Result<()> {
    // SAFETY: only CLONE_FS (root, working directory, umask) is unshared, never the descriptor
    // table, so no thread can lose a descriptor another made.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) }
        .map_err(io::Error::from)
}
