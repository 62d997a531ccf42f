//! The raw system calls of a box, and the processes that run between `clone` and `execve`.
//!
//! Every `unsafe` block of hull-box lives in this module and its child-only submodule
//! [`child`] (the box side and the other processes hull clones: a pool helper, the `--subids`
//! remover). The wrappers here are deliberately thin: they take pre-built `&CStr` arguments and
//! return `Result<_, Errno>` without allocating, because most of them run in a child between
//! `clone` and `execve`, where the parent may have had other threads holding the allocator's
//! lock. The `clone` family itself is private to `sys`: a safe function of [`child`] starts
//! each kind of process, so the code that must be async-signal-safe after the clone is in the
//! same module tree as the `unsafe` block that relies on it. The whole module is crate-private;
//! descriptors the crate's public API takes are `BorrowedFd`/`OwnedFd`.

pub(crate) mod child;
pub(crate) mod tap;

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

/// An errno value returned by a failed system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's current errno.
    pub fn last() -> Errno {
        Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

pub type SysResult<T> = Result<T, Errno>;

fn check(ret: libc::c_int) -> SysResult<libc::c_int> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

fn check_long(ret: libc::c_long) -> SysResult<libc::c_long> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// A descriptor a raw `syscall` returned (as a `long`, already checked).
fn fd_of(ret: libc::c_long) -> RawFd {
    RawFd::try_from(ret).expect("the kernel returns descriptors that fit an int")
}

/// `clone(2)` with fork semantics (no new stack: the child runs on a copy of ours) and the given
/// namespace flags. Returns the child's pid in the parent and 0 in the child.
///
/// # Safety
/// In the child only async-signal-safe work may follow (no allocation, no locks), and the child
/// must end in `execve` or `exit_now`.
unsafe fn clone_fork(flags: libc::c_int) -> SysResult<libc::pid_t> {
    let flags = clone_flags(flags);
    // SAFETY: a null stack makes clone behave like fork; the caller upholds the child contract.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            ptr::null_mut::<libc::c_void>(),
            ptr::null_mut::<libc::c_int>(),
            ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    };
    check_long(ret)
        .map(|pid| libc::pid_t::try_from(pid).expect("clone returns a pid, which fits a pid_t"))
}

/// `clone(2)`'s flags argument for namespace flags `flags`, with SIGCHLD as the exit signal:
/// the bits as the kernel reads them (`CLONE_IO` is the sign bit of a `c_int`; a conversion
/// that fell back to 0 on it would fork without namespaces).
fn clone_flags(flags: libc::c_int) -> libc::c_ulong {
    libc::c_ulong::from(u32::from_ne_bytes((flags | libc::SIGCHLD).to_ne_bytes()))
}

/// Starts `entry(arg)` in a new process that shares our memory until it execs or exits
/// (`CLONE_VM | CLONE_VFORK`, as posix_spawn does): no page tables are copied, and we sleep
/// until then. The child runs on `stack`, which must not be touched meanwhile (we are asleep).
///
/// # Safety
/// `entry` must only call allocation-free wrappers, must not unwind, and must end in execve or
/// `_exit`; everything it writes outside `stack` is our memory.
unsafe fn spawn_vfork(
    stack: &mut [u8],
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> SysResult<libc::pid_t> {
    // SAFETY: `stack` outlives the child's use of it because CLONE_VFORK suspends us until the
    // child execs or exits; the caller upholds the rest.
    unsafe { spawn_shared(stack, entry, arg, libc::CLONE_VFORK) }
}

/// Starts `entry(arg)` in a new process that shares our memory for good (`CLONE_VM` without
/// `CLONE_VFORK`, plus `flags`): no page tables are copied and we go on at once. The child runs
/// on `stack`, which we must never touch again.
///
/// # Safety
/// `entry` must only call allocation-free wrappers, must not unwind, and must end in execve or
/// `_exit`; we must not write anything the child reads, and must only `_exit` once we are done
/// (our memory lives on as the child's).
unsafe fn spawn_shared(
    stack: &mut [u8],
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    flags: libc::c_int,
) -> SysResult<libc::pid_t> {
    // The stack grows down from its 16-byte aligned top.
    let top = stack.as_mut_ptr().wrapping_add(stack.len());
    let top = top.wrapping_sub(top as usize % 16);
    // SAFETY: `top` lies within (the end of) `stack`, which only the child uses from now on.
    let ret = unsafe {
        libc::clone(
            entry,
            top.cast(),
            libc::CLONE_VM | flags | libc::SIGCHLD,
            arg,
        )
    };
    check(ret)
}

/// Anonymous memory for a child's stack, with an inaccessible guard page below it (an overflow
/// faults instead of writing into a neighbouring mapping). Our side never touches it, so no page
/// of it is faulted in or copied here. Unmapped on drop; [`Stack::leak`] keeps it for good.
pub struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: a Stack is only an address range; who runs on it is the caller's business.
unsafe impl Send for Stack {}

const GUARD: usize = 4096;

impl Stack {
    /// Maps `len` usable bytes plus the guard page; None if mmap fails.
    pub fn reserve(len: usize) -> Option<Stack> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len + GUARD,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let stack = Stack { base: p, len };
        // SAFETY: the lowest page of the mapping just made, which nothing uses.
        (unsafe { libc::mprotect(p, GUARD, libc::PROT_NONE) } == 0).then_some(stack)
    }

    /// The usable bytes, above the guard page.
    pub fn get(&mut self) -> &mut [u8] {
        // SAFETY: GUARD bytes into the mapping, which is GUARD + len bytes long, so the result
        // stays inside it.
        let start = unsafe { self.base.cast::<u8>().add(GUARD) };
        // SAFETY: the `len` bytes from `start` are the mapping's usable part, ours and mapped
        // until drop; `&mut self` makes the slice the only way to reach them meanwhile (the
        // caller hands the stack to one child at a time).
        unsafe { std::slice::from_raw_parts_mut(start, self.len) }
    }

    /// Keeps the mapping for the life of the process; returns the start of the usable bytes.
    pub fn leak(self) -> usize {
        let start = self.base as usize + GUARD;
        std::mem::forget(self);
        start
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping `reserve` made, which nobody runs on any more.
        unsafe { libc::munmap(self.base, self.len + GUARD) };
    }
}

/// Types for which all-zero bytes are a valid value, so [`anonymous`] may hand out zeroed memory
/// as them.
///
/// # Safety
/// Implement only for types valid as all-zero bytes (integers, raw pointers; never references
/// or `NonNull`).
pub unsafe trait Zeroable: Copy {}

// SAFETY: every bit pattern, all-zero included, is a valid integer.
unsafe impl Zeroable for u8 {}
// SAFETY: as above.
unsafe impl Zeroable for usize {}
// SAFETY: an all-zero raw pointer is the null pointer, a valid value of the type.
unsafe impl Zeroable for *const libc::c_char {}

