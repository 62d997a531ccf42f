//! The system calls of hull-cli that no safe wrapper covers soundly; every `unsafe` of the
//! crate's new code lives here.

use std::os::fd::{AsRawFd, BorrowedFd};

/// A Unix socket peer's credentials as the kernel gives them (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy)]
pub struct PeerCred {
    /// The peer's pid in our pid namespace, 0 when it is not visible from here.
    pub pid: i32,
    pub uid: u32,
}

/// `SO_PEERCRED`. Read as plain integers: rustix's `UCred` holds a non-zero `Pid`, and the
/// kernel does report 0 for a peer in a pid namespace we cannot see.
pub fn peer_cred(fd: BorrowedFd<'_>) -> std::io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>())
        .expect("struct ucred is 12 bytes");
    // SAFETY: `cred` is a valid, writable `ucred` of `len` bytes for the call's duration, and
    // `fd` is a borrowed, open descriptor.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if ret != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
    })
}

/// The calling thread's file-system ids (`setfsuid`/`setfsgid`) and supplementary groups (only
/// `gid`), set for a scope and put back on drop: a keeper thread running as host root creates
/// files as the box user's host ids, and is checked as that user alone (not with host root's
/// groups, nor a rootless caller's, whose primary group is the box's gid 0), without touching
/// the process's other threads (Linux keeps credentials per thread; glibc broadcasts `setuid`,
/// `setgroups` and friends to every thread, so the groups are set with the raw system call).
#[derive(Debug)]
pub struct FsIds {
    uid: u32,
    gid: u32,
    /// The thread's groups before, when they were read (at most 256 are kept).
    groups: Option<Vec<libc::gid_t>>,
}

impl FsIds {
    /// Sets the thread's fs ids to `uid`/`gid` and its groups to `gid` alone; the guard restores
    /// them. Fails when the kernel did not take the ids (an id the namespace does not map, or no
    /// `CAP_SETUID`/`CAP_SETGID`), so an operation never goes on as whoever the thread was.
    pub fn set(uid: u32, gid: u32) -> std::io::Result<FsIds> {
        let mut old = vec![0 as libc::gid_t; 256];
        // SAFETY: the buffer holds 256 gids, the count given; the kernel writes at most that many.
        let n = unsafe { libc::syscall(libc::SYS_getgroups, 256, old.as_mut_ptr()) };
        let groups = usize::try_from(n).ok().map(|n| {
            old.truncate(n);
            old
        });
        let mut guard = FsIds {
            uid: 0,
            gid: 0,
            groups: None,
        };
        // SAFETY: setfsgid/setfsuid take and return plain integers and touch only the calling
        // thread's credentials; they return the previous id whatever happens.
        guard.gid = u32::try_from(unsafe { libc::setfsgid(gid) }).unwrap_or(0);
        // SAFETY: as above.
        guard.uid = u32::try_from(unsafe { libc::setfsuid(uid) }).unwrap_or(0);
        let only = [gid as libc::gid_t];
        // SAFETY: one gid from a live array; the raw call changes this thread's groups only.
        let set = unsafe { libc::syscall(libc::SYS_setgroups, 1, only.as_ptr()) };
        if set == 0 {
            guard.groups = groups;
        }
        // Read back: each call returns the id in force (an invalid -1 changes nothing).
        // SAFETY: as above.
        let now_uid = unsafe { libc::setfsuid(u32::MAX) };
        // SAFETY: as above.
        let now_gid = unsafe { libc::setfsgid(u32::MAX) };
        // Groups that cannot be set (a user namespace whose setgroups is denied: one mapping
        // only root) matter only for another user than that root.
        let groups_ok = set == 0 || (uid, gid) == (0, 0);
        if !groups_ok
            || u32::try_from(now_uid).ok() != Some(uid)
            || u32::try_from(now_gid).ok() != Some(gid)
        {
            let e = std::io::Error::other(format!(
                "could not act as {uid}:{gid} (fs ids {now_uid}:{now_gid}, groups {})",
                if set == 0 { "set" } else { "not set" }
            ));
            drop(guard);
            return Err(e);
        }
        Ok(guard)
    }
}

