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

/// What [`isolate_self`] could not do: the step and the kernel's answer.
#[derive(Debug, thiserror::Error)]
#[error("{step}")]
pub struct IsolateError {
    pub step: &'static str,
    #[source]
    pub source: std::io::Error,
}

/// Turns this single-threaded process into one that can reach no host file, no other process
/// and no privilege: host root first becomes `ids` (no supplementary groups); then new user,
/// mount, ipc and uts namespaces (the network namespace is kept: the caller dials out), this
/// user mapped to root there; an empty read-only tmpfs as the root (the host's tree detached);
/// not dumpable; every capability dropped; `no_new_privs`. Must run before the process starts
/// a thread (the kernel refuses a new user namespace to a multi-threaded process).
pub fn isolate_self(ids: Option<(u32, u32)>) -> Result<(), IsolateError> {
    let step = |step: &'static str, ret: libc::c_int| {
        if ret == 0 {
            Ok(())
        } else {
            Err(IsolateError {
                step,
                source: std::io::Error::last_os_error(),
            })
        }
    };
    if let Some((uid, gid)) = ids {
        // SAFETY: an empty list (a null pointer with a zero count) is valid for setgroups.
        step("drop supplementary groups", unsafe {
            libc::setgroups(0, std::ptr::null())
        })?;
        // SAFETY: plain integer arguments; they only change this process's credentials.
        step("become the gateway's group", unsafe {
            libc::setresgid(gid, gid, gid)
        })?;
        // SAFETY: as above.
        step("become the gateway's user", unsafe {
            libc::setresuid(uid, uid, uid)
        })?;
        // The id change made the process non-dumpable, which makes its /proc files root's: it
        // could not write its own namespace's maps below. Made non-dumpable again at the end.
        // SAFETY: PR_SET_DUMPABLE takes an integer and no pointer.
        step("write its own id maps", unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0)
        })?;
    }
    let (uid, gid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    // SAFETY: unshare takes flags only; the process is single-threaded (documented contract;
    // the kernel refuses CLONE_NEWUSER otherwise).
    step("unshare user, mount, ipc and uts namespaces", unsafe {
        libc::unshare(
            libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS,
        )
    })?;
    let write = |path: &'static str, text: String| {
        std::fs::write(path, text).map_err(|source| IsolateError { step: path, source })
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    write("/proc/self/gid_map", format!("0 {gid} 1"))?;
    // SAFETY: a valid NUL-terminated target; null source, type and data are allowed for a
    // propagation change.
    step("make mounts private", unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })?;
    // SAFETY: valid NUL-terminated strings; tmpfs reads `size` and `mode` from the data.
    step("mount an empty root", unsafe {
        libc::mount(
            c"hull-net".as_ptr(),
            c"/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"size=16k,mode=0755".as_ptr().cast(),
        )
    })?;
    // SAFETY: a valid NUL-terminated path and a mode.
    step("make the old root's mount point", unsafe {
        libc::mkdir(c"/tmp/old".as_ptr(), 0o700)
    })?;
    // SAFETY: pivot_root has no libc wrapper; two valid NUL-terminated paths, the second
    // beneath the first, as it requires.
    let pivoted =
        unsafe { libc::syscall(libc::SYS_pivot_root, c"/tmp".as_ptr(), c"/tmp/old".as_ptr()) };
    step("pivot to the empty root", if pivoted == 0 { 0 } else { -1 })?;
    // SAFETY: a valid NUL-terminated path.
    step("enter the empty root", unsafe {
        libc::chdir(c"/".as_ptr())
    })?;
    // SAFETY: a valid NUL-terminated path; MNT_DETACH takes the whole old tree away.
    step("detach the host's tree", unsafe {
        libc::umount2(c"/old".as_ptr(), libc::MNT_DETACH)
    })?;
    // SAFETY: a valid NUL-terminated path.
    step("remove the old root's mount point", unsafe {
        libc::rmdir(c"/old".as_ptr())
    })?;
    // SAFETY: a remount of "/" with flags only.
    step("make the root read-only", unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT
                | libc::MS_BIND
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    })?;
    // SAFETY: PR_SET_DUMPABLE takes an integer and no pointer.
    step("make the process non-dumpable", unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0)
    })?;
    // Every capability, in the namespace it owns too: effective, permitted, inheritable.
    let head = libc_cap_header();
    let data = [CapData::default(); 2];
    // SAFETY: capset reads a version-3 header and two data structs, both valid for the call.
    let dropped = unsafe { libc::syscall(libc::SYS_capset, &head, data.as_ptr()) };
    step("drop every capability", if dropped == 0 { 0 } else { -1 })?;
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only.
    step("set no_new_privs", unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    })
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn libc_cap_header() -> CapHeader {
    // _LINUX_CAPABILITY_VERSION_3: 64-bit sets in two data structs.
    CapHeader {
        version: 0x2008_0522,
        pid: 0,
    }
}