/// Zeroed anonymous private memory for `len` values of `T`, never unmapped (for a child that
/// will exec or exit): usable where malloc is not (after a fork of a threaded process).
pub fn anonymous<T: Zeroable>(len: usize) -> Option<&'static mut [T]> {
    let bytes = len.checked_mul(std::mem::size_of::<T>())?;
    // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            bytes.max(1),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: page-aligned (so aligned for T), zero-filled memory of `len` Ts that nothing else
    // refers to and that is never unmapped; all-zero is a valid T (`Zeroable`).
    Some(unsafe { std::slice::from_raw_parts_mut(p.cast::<T>(), len) })
}

/// Ends the calling process at once, without running destructors or atexit handlers.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// `setns(2)`: joins the namespace `fd` refers to (`nstype` names which kind it must be).
pub fn setns(fd: RawFd, nstype: libc::c_int) -> SysResult<()> {
    // SAFETY: setns takes a descriptor and flags; a bad descriptor is an error, not UB.
    check(unsafe { libc::setns(fd, nstype) }).map(drop)
}

pub fn unshare(flags: libc::c_int) -> SysResult<()> {
    // SAFETY: unshare takes plain flags.
    check(unsafe { libc::unshare(flags) }).map(drop)
}

/// Opens `path` and writes all of `data` to it.
pub fn write_file(
    path: &CStr,
    data: &[u8],
    flags: libc::c_int,
    mode: libc::mode_t,
) -> SysResult<()> {
    write_file_at(libc::AT_FDCWD, path, data, flags, mode)
}

/// [`write_file`] relative to the directory descriptor `dir`.
pub fn write_file_at(
    dir: RawFd,
    path: &CStr,
    data: &[u8],
    flags: libc::c_int,
    mode: libc::mode_t,
) -> SysResult<()> {
    // SAFETY: path is a valid C string; `dir` is a directory descriptor or AT_FDCWD.
    let fd = check(unsafe {
        libc::openat(
            dir,
            path.as_ptr(),
            flags | libc::O_WRONLY | libc::O_CLOEXEC,
            mode,
        )
    })?;
    let mut done = 0;
    let mut result = Ok(());
    while done < data.len() {
        // SAFETY: the slice bounds are valid for the length given.
        let n = unsafe { libc::write(fd, data[done..].as_ptr().cast(), data.len() - done) };
        if n < 0 {
            let e = Errno::last();
            if e.0 == libc::EINTR {
                continue;
            }
            result = Err(e);
            break;
        }
        done += usize::try_from(n).unwrap_or(0);
    }
    // SAFETY: fd was opened above and is closed once.
    unsafe { libc::close(fd) };
    result
}

pub fn mount(
    src: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> SysResult<()> {
    let p = |s: Option<&CStr>| s.map_or(ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is null or a valid C string.
    check(unsafe { libc::mount(p(src), target.as_ptr(), p(fstype), flags, p(data).cast()) })
        .map(drop)
}

pub fn umount_detach(target: &CStr) -> SysResult<()> {
    // SAFETY: target is a valid C string.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) }).map(drop)
}

/// Replaces the O_PATH descriptor `fd` by a detached copy of the mount tree it points into
/// (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`), at the same number: a bind that can be attached
/// in another mount namespace with [`attach_tree`].
pub fn clone_tree_at(fd: RawFd) -> SysResult<()> {
    let tree = open_tree_clone(fd, c"")?;
    // The tree replaces the O_PATH descriptor at the number the plan reserved.
    place_at(std::os::fd::IntoRawFd::into_raw_fd(tree), fd)
}

/// `open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)` of `path` relative to `dirfd` (an empty path:
/// `dirfd` itself): a detached, close-on-exec copy of the mount tree.
fn open_tree_clone(dirfd: RawFd, path: &CStr) -> SysResult<OwnedFd> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let mut flags = OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint;
    if path.is_empty() {
        flags |= libc::AT_EMPTY_PATH as libc::c_uint;
    }
    // SAFETY: path is a valid C string (empty with AT_EMPTY_PATH: `dirfd` itself).
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, dirfd, path.as_ptr(), flags) };
    // SAFETY: open_tree returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd_of(check_long(ret)?)) })
}

/// Attaches the detached mount tree `fd` (from [`clone_tree_at`]) at `target`.
pub fn attach_tree(fd: RawFd, target: &CStr) -> SysResult<()> {
    move_tree(fd, libc::AT_FDCWD, target)
}

/// `move_mount` of the detached tree `tree` to `target` relative to `to` (an empty target:
/// `to` itself, no path looked up).
fn move_tree(tree: RawFd, to: RawFd, target: &CStr) -> SysResult<()> {
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
    let mut flags = MOVE_MOUNT_F_EMPTY_PATH;
    if target.is_empty() {
        flags |= MOVE_MOUNT_T_EMPTY_PATH;
    }
    // SAFETY: an empty C string with F_EMPTY_PATH names `tree`; target is a valid C string
    // (empty with T_EMPTY_PATH: `to` itself).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            to,
            target.as_ptr(),
            flags,
        )
    };
    check_long(ret).map(drop)
}

/// Opens `path` as an `O_PATH` directory descriptor.
pub fn open_dir_path(path: &CStr) -> SysResult<OwnedFd> {
    // SAFETY: a valid C string; the descriptor returned is ours.
    let fd = check(unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: fd was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `path` (a device: `/dev/fuse`) for reading and writing, close-on-exec.
pub fn open_rdwr(path: &CStr) -> SysResult<OwnedFd> {
    // SAFETY: a valid C string; the descriptor returned is ours.
    let fd = check(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
    // SAFETY: fd was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens this process's mount namespace at descriptor `at`.
pub fn keep_mount_ns(at: RawFd) -> SysResult<()> {
    // SAFETY: a valid C string; the descriptor is moved to `at` and the original closed.
    let fd = check(unsafe {
        libc::open(
            c"/proc/self/ns/mnt".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    })?;
    place_at(fd, at)
}

/// The kernel's `struct mount_attr` (linux/mount.h).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `MS_PRIVATE` as `mount_attr.propagation` takes it.
const MS_PRIVATE_PROPAGATION: u64 = libc::MS_PRIVATE;

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// `mount_setattr(2)` on `path`, recursively when `recursive`.
pub fn mount_setattr(path: &CStr, recursive: bool, set: u64, clear: u64) -> SysResult<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    setattr(libc::AT_FDCWD, path, recursive, &attr)
}

/// The `mount_setattr(2)` call: `path` relative to `dirfd` (an empty path: `dirfd` itself),
/// recursively when `recursive`.
fn setattr(dirfd: RawFd, path: &CStr, recursive: bool, attr: &MountAttr) -> SysResult<()> {
    let mut flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    if path.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    // SAFETY: attr is a valid mount_attr of the size passed; path is a valid C string (empty
    // with AT_EMPTY_PATH: `dirfd` itself).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            libc::c_uint::try_from(flags).unwrap_or(0),
            ptr::from_ref(attr),
            std::mem::size_of::<MountAttr>(),
        )
    };
    check_long(ret).map(drop)
}

/// Where this process's argv and environment strings live (`arg_start`, `arg_end`,
/// `env_start`, `env_end` of /proc/self/stat), read once: a box's pid 1 is a copy of the
/// supervisor, and its /proc/1/cmdline would show the supervisor's command line.
pub fn process_strings() -> Option<[usize; 4]> {
    static AREAS: std::sync::OnceLock<Option<[usize; 4]>> = std::sync::OnceLock::new();
    *AREAS.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name (which may hold spaces) start with field 3.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let at = |n: usize| f.get(n - 3)?.parse::<usize>().ok();
        let areas = [at(48)?, at(49)?, at(50)?, at(51)?];
        (areas[0] < areas[1] && areas[2] <= areas[3]).then_some(areas)
    })
}