impl Drop for FsIds {
    fn drop(&mut self) {
        if let Some(g) = &self.groups {
            // SAFETY: the gids read in `set`, their count; this thread's groups only.
            unsafe { libc::syscall(libc::SYS_setgroups, g.len(), g.as_ptr()) };
        }
        // SAFETY: as in `set`.
        unsafe { libc::setfsuid(self.uid) };
        // SAFETY: as in `set`.
        unsafe { libc::setfsgid(self.gid) };
    }
}

/// A mount namespace of this process's own, its mounts private (none propagates to the host's):
/// `unshare(CLONE_NEWNS)` and `mount(MS_REC | MS_PRIVATE)` of `/`. Fails (EINVAL) once the
/// process has more than one thread.
pub fn private_mount_namespace() -> std::io::Result<()> {
    // SAFETY: unshare with CLONE_NEWNS only touches the caller's mount namespace (and, since it
    // implies CLONE_FS, its root and working directory, which no other thread shares: the
    // kernel refuses it in a multi-threaded process); no memory is passed.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the target is a valid NUL-terminated string; the null source, type and data are
    // allowed for a propagation change.
    let ret = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if ret != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Mounts a FUSE file system of type `fuse.<subtype>` at `target`, served through the open
/// `/dev/fuse` descriptor named in `opts` (`fd=N,...`), `nosuid,nodev`.
pub fn mount_fuse(
    target: &std::ffi::CStr,
    subtype: &std::ffi::CStr,
    fstype: &std::ffi::CStr,
    opts: &std::ffi::CStr,
) -> std::io::Result<()> {
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let ret = unsafe {
        libc::mount(
            subtype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            opts.as_ptr().cast(),
        )
    };
    if ret != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Binds `source` at `target` (`MS_BIND`, not recursive).
pub fn bind(source: &std::ffi::CStr, target: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call; a bind
    // takes no type and no data.
    let ret = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if ret != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Detaches the mount at `target` (`umount2(MNT_DETACH)`).
pub fn detach(target: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: the pointer is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Has `cmd`'s process killed (`SIGKILL`) when the thread that starts it ends
/// (`PR_SET_PDEATHSIG`), so a helper never outlives its keeper.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    let hook = || {
        // SAFETY: PR_SET_PDEATHSIG takes a signal number and no pointer.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec and makes only prctl, which is
    // async-signal-safe, allocating nothing (an error is built from errno alone).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, hook);
    }
}

/// Has `cmd`'s process join the user namespace `ns` (an open `/proc/PID/ns/user`) before its
/// exec and become root there (ids 0, with the namespace's capabilities over the ids it maps).
/// Host root first drops its supplementary groups (host groups, unmapped there); rootless, the
/// caller's ids are already that root's. Register it before [`die_with_parent`] (joining changes
/// the process's credentials).
pub fn join_user_namespace(cmd: &mut std::process::Command, ns: std::os::fd::OwnedFd) {
    let hook = move || {
        let check = |ret: libc::c_int| {
            if ret == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } == 0 {
            // SAFETY: an empty list (a null pointer with a zero count) is valid for setgroups.
            check(unsafe { libc::setgroups(0, std::ptr::null()) })?;
        }
        // SAFETY: setns takes a descriptor we own (moved into this hook) and a namespace type;
        // the forked child is single-threaded, as joining a user namespace requires.
        check(unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWUSER) })?;
        // SAFETY: plain integer arguments; they only change this process's credentials.
        check(unsafe { libc::setresgid(0, 0, 0) })?;
        // SAFETY: as above.
        check(unsafe { libc::setresuid(0, 0, 0) })
    };
    // SAFETY: the hook runs in the child between fork and exec and makes only raw system calls
    // (getuid, setgroups, setns, setresgid, setresuid), which are async-signal-safe, allocating
    // nothing (an error is built from errno alone).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, hook);
    }
}

/// Lets a write to a closed pipe end the process quietly (`SIGPIPE`'s default action), as
/// `ls | head` does, instead of Rust's ignored signal making every `println!` panic on `EPIPE`.
/// Only for commands that print a report and own nothing that must be cleaned up on exit.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler code.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}