/// Installs the compiled seccomp `program` on this thread (and the threads and children it
/// starts later); `no_new_privs` must be set.
pub fn install_seccomp(program: &hull_seccomp::Program) -> std::io::Result<()> {
    let fprog = program.as_fprog();
    // SAFETY: `fprog` points into `program`, which outlives the call.
    unsafe { hull_seccomp::install_raw(&fprog, false) }
        .map(|_| ())
        .map_err(std::io::Error::from_raw_os_error)
}

/// Takes ownership of descriptor `fd`, inherited from our parent, if it is open; `None` when
/// it is not (so no other owner's descriptor is ever adopted: only numbers the parent set up
/// and nothing in this process opened yet are asked for, at start).
pub fn take_inherited_fd(fd: std::os::fd::RawFd) -> Option<std::os::fd::OwnedFd> {
    // SAFETY: F_GETFD only reads the descriptor's flags; it fails with EBADF when not open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: the descriptor is open, and the caller asks only for numbers its parent handed
    // it at exec, which nothing else in this process owns.
    Some(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// The addresses of the host's own interfaces (`getifaddrs`), IPv4 and IPv6.
pub fn host_addrs() -> std::io::Result<Vec<std::net::IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs made, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its shape.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(std::net::IpAddr::V4(std::net::Ipv4Addr::from(
                    u32::from_be(sin.sin_addr.s_addr),
                )));
            } else if family == libc::AF_INET6 {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                out.push(std::net::IpAddr::V6(std::net::Ipv6Addr::from(
                    sin6.sin6_addr.s6_addr,
                )));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: the head getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Has `cmd`'s process close, at its exec, every descriptor from `first` up that it inherited
/// without close-on-exec (a shell's, a binding's): they are not its. Marked, not closed: std's
/// own error pipe must stay open until the exec. Register it after [`give_fd`].
pub fn cloexec_from(cmd: &mut std::process::Command, first: libc::c_uint) {
    let hook = move || {
        // SAFETY: close_range with integer arguments only.
        let r = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                first,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook makes one async-signal-safe system call and allocates nothing.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, hook);
    }
}

/// Has `cmd`'s process get `fd` as descriptor `at` (dup2 between fork and exec; the dup is not
/// close-on-exec). `fd` must stay open until the spawn.
pub fn give_fd(cmd: &mut std::process::Command, fd: std::os::fd::RawFd, at: std::os::fd::RawFd) {
    let hook = move || {
        if fd == at {
            // dup2 onto itself changes nothing: clear close-on-exec instead.
            // SAFETY: F_SETFD with flags 0 on a descriptor the parent keeps open.
            if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
            return Ok(());
        }
        // SAFETY: dup2 of a descriptor the parent keeps open until the spawn returns; `at`
        // is a number of the child's own table.
        if unsafe { libc::dup2(fd, at) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec and makes only dup2 or fcntl, which are
    // async-signal-safe, allocating nothing.
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