/// Replaces our command line with `name` and blanks our environment strings (a forked copy of
/// the supervisor's, in our own memory), and sets our thread name to `name`. `areas` is
/// [`process_strings`]' answer, read by the supervisor before the fork. The last byte of the
/// argv area is left non-zero, so the kernel shows /proc/PID/cmdline up to the first NUL.
pub fn retitle(areas: [usize; 4], name: &CStr) {
    let [arg_start, arg_end, env_start, env_end] = areas;
    let len = arg_end - arg_start;
    let name = name.to_bytes();
    let keep = name.len().min(len.saturating_sub(2));
    let arg = arg_start as *mut u8;
    // SAFETY: [arg_start, arg_end), `len` bytes, is this process's own argv strings (from
    // /proc/self/stat of the process we are a copy of); it stays mapped for the process's life,
    // and nothing in a box's setup reads it.
    unsafe { ptr::write_bytes(arg, 0, len) };
    // SAFETY: `keep` <= `len` bytes, so the copy stays inside the argv area above; `name` is
    // read from its own memory (callers pass a literal), which the argv area does not overlap.
    unsafe { ptr::copy_nonoverlapping(name.as_ptr(), arg, keep) };
    if len >= 2 {
        // SAFETY: `arg_end - 1` is the last byte of the argv area above.
        unsafe { *((arg_end - 1) as *mut u8) = b' ' };
    }
    // SAFETY: [env_start, env_end) is this process's own environment strings (from the same
    // /proc/self/stat); mapped for the process's life, and nothing in a box's setup reads them
    // (the program's environment is built apart from them).
    unsafe { ptr::write_bytes(env_start as *mut u8, 0, env_end - env_start) };
    let mut comm = [0u8; 16];
    let n = name.len().min(15);
    comm[..n].copy_from_slice(&name[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, comm.as_ptr()) };
}

/// Our soft limit of rlimit `resource` (`RLIM_INFINITY` as `u64::MAX`).
pub fn soft_limit(resource: u32) -> Option<u64> {
    let mut lim = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit64 on ourselves (pid 0) writes the old limit into `lim` and sets nothing.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            resource,
            ptr::null::<libc::rlimit64>(),
            ptr::from_mut(&mut lim),
        )
    };
    (ret == 0).then_some(lim.rlim_cur)
}

/// Sets our soft and hard limit of rlimit `resource` to `value` (a raw system call, as in the
/// rest of a box's setup).
pub fn set_limit(resource: u32, value: u64) -> SysResult<()> {
    let lim = libc::rlimit64 {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: prlimit64 on ourselves reads the new limit from `lim` and writes nothing back.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            resource,
            ptr::from_ref(&lim),
            ptr::null_mut::<libc::rlimit64>(),
        )
    })
    .map(drop)
}

/// Sets our soft limit of rlimit `resource` to `value`, keeping the hard limit.
#[cfg(test)]
pub fn set_soft_limit(resource: u32, value: u64) -> SysResult<()> {
    let mut lim = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit64 on ourselves writes the old limits into `lim` and sets nothing.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            resource,
            ptr::null::<libc::rlimit64>(),
            ptr::from_mut(&mut lim),
        )
    })?;
    lim.rlim_cur = value;
    // SAFETY: prlimit64 on ourselves reads the new limits from `lim` and writes nothing back.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            resource,
            ptr::from_ref(&lim),
            ptr::null_mut::<libc::rlimit64>(),
        )
    })
    .map(drop)
}

pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// Opens `path` with `O_PATH` and `RESOLVE_NO_SYMLINKS` (see [`open_path_at`]) at any number.
pub fn open_path_no_symlinks(path: &CStr) -> SysResult<OwnedFd> {
    openat2(
        libc::AT_FDCWD,
        path,
        libc::O_PATH | libc::O_CLOEXEC,
        RESOLVE_NO_SYMLINKS,
    )
}

/// `openat2(2)` of `path` relative to `dirfd` with these open flags and resolve flags.
fn openat2(dirfd: RawFd, path: &CStr, flags: libc::c_int, resolve: u64) -> SysResult<OwnedFd> {
    let how = OpenHow {
        flags: u64::try_from(flags).unwrap_or(0),
        mode: 0,
        resolve,
    };
    // SAFETY: path is a valid C string and `how` a valid open_how of the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            path.as_ptr(),
            ptr::from_ref(&how),
            std::mem::size_of::<OpenHow>(),
        )
    };
    // SAFETY: openat2 returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd_of(check_long(ret)?)) })
}

/// Owner uid and gid of what `fd` refers to (`fstat`, which works on `O_PATH` descriptors).
pub fn owner_of(fd: BorrowedFd<'_>) -> SysResult<(u32, u32)> {
    let st = rustix::fs::fstat(fd).map_err(|e| Errno(e.raw_os_error()))?;
    Ok((st.st_uid, st.st_gid))
}

/// A detached copy of the mount tree `fd` points into (`open_tree(OPEN_TREE_CLONE |
/// AT_RECURSIVE)`) whose ids are mapped through the user namespace `userns`
/// (`mount_setattr(MOUNT_ATTR_IDMAP)`, recursive): an idmapped bind to attach with
/// [`attach_tree`]. Only a caller with `CAP_SYS_ADMIN` in the initial user namespace may idmap
/// a host file system, so the supervisor makes these before the box's namespaces exist.
pub fn idmapped_tree(fd: BorrowedFd<'_>, userns: BorrowedFd<'_>) -> SysResult<OwnedFd> {
    let tree = open_tree_clone(fd.as_raw_fd(), c"")?;
    // Private: a copy of a shared host mount would otherwise stay in the host mount's peer
    // group, and a mount the box makes beneath it (a tmpfs below /workspace) would propagate to
    // the host and to every box holding a copy of the same directory.
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: MS_PRIVATE_PROPAGATION,
        userns_fd: u64::try_from(userns.as_raw_fd()).unwrap_or(u64::MAX),
    };
    setattr(tree.as_raw_fd(), c"", true, &attr)?;
    Ok(tree)
}

