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

/// The calling thread's file-system ids (`setfsuid`/`setfsgid`), set for a scope and put back
/// on drop: a keeper thread running as host root creates files as the box user's host ids, and
/// is checked as that user, without touching the process's other threads (Linux keeps
/// credentials per thread; glibc broadcasts `setuid` and friends to every thread, but not
/// these two).
#[derive(Debug)]
pub struct FsIds {
    uid: u32,
    gid: u32,
}

impl FsIds {
    /// Sets the thread's fs ids to `uid`/`gid`; returns the guard that restores the old ones.
    pub fn set(uid: u32, gid: u32) -> FsIds {
        // SAFETY: setfsgid/setfsuid take and return plain integers and touch only the calling
        // thread's credentials; they cannot fail in a way that breaks memory safety (they
        // return the previous id whatever happens).
        let old_gid = unsafe { libc::setfsgid(gid) };
        // SAFETY: as above.
        let old_uid = unsafe { libc::setfsuid(uid) };
        FsIds {
            uid: u32::try_from(old_uid).unwrap_or(0),
            gid: u32::try_from(old_gid).unwrap_or(0),
        }
    }
}

impl Drop for FsIds {
    fn drop(&mut self) {
        // SAFETY: as in `set`.
        unsafe { libc::setfsuid(self.uid) };
        // SAFETY: as in `set`.
        unsafe { libc::setfsgid(self.gid) };
    }
}