/// A user namespace with the id maps `uid_map` and `gid_map` (written by us, so they may name
/// any ids when we are root), as a descriptor: the mapping of an idmapped mount. A child waits
/// in it until we hold the descriptor, then exits.
pub fn userns_with_maps(uid_map: &[u8], gid_map: &[u8]) -> SysResult<OwnedFd> {
    let (r, w) = pipe()?;
    // SAFETY: the child only closes a descriptor, reads a pipe and exits (allocation-free).
    let pid = match unsafe { clone_fork(libc::CLONE_NEWUSER) }? {
        0 => {
            close_raw(w.as_raw_fd());
            let mut b = [0u8; 1];
            let _ = read(r.as_fd(), &mut b);
            exit_now(0)
        }
        pid => pid,
    };
    drop(r);
    let io = |e: std::io::Error| Errno(e.raw_os_error().unwrap_or(libc::EIO));
    let made = std::fs::write(format!("/proc/{pid}/uid_map"), uid_map)
        .and_then(|()| std::fs::write(format!("/proc/{pid}/gid_map"), gid_map))
        .and_then(|()| std::fs::File::open(format!("/proc/{pid}/ns/user")))
        .map(OwnedFd::from)
        .map_err(io);
    drop(w);
    let _ = wait4(pid, false);
    made
}

/// Becomes uid and gid 0 of the user namespace we are in, with no supplementary groups: after
/// joining or creating a user namespace our credentials are still the host's (as host root,
/// uid 0, which that namespace may map to nothing), so files we create and permission checks
/// would use them. Raw system calls: glibc's wrappers would try to signal every thread of the
/// process it believes exists, and a forked copy of a threaded supervisor has only one.
///
/// Changing ids clears the parent-death signal; it is set again here, and the caller checks
/// that its parent did not die in between.
pub fn become_ns_root(clear_groups: bool) -> SysResult<()> {
    let mut death: libc::c_int = 0;
    // SAFETY: PR_GET_PDEATHSIG writes one int through the pointer we pass.
    check(unsafe { libc::prctl(libc::PR_GET_PDEATHSIG, ptr::from_mut(&mut death)) })?;
    if clear_groups {
        // SAFETY: setgroups with a zero count reads no memory.
        check_long(unsafe { libc::syscall(libc::SYS_setgroups, 0, ptr::null::<libc::gid_t>()) })?;
    }
    // SAFETY: plain integer arguments.
    check_long(unsafe { libc::syscall(libc::SYS_setresgid, 0, 0, 0) })?;
    // SAFETY: plain integer arguments.
    check_long(unsafe { libc::syscall(libc::SYS_setresuid, 0, 0, 0) })?;
    // Changing ids made us non-dumpable, which hands our /proc entries (uid_map among them,
    // which a process below writes for itself) to the namespace's owner; pid 1 turns
    // non-dumpable again before the program exists.
    prctl(libc::PR_SET_DUMPABLE, 1)?;
    if death != 0 {
        prctl(
            libc::PR_SET_PDEATHSIG,
            libc::c_ulong::try_from(death).unwrap_or(0),
        )?;
    }
    Ok(())
}

pub fn mkdir(path: &CStr, mode: libc::mode_t) -> SysResult<()> {
    // SAFETY: path is a valid C string.
    match check(unsafe { libc::mkdir(path.as_ptr(), mode) }) {
        Err(Errno(libc::EEXIST)) => Ok(()),
        other => other.map(drop),
    }
}

/// Creates an empty regular file (a mount point for a file bind).
pub fn touch(path: &CStr) -> SysResult<()> {
    write_file(path, &[], libc::O_CREAT | libc::O_NOFOLLOW, 0o644)
}

pub fn symlink(target: &CStr, path: &CStr) -> SysResult<()> {
    // SAFETY: both are valid C strings.
    check(unsafe { libc::symlink(target.as_ptr(), path.as_ptr()) }).map(drop)
}

pub fn chdir(path: &CStr) -> SysResult<()> {
    // SAFETY: path is a valid C string.
    check(unsafe { libc::chdir(path.as_ptr()) }).map(drop)
}

pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> SysResult<()> {
    // SAFETY: both are valid C strings.
    let ret = unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) };
    check_long(ret).map(drop)
}

pub fn sethostname(name: &[u8]) -> SysResult<()> {
    // SAFETY: the slice is valid for its length.
    check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}

pub fn prctl(option: libc::c_int, arg2: libc::c_ulong) -> SysResult<libc::c_int> {
    // SAFETY: the options used by this crate take integer arguments only.
    check(unsafe {
        libc::prctl(
            option,
            arg2,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })
}

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

/// Sets the effective, permitted and inheritable sets to `keep` (a bit mask of capability numbers).
pub fn capset(keep: u64) -> SysResult<()> {
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    #[allow(clippy::cast_possible_truncation)] // split into the two 32-bit halves on purpose
    let halves = [keep as u32, (keep >> 32) as u32];
    let data = [
        CapData {
            effective: halves[0],
            permitted: halves[0],
            inheritable: halves[0],
        },
        CapData {
            effective: halves[1],
            permitted: halves[1],
            inheritable: halves[1],
        },
    ];
    // SAFETY: header and the two data elements have the layout capset(2) v3 expects.
    let ret = unsafe { libc::syscall(libc::SYS_capset, ptr::from_ref(&header), data.as_ptr()) };
    check_long(ret).map(drop)
}

/// Sets the effective and permitted sets to `own` and the inheritable set to `inheritable`:
/// a resident box's pid 1 keeps capabilities of its own (see `resident.rs`) that its programs
/// never inherit (they are outside the bounding set, and each program's process drops them).
pub fn capset_own(own: u64, inheritable: u64) -> SysResult<()> {
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    #[allow(clippy::cast_possible_truncation)] // split into the two 32-bit halves on purpose
    let half = |m: u64, i: u32| (m >> (32 * i)) as u32;
    let data = [0, 1].map(|i| CapData {
        effective: half(own, i),
        permitted: half(own, i),
        inheritable: half(inheritable, i),
    });
    // SAFETY: header and the two data elements have the layout capset(2) v3 expects.
    let ret = unsafe { libc::syscall(libc::SYS_capset, ptr::from_ref(&header), data.as_ptr()) };
    check_long(ret).map(drop)
}

/// Switches every uid and gid of this process to `uid` and `gid` and its supplementary groups
/// to `groups`. For a non-zero `uid` the kernel clears the permitted and effective capability
/// sets (no `SECBIT_KEEP_CAPS`, no `PR_SET_KEEPCAPS`). Needs `CAP_SETUID` and `CAP_SETGID`.
pub fn switch_ids(uid: u32, gid: u32, groups: &[u32]) -> SysResult<()> {
    // SAFETY: `groups` is a valid slice of gid_t (u32) of the length passed.
    check_long(unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) })?;
    // SAFETY: plain integer arguments.
    check_long(unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) })?;
    // SAFETY: plain integer arguments.
    check_long(unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) }).map(drop)
}

/// `mkdir -p` of the absolute `path` (each missing directory made 0755), then gives its last
/// directory to `uid`:`gid` (with `only_made`, only if this call made it). No component may be
/// a symlink, `.` or `..` (each is opened `O_NOFOLLOW | O_DIRECTORY` from the one before, from
/// `/`). Allocation-free: `path` is at most 4095 bytes, each component at most 255.
pub fn make_dir_owned(path: &[u8], uid: u32, gid: u32, only_made: bool) -> SysResult<()> {
    if path.first() != Some(&b'/') || path.len() >= 4096 {
        return Err(Errno(libc::EINVAL));
    }
    let open_at = |dir: RawFd, name: &CStr| -> SysResult<OwnedFd> {
        // SAFETY: a valid C string; the descriptor returned is ours.
        let fd = check(unsafe {
            libc::openat(
                dir,
                name.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: fd was just opened and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let mut at = open_at(libc::AT_FDCWD, c"/")?;
    let mut made = false;
    let mut name = [0u8; 256];
    for part in path.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
        if part == b"." || part == b".." || part.len() >= name.len() || part.contains(&0) {
            return Err(Errno(libc::EINVAL));
        }
        name[..part.len()].copy_from_slice(part);
        name[part.len()] = 0;
        let c = CStr::from_bytes_until_nul(&name).map_err(|_| Errno(libc::EINVAL))?;
        // SAFETY: a valid C string relative to our directory descriptor.
        made = match check(unsafe { libc::mkdirat(at.as_raw_fd(), c.as_ptr(), 0o755) }) {
            Ok(_) => true,
            Err(Errno(libc::EEXIST)) => false,
            Err(e) => return Err(e),
        };
        at = open_at(at.as_raw_fd(), c)?;
    }
    if only_made && !made {
        return Ok(());
    }
    // SAFETY: an empty C string with AT_EMPTY_PATH names the descriptor itself.
    check(unsafe { libc::fchownat(at.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH) })
        .map(drop)
}

/// Brings the loopback interface of the current network namespace up.
pub fn loopback_up() -> SysResult<()> {
    // SAFETY: plain socket creation.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: ifreq is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = libc::c_char::from_ne_bytes([*src]);
    }
    let flags =
        libc::c_short::try_from(libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING).unwrap_or(1);
    req.ifr_ifru.ifru_flags = flags;
    // SAFETY: SIOCSIFFLAGS reads an ifreq that lives for the call.
    let ret = unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, ptr::from_mut(&mut req)) };
    let result = check(ret).map(drop);
    // SAFETY: fd was opened above.
    unsafe { libc::close(fd) };
    result
}

pub fn dup2(from: RawFd, to: RawFd) -> SysResult<()> {
    if from == to {
        // Clear close-on-exec, which dup2 would have done.
        // SAFETY: fcntl on an fd we were handed.
        return check(unsafe { libc::fcntl(from, libc::F_SETFD, 0) }).map(drop);
    }
    // SAFETY: dup2 on descriptors the caller owns.
    check(unsafe { libc::dup2(from, to) }).map(drop)
}

pub fn close_raw(fd: RawFd) {
    // SAFETY: the caller owns fd and does not use it afterwards.
    unsafe { libc::close(fd) };
}

/// Closes every descriptor but `keep` (sorted here, in place).
pub fn close_all_except(keep: &mut [RawFd]) {
    keep.sort_unstable();
    let mut first = 0u32;
    for &fd in keep.iter() {
        let Ok(fd) = u32::try_from(fd) else { continue };
        if fd > first {
            close_range(first, fd - 1);
        }
        first = fd.saturating_add(1);
    }
    close_range(first, u32::MAX);
}

/// Closes the descriptors `first..=last`.
pub fn close_range(first: u32, last: u32) {
    if first > last {
        return;
    }
    // SAFETY: close_range takes plain integers.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if ret < 0 {
        for fd in first..=last.min(4096) {
            close_raw(i32::try_from(fd).unwrap_or(i32::MAX));
        }
    }
}

/// Marks every descriptor from `first` up close-on-exec, so the program in the box inherits only
/// its stdio even when our caller leaked descriptors to us.
pub fn cloexec_from(first: u32) -> SysResult<()> {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    // SAFETY: close_range takes plain integers.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    check_long(ret).map(drop)
}

/// `lchown(2)`: gives `path` itself (never a link's target) to `uid`:`gid`.
pub fn lchown(path: &CStr, uid: u32, gid: u32) -> SysResult<()> {
    // SAFETY: path is a valid C string.
    check(unsafe { libc::lchown(path.as_ptr(), uid, gid) }).map(drop)
}

pub fn setsid() -> SysResult<()> {
    // SAFETY: no arguments.
    check(unsafe { libc::setsid() }).map(drop)
}

/// Makes the terminal open at `fd` the controlling terminal of the calling session leader
/// (`TIOCSCTTY`, without stealing one that is another session's).
pub fn set_controlling_terminal(fd: RawFd) -> SysResult<()> {
    // SAFETY: TIOCSCTTY takes an integer argument; 0 asks for no steal.
    check(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) }).map(drop)
}

/// `execve(2)`. Returns only on failure.
pub fn execve(path: &CStr, argv: &[*const libc::c_char], envp: &[*const libc::c_char]) -> Errno {
    // SAFETY: argv and envp are null-terminated arrays of valid C strings built by the caller.
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    Errno::last()
}

/// Resets every signal to its default disposition and unblocks all signals, so the program in the
/// box does not inherit ours (Rust ignores SIGPIPE; the supervisor blocks SIGINT and SIGTERM).
pub fn reset_signals() {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: SIG_DFL is always a valid disposition.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    let set = sigset(&[]);
    // SAFETY: an empty set built by `sigset`; the old mask is not asked for.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &set, ptr::null_mut()) };
}

/// The raw wait status of a child, with its resource usage.
pub struct Waited {
    pub pid: libc::pid_t,
    pub status: libc::c_int,
    pub rusage: libc::rusage,
}

/// `wait4(pid)`, retried on EINTR. `nohang` returns `Ok(None)` when the child still runs.
pub fn wait4(pid: libc::pid_t, nohang: bool) -> SysResult<Option<Waited>> {
    let mut status = 0;
    // SAFETY: rusage is plain old data.
    let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
    let flags = if nohang { libc::WNOHANG } else { 0 };
    loop {
        // SAFETY: status and rusage are valid for writes.
        let ret = unsafe { libc::wait4(pid, &mut status, flags | libc::__WALL, &mut rusage) };
        if ret < 0 {
            let e = Errno::last();
            if e.0 == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if ret == 0 {
            return Ok(None);
        }
        return Ok(Some(Waited {
            pid: ret,
            status,
            rusage,
        }));
    }
}

pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> SysResult<()> {
    // SAFETY: kill takes plain integers.
    check(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// A pidfd for `pid` (readable once the process has exited).
pub fn pidfd_open(pid: libc::pid_t) -> SysResult<OwnedFd> {
    // SAFETY: pidfd_open takes plain integers.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    let fd = fd_of(check_long(ret)?);
    // SAFETY: the kernel returned a fresh descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A `SOCK_SEQPACKET` socket pair, close-on-exec.
pub fn seqpacket_pair() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    let first = unsafe { OwnedFd::from_raw_fd(fds[0]) };
    // SAFETY: as for `first`: fresh, distinct from it, owned by nobody else.
    let second = unsafe { OwnedFd::from_raw_fd(fds[1]) };
    Ok((first, second))
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    let first = unsafe { OwnedFd::from_raw_fd(fds[0]) };
    // SAFETY: as for `first`: fresh, distinct from it, owned by nobody else.
    let second = unsafe { OwnedFd::from_raw_fd(fds[1]) };
    Ok((first, second))
}

/// Sends `data` on a connected socket, with `fd` attached as SCM_RIGHTS when given.
/// Allocation-free: usable in the child.
pub fn send_with_fd(sock: RawFd, data: &[u8], fd: Option<RawFd>) -> SysResult<()> {
    match fd {
        Some(fd) => send_with_fds(sock, data, &[fd]),
        None => send_with_fds(sock, data, &[]),
    }
}

/// The most descriptors one message carries ([`send_with_fds`], [`recv_with_fds`]).
pub const MAX_FDS: usize = 4;

/// Sends `data` on a connected socket with `fds` (at most [`MAX_FDS`]) attached as one
/// SCM_RIGHTS message. Allocation-free: usable in the child.
pub fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> SysResult<()> {
    // Control buffer big enough for MAX_FDS descriptors, aligned for cmsghdr.
    #[repr(C, align(8))]
    struct Cmsg([u8; 64]);
    if fds.len() > MAX_FDS {
        return Err(Errno(libc::EINVAL));
    }
    let mut cbuf = Cmsg([0; 64]);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain old data.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = u32::try_from(fds.len() * 4).unwrap_or(16);
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(bytes) } as usize;
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: CMSG_FIRSTHDR reads `msg`'s control fields, just set to `cbuf`; since
        // `space` >= the size of a header, it returns the start of `cbuf`, never null.
        let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        // SAFETY: `cmsg` is the start of `cbuf`, aligned for cmsghdr (align(8)), zeroed and
        // large enough for a header; nothing else reaches `cbuf` while the reference lives.
        let hdr = unsafe { &mut *cmsg };
        hdr.cmsg_level = libc::SOL_SOCKET;
        hdr.cmsg_type = libc::SCM_RIGHTS;
        // SAFETY: CMSG_LEN is a pure computation.
        hdr.cmsg_len = unsafe { libc::CMSG_LEN(bytes) } as usize;
        // SAFETY: CMSG_DATA only computes the address just past the header `cmsg`.
        let data = unsafe { libc::CMSG_DATA(cmsg) }.cast::<libc::c_int>();
        for (i, &fd) in fds.iter().enumerate() {
            // SAFETY: `space` (CMSG_SPACE of MAX_FDS ints at most, 40 bytes <= 64) leaves room
            // for `fds.len()` ints after the header, inside `cbuf`; written unaligned, as the
            // data's alignment is not promised.
            unsafe { ptr::write_unaligned(data.wrapping_add(i), fd) };
        }
    }
    loop {
        // SAFETY: msg and everything it points to live for the call.
        let ret = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if ret >= 0 {
            return Ok(());
        }
        let e = Errno::last();
        if e.0 != libc::EINTR {
            return Err(e);
        }
    }
}

/// Receives one message into `buf` with up to [`MAX_FDS`] descriptors (close-on-exec), stored
/// in `fds`: returns the message's length and how many came. Allocation-free: usable in the
/// child. Descriptors beyond `fds` are closed.
pub fn recv_with_fds(
    sock: RawFd,
    buf: &mut [u8],
    fds: &mut [RawFd; MAX_FDS],
) -> SysResult<(usize, usize)> {
    #[repr(C, align(8))]
    struct Cmsg([u8; 128]);
    let mut cbuf = Cmsg([0; 128]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain old data.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.0.len();
    let n = loop {
        // SAFETY: msg and its buffers live for the call.
        let ret = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if ret >= 0 {
            break usize::try_from(ret).unwrap_or(0);
        }
        let e = Errno::last();
        if e.0 != libc::EINTR {
            return Err(e);
        }
    };
    let mut count = 0;
    // SAFETY: CMSG_FIRSTHDR reads `msg`'s control fields (`cbuf` and the length the kernel
    // filled in); it returns null unless a whole header fits.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: a non-null header from CMSG_FIRSTHDR/CMSG_NXTHDR lies wholly inside `cbuf`
        // (both check it against msg_controllen), aligned for cmsghdr; only read.
        let hdr = unsafe { &*cmsg };
        if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN is a pure computation.
            let header = unsafe { libc::CMSG_LEN(0) } as usize;
            let ints = hdr.cmsg_len.saturating_sub(header) / 4;
            // SAFETY: CMSG_DATA only computes the address just past the header `cmsg`.
            let data = unsafe { libc::CMSG_DATA(cmsg) }.cast::<libc::c_int>();
            for i in 0..ints {
                // SAFETY: the kernel wrote `ints` ints after this header (its cmsg_len says
                // so), inside `cbuf`; read unaligned, as their alignment is not promised.
                let raw = unsafe { ptr::read_unaligned(data.wrapping_add(i)) };
                if count < MAX_FDS {
                    fds[count] = raw;
                    count += 1;
                } else {
                    close_raw(raw);
                }
            }
        }
        // SAFETY: `cmsg` is a header inside `msg`'s control buffer; CMSG_NXTHDR returns the
        // next whole header in it, or null.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    Ok((n, count))
}

/// Receives one message into `buf`, returning its length and the first descriptor attached, if
/// any (others are closed). A length of 0 means the peer closed.
pub fn recv_with_fd(sock: BorrowedFd<'_>, buf: &mut [u8]) -> SysResult<(usize, Option<OwnedFd>)> {
    let mut fds = [0; MAX_FDS];
    let (n, count) = recv_with_fds(sock.as_raw_fd(), buf, &mut fds)?;
    let mut first = None;
    for &raw in &fds[..count] {
        // SAFETY: the kernel installed this descriptor in our table for this message; nothing
        // else owns it (a second one is closed when dropped here).
        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
        first.get_or_insert(owned);
    }
    Ok((n, first))
}

/// The set of `signals`.
fn sigset(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain old data; all-zero is a valid value.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a local, valid for writes.
    unsafe { libc::sigemptyset(&mut set) };
    for &s in signals {
        // SAFETY: `set` is a local, valid for writes; an invalid signal number is refused
        // (EINVAL), not undefined.
        unsafe { libc::sigaddset(&mut set, s) };
    }
    set
}

/// `pthread_sigmask(how, signals)` for the calling thread.
fn thread_mask(how: libc::c_int, signals: &[libc::c_int]) -> SysResult<()> {
    let set = sigset(signals);
    // SAFETY: a valid set; the old mask is not asked for. pthread_sigmask returns the error
    // number instead of setting errno.
    match unsafe { libc::pthread_sigmask(how, &set, ptr::null_mut()) } {
        0 => Ok(()),
        e => Err(Errno(e)),
    }
}

/// Blocks `signals` in the calling thread and returns a signalfd that reports them.
pub fn block_signals_fd(signals: &[libc::c_int]) -> SysResult<OwnedFd> {
    thread_mask(libc::SIG_BLOCK, signals)?;
    let set = sigset(signals);
    // SAFETY: a valid set; signalfd returns a fresh descriptor we own.
    let fd = check(unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) })?;
    // SAFETY: the descriptor was just returned to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Unblocks `signals` in the calling thread.
pub fn unblock_signals(signals: &[libc::c_int]) {
    let _ = thread_mask(libc::SIG_UNBLOCK, signals);
}

/// Blocks `signals` in the calling thread (for helper threads: a process-directed signal must
/// reach the thread that turns it into "kill the box, clean up, report", not end the process
/// from a thread that cannot). Children reset their mask before exec (`reset_signals`).
pub fn block_signals(signals: &[libc::c_int]) {
    let _ = thread_mask(libc::SIG_BLOCK, signals);
}

/// Starts a background helper thread named `name` with the forwarded signals blocked (see
/// [`block_signals`]); None if the thread cannot be made.
pub fn spawn_helper(
    name: &str,
    signals: &'static [libc::c_int],
    f: impl FnOnce() + Send + 'static,
) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            block_signals(signals);
            f();
        })
        .ok()
}

/// `poll(2)` over `fds`, retried on EINTR. `timeout_ms < 0` waits forever.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> SysResult<usize> {
    loop {
        // SAFETY: the slice is a valid array of pollfd of the given length.
        let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if ret >= 0 {
            return Ok(usize::try_from(ret).unwrap_or(0));
        }
        let e = Errno::last();
        if e.0 != libc::EINTR {
            return Err(e);
        }
    }
}

/// `write(2)` of all of `data`, retried on EINTR. Allocation-free: usable in the child.
pub fn write_all(fd: BorrowedFd<'_>, mut data: &[u8]) -> SysResult<()> {
    while !data.is_empty() {
        // SAFETY: data is a valid buffer of its length.
        let ret = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
        if ret < 0 {
            let e = Errno::last();
            if e.0 == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        data = &data[usize::try_from(ret).unwrap_or(data.len())..];
    }
    Ok(())
}

/// `read(2)` into `buf`, retried on EINTR.
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> SysResult<usize> {
    loop {
        // SAFETY: buf is valid for writes of its length.
        let ret = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if ret >= 0 {
            return Ok(usize::try_from(ret).unwrap_or(0));
        }
        let e = Errno::last();
        if e.0 != libc::EINTR {
            return Err(e);
        }
    }
}

pub fn set_nonblocking(fd: BorrowedFd<'_>) -> SysResult<()> {
    // SAFETY: fcntl on a descriptor we borrow.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(drop)
}

/// The kernel's `struct open_how` (linux/openat2.h).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_XDEV: u64 = 0x01;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

/// `openat2` with `RESOLVE_NO_SYMLINKS`: the path (already canonical, so symlink-free when it
/// was checked) must still be symlink-free, so a component swapped for a symlink since the check
/// fails with ELOOP instead of redirecting a bind.
pub fn open_path_at(path: &CStr, at: RawFd) -> SysResult<()> {
    let fd = open_path_no_symlinks(path)?;
    place_at(std::os::fd::IntoRawFd::into_raw_fd(fd), at)
}

/// Moves our descriptor `fd` to the number `at` (close-on-exec), closing `fd`.
pub fn place_at(fd: RawFd, at: RawFd) -> SysResult<()> {
    if fd == at {
        return Ok(());
    }
    // SAFETY: dup3 onto a number the plan reserved; fd is ours and closed right after.
    let r = check(unsafe { libc::dup3(fd, at, libc::O_CLOEXEC) }).map(drop);
    close_raw(fd);
    r
}

pub fn geteuid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

pub fn getegid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getegid() }
}

pub fn getppid() -> libc::pid_t {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getppid() }
}

pub fn getpid() -> libc::pid_t {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getpid() }
}

/// Nanoseconds of CLOCK_MONOTONIC.
pub fn monotonic_ns() -> u64 {
    // SAFETY: timespec is plain old data, clock_gettime writes it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: ts is valid for writes.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// `u64` slots in a shared anonymous mapping: a child writes them (its copy of the mapping is
/// the same memory) and we read them. Unmapped on drop.
pub struct SharedSlots {
    base: *mut u64,
    len: usize,
}

impl SharedSlots {
    /// `len` zeroed slots; None if mmap fails.
    pub fn new(len: usize) -> Option<SharedSlots> {
        let bytes = len.checked_mul(std::mem::size_of::<u64>())?;
        // SAFETY: a fresh anonymous shared mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                bytes.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        (p != libc::MAP_FAILED).then(|| SharedSlots {
            base: p.cast(),
            len,
        })
    }

    /// Slot `i` (0 while nobody wrote it); None past the end.
    pub fn get(&self, i: usize) -> Option<u64> {
        (i < self.len).then(|| {
            // SAFETY: `i` < `len`, so slot `i` is inside the mapping.
            let slot = unsafe { self.base.add(i) };
            // SAFETY: `slot` is inside the mapping, which lives as long as `self`, and aligned
            // (mmap gives page alignment); a volatile read, since another process writes it.
            unsafe { ptr::read_volatile(slot) }
        })
    }

    /// Writes `value` into slot `i` (nothing past the end). Allocation-free: for the child.
    pub fn set(&self, i: usize, value: u64) {
        if i < self.len {
            // SAFETY: `i` < `len`, so slot `i` is inside the mapping.
            let slot = unsafe { self.base.add(i) };
            // SAFETY: `slot` is inside the mapping, which lives as long as `self`, and aligned;
            // the memory is only ever reached through raw pointers, never through a reference.
            unsafe { ptr::write_volatile(slot, value) };
        }
    }
}

impl Drop for SharedSlots {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `new`.
        unsafe { libc::munmap(self.base.cast(), (self.len * 8).max(1)) };
    }
}

/// Available blocks and inodes of the file system holding `path` (`statvfs(3)`).
pub fn free_space(path: &CStr) -> SysResult<(u64, u64)> {
    // SAFETY: statvfs is plain old data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: path is a valid C string and st is valid for writes.
    check(unsafe { libc::statvfs(path.as_ptr(), &mut st) })?;
    Ok((st.f_bavail, st.f_favail))
}

/// `mkdtemp(3)`: creates a fresh 0700 directory named `template` with its trailing `XXXXXX`
/// replaced, and returns its path.
pub fn mkdtemp(template: &std::path::Path) -> SysResult<std::path::PathBuf> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut bytes = template.as_os_str().as_bytes().to_vec();
    if bytes.contains(&0) {
        return Err(Errno(libc::EINVAL));
    }
    bytes.push(0);
    // SAFETY: a NUL-terminated, writable buffer; mkdtemp rewrites its XXXXXX in place.
    let p = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(Errno::last());
    }
    bytes.pop();
    Ok(std::path::PathBuf::from(std::ffi::OsString::from_vec(
        bytes,
    )))
}

/// A `pollfd` asking whether `fd` is readable.
pub fn poll_in(fd: BorrowedFd<'_>) -> libc::pollfd {
    libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Creates (or finds) `name` in the directory `dir` as a mount point, a directory or an empty
/// regular file, and opens it `O_PATH` without following a symlink anywhere (`openat2` with
/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`): inside a
/// host directory (a workspace other boxes write at the same time) a planted link fails the
/// step instead of steering a mount elsewhere.
pub fn mount_point_at(dir: BorrowedFd<'_>, name: &CStr, is_dir: bool) -> SysResult<OwnedFd> {
    // An existing entry is left as it is (EEXIST), whatever it is: the open below checks it.
    let made = if is_dir {
        // SAFETY: `dir` is an open descriptor and `name` a valid C string.
        unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) }
    } else {
        // SAFETY: as above; a regular file needs no device number.
        unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), libc::S_IFREG | 0o644, 0) }
    };
    match check(made) {
        Ok(_) | Err(Errno(libc::EEXIST)) => {}
        Err(e) => return Err(e),
    }
    let fd = open_beneath(dir, name, is_dir, true)?;
    // O_PATH | O_NOFOLLOW opens a final symlink itself rather than failing: a file mount point
    // must be a regular file (a directory's is one through O_DIRECTORY).
    if !is_dir {
        let st = rustix::fs::fstat(&fd).map_err(|e| Errno(e.raw_os_error()))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(Errno(libc::ELOOP));
        }
    }
    Ok(fd)
}

/// Opens `name` in `dir` `O_PATH` (a directory when `is_dir`) with `openat2`, following no
/// symlink and no magic link and staying beneath `dir`; `same_mount`: never into another mount
/// either (`RESOLVE_NO_XDEV`).
pub fn open_beneath(
    dir: BorrowedFd<'_>,
    name: &CStr,
    is_dir: bool,
    same_mount: bool,
) -> SysResult<OwnedFd> {
    let mut flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    if is_dir {
        flags |= libc::O_DIRECTORY;
    }
    let mut resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    if same_mount {
        resolve |= RESOLVE_NO_XDEV;
    }
    openat2(dir.as_raw_fd(), name, flags, resolve)
}

/// A detached copy of the mount tree at `source` (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`).
pub fn clone_tree(source: &CStr) -> SysResult<OwnedFd> {
    open_tree_clone(libc::AT_FDCWD, source)
}

/// `mount_setattr(2)` on the mount (tree) `fd` itself, which it also makes private (a copy of
/// a shared mount would otherwise share what is mounted beneath it with its peers).
pub fn mount_setattr_fd(
    fd: BorrowedFd<'_>,
    recursive: bool,
    set: u64,
    clear: u64,
) -> SysResult<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: MS_PRIVATE_PROPAGATION,
        userns_fd: 0,
    };
    setattr(fd.as_raw_fd(), c"", recursive, &attr)
}

/// Attaches the detached tree `tree` on the mount point `at` (both descriptors: no path is
/// looked up again).
pub fn attach_tree_on(tree: BorrowedFd<'_>, at: BorrowedFd<'_>) -> SysResult<()> {
    move_tree(tree.as_raw_fd(), at.as_raw_fd(), c"")
}

/// Mounts a tmpfs (nosuid, nodev, `opts`) on the mount point `at`, through its
/// `/proc/self/fd/N` link (the exact directory opened, whatever its path is now); the link's
/// text is made on the stack (this runs in the box's child, which may not allocate).
pub fn tmpfs_on(at: BorrowedFd<'_>, opts: &CStr) -> SysResult<()> {
    let mut buf = [0u8; 32];
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    let mut n = u32::try_from(at.as_raw_fd()).map_err(|_| Errno(libc::EBADF))?;
    let mut digits = [0u8; 10];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for (i, d) in digits[..len].iter().rev().enumerate() {
        buf[prefix.len() + i] = *d;
    }
    let path = CStr::from_bytes_until_nul(&buf).map_err(|_| Errno(libc::EINVAL))?;
    mount(
        Some(c"tmpfs"),
        path,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(opts),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_flags_keep_every_bit_and_the_exit_signal() {
        // CLONE_IO is the sign bit of a c_int: the flags must reach the kernel bit for bit,
        // never become 0 (a fork without namespaces, and without SIGCHLD).
        let flags = libc::CLONE_IO | libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
        let bits = clone_flags(flags);
        assert_eq!(bits & 0xff, libc::SIGCHLD as libc::c_ulong);
        assert_eq!(bits, 0x8000_0000 | 0x1000_0000 | 0x0002_0000 | 17);
        assert_eq!(clone_flags(libc::CLONE_NEWPID), 0x2000_0000 | 17);
    }
}
