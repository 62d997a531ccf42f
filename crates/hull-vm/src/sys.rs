//! The guest init's one unsafe step: what the program's process does between fork and exec
//! (std's `pre_exec`): join the program's cgroup, give up every capability and the bounding
//! set, and set no_new_privs, so the program is the guest's root without root's powers (as a
//! namespace box's program is), and cannot lift the caps its cgroup holds. On the host: a VM's
//! helpers (QEMU, virtiofsd) started with every signal unblocked, killed with their hull, and
//! (as host root) virtiofsd as the root of a user namespace mapped to hull's own ids; the
//! signals that end a VM's run, blocked and taken while it runs.

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
fn helper_defaults(parent: libc::pid_t, first_unused: libc::c_uint) -> io::Result<()> {
    // Descriptors the caller's process inherited without close-on-exec (a shell's, a
    // binding's) are not the helper's: closed at its exec. (Marked, not closed: std's own
    // error pipe must stay open until the exec.)
    // SAFETY: close_range with integer arguments only.
    check(unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first_unused,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    })?;
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
/// Descriptors from `first_unused` up are closed at its exec (those below are stdio and what
/// [`pass_fd`] gave it).
pub fn as_helper(cmd: &mut Command, first_unused: libc::c_uint) {
    let parent = rustix::process::getpid().as_raw_nonzero().get();
    // SAFETY: the closure only makes async-signal-safe system calls (see `helper_defaults`).
    unsafe {
        cmd.pre_exec(move || helper_defaults(parent, first_unused));
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

/// Host ids a helper runs as: its root in a user namespace of its own is host `uid`/`gid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
}

/// The child's side of [`in_userns`] (forked, before exec): a user namespace of its own, its
/// pid told to the parent, then, once the parent has written the maps, root in it (host
/// `ids`) with no supplementary groups. Only async-signal-safe calls.
fn enter_userns(tell: libc::c_int, wait: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare with a flag only; the forked child has one thread.
    check(unsafe { libc::unshare(libc::CLONE_NEWUSER) }.into())?;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() }.to_ne_bytes();
    // SAFETY: writes 4 bytes from a live array to a descriptor the closure owns.
    if unsafe { libc::write(tell, pid.as_ptr().cast(), pid.len()) } != 4 {
        return Err(io::Error::last_os_error());
    }
    let mut go = [0u8; 1];
    // SAFETY: reads at most 1 byte into a live array.
    if unsafe { libc::read(wait, go.as_mut_ptr().cast(), 1) } != 1 || go[0] != 1 {
        // The parent could not write the maps: never run unmapped.
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    // Raw system calls: glibc's set*id wrappers signal every thread of the process, which a
    // forked child must not rely on.
    // SAFETY: setgroups with an empty list.
    check(unsafe { libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) })?;
    // SAFETY: setresgid with integer ids.
    check(unsafe { libc::syscall(libc::SYS_setresgid, 0, 0, 0) })?;
    // SAFETY: setresuid with integer ids.
    check(unsafe { libc::syscall(libc::SYS_setresuid, 0, 0, 0) })?;
    Ok(())
}

/// Makes `cmd` start as root of a user namespace of its own whose root is host `ids` and
/// which maps nothing else: how host root runs virtiofsd, which refuses its own `--uid-map`
/// as root. The helper's capabilities then reach only files `ids` own, so what the guest
/// makes on a share belongs to `ids`, never to host root. The maps are written by a thread
/// of the caller while the child waits (only a process with CAP_SETUID in the parent
/// namespace may map ids other than its own). Call before [`as_helper`]: changing ids clears
/// the death signal, which `as_helper` then sets. Keep the returned writer until `spawn`
/// returns, then drop or [`MapWriter::finish`] it.
pub fn in_userns(cmd: &mut Command, ids: Ids) -> io::Result<MapWriter> {
    let (pid_r, pid_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (go_r, go_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (tell, wait) = (pid_w.as_raw_fd(), go_r.as_raw_fd());
    // SAFETY: the closure only makes async-signal-safe system calls (see `enter_userns`);
    // the descriptors it uses stay open in the parent until the child has exec'd (the
    // `MapWriter` holds them).
    unsafe {
        cmd.pre_exec(move || enter_userns(tell, wait));
    }
    let thread = std::thread::spawn(move || {
        let mut pid = [0u8; 4];
        let mut file = std::fs::File::from(pid_r);
        // EOF: the child failed before it asked (its error reaches `spawn`).
        if io::Read::read_exact(&mut file, &mut pid).is_err() {
            return None;
        }
        let pid = i32::from_ne_bytes(pid);
        let write = |name: &str, id: u32| {
            std::fs::write(format!("/proc/{pid}/{name}"), format!("0 {id} 1\n"))
                .map_err(|e| format!("writing {name} (0 {id} 1): {e}"))
        };
        let done = write("uid_map", ids.uid).and_then(|()| write("gid_map", ids.gid));
        let _ = rustix::io::write(&go_w, &[u8::from(done.is_ok())]);
        done.err()
    });
    Ok(MapWriter {
        thread: Some(thread),
        ends: Some((pid_w, go_r)),
    })
}

/// The thread writing a helper's maps and the child's ends of its pipes: drop it after
/// `spawn` (the child has exec'd or failed), which closes the ends (so the thread sees EOF if
/// the child never asked) and joins the thread.
#[derive(Debug)]
pub struct MapWriter {
    thread: Option<std::thread::JoinHandle<Option<String>>>,
    ends: Option<(OwnedFd, OwnedFd)>,
}

impl MapWriter {
    /// Ends it (see the type) and says why the maps could not be written, if they could not
    /// (the child then refused to run: its `spawn` failed with `EPERM`).
    pub fn finish(mut self) -> Option<String> {
        self.end()
    }

    fn end(&mut self) -> Option<String> {
        self.ends = None;
        self.thread.take().and_then(|t| t.join().ok().flatten())
    }
}

impl Drop for MapWriter {
    fn drop(&mut self) {
        self.end();
    }
}

/// In the forked child: `fd` becomes descriptor `to`, kept across exec. Only async-signal-safe
/// calls.
fn move_fd(fd: libc::c_int, to: libc::c_int) -> io::Result<()> {
    if fd == to {
        // SAFETY: fcntl on a descriptor the parent keeps open until the child has exec'd.
        return check(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }.into());
    }
    // SAFETY: dup2 of a descriptor the parent keeps open onto a fixed number; the new one has
    // no close-on-exec flag.
    check(unsafe { libc::dup2(fd, to) }.into())
}

/// Gives `cmd` the descriptor `fd` (which the caller keeps open until `spawn` returns) as its
/// descriptor `to`. Register it after [`in_userns`], whose pipes may hold low numbers.
pub fn pass_fd(cmd: &mut Command, fd: &impl AsRawFd, to: libc::c_int) {
    let fd = fd.as_raw_fd();
    // SAFETY: the closure only makes async-signal-safe system calls (see `move_fd`).
    unsafe {
        cmd.pre_exec(move || move_fd(fd, to));
    }
}

/// Makes `cmd` start in the directory `dir` (which the caller keeps open until `spawn`
/// returns), entered by descriptor while the child still has the caller's rights. Register it
/// before [`in_userns`].
pub fn enter_dir(cmd: &mut Command, dir: &impl AsRawFd) {
    let fd = dir.as_raw_fd();
    let enter = move || {
        // SAFETY: fchdir on a descriptor the parent keeps open.
        check(unsafe { libc::fchdir(fd) }.into())
    };
    // SAFETY: the closure only makes one async-signal-safe system call.
    unsafe {
        cmd.pre_exec(enter);
    }
}

/// Closes every descriptor from 3 up (a keeper process that never execs must not hold the
/// spawning parent's error pipe, or `spawn` would wait for it).
fn close_from_3() {
    // SAFETY: close_range with integer arguments; the calling process uses none of them.
    unsafe { libc::syscall(libc::SYS_close_range, 3, libc::c_uint::MAX, 0) };
}

/// Waits for `pid` and exits with its status (a signal's death as 128 + the signal).
fn wait_and_exit(pid: libc::pid_t) -> ! {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child into a live integer.
        let r = unsafe { libc::waitpid(pid, &raw mut status, 0) };
        if r == pid || (r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR)) {
            break;
        }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    // SAFETY: ends this process without running the parent's atexit handlers or destructors.
    unsafe { libc::_exit(code) }
}

/// In the forked child (C): the program runs as the only process (Q) under an init of its own
/// (P, in a new PID namespace). C and P only wait; P dies with C (its death signal), and the
/// kernel kills everything in a PID namespace whose init dies. So a helper that changes its
/// own ids (which clears its death signal: QEMU's `-run-with`) still dies with its hull.
/// Only async-signal-safe calls.
fn keep_in_pid_ns() -> io::Result<()> {
    // SAFETY: unshare with a flag only; it affects this process's later children.
    check(unsafe { libc::unshare(libc::CLONE_NEWPID) }.into())?;
    fork_waiting()?;
    // Here: the namespace's init.
    let kill = libc::c_ulong::from(libc::SIGKILL.unsigned_abs());
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, kill, 0, 0, 0) }.into())?;
    fork_waiting()
}

/// Forks; the parent only waits for the child and exits with its status (holding no
/// descriptor), the child returns. Only async-signal-safe calls.
fn fork_waiting() -> io::Result<()> {
    // SAFETY: fork in a single-threaded child of `spawn`; each side makes only raw system
    // calls.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    if child > 0 {
        close_from_3();
        wait_and_exit(child);
    }
    Ok(())
}

/// Starts `cmd` as the only process under an init of its own that dies with the process
/// `spawn` returns (see [`keep_in_pid_ns`]); needs CAP_SYS_ADMIN (host root). Register it
/// after [`as_helper`], whose death signal the returned process then holds; killing that
/// process ends the program.
pub fn in_own_pid_ns(cmd: &mut Command) {
    // SAFETY: the closure only makes async-signal-safe system calls (see `keep_in_pid_ns`).
    unsafe {
        cmd.pre_exec(keep_in_pid_ns);
    }
}

/// The signals that end a VM from outside, as they end a namespace box (hull-box's
/// `ending::FORWARDED`): the run reports the program killed instead of hull dying with QEMU.
pub const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: an empty set, initialized by sigemptyset before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t to initialize.
    unsafe { libc::sigemptyset(&raw mut set) };
    for s in FORWARDED {
        // A signal hull ignores (SIGHUP under `nohup`) is not hull's to answer: blocked, the
        // kernel would keep it for `sigtimedwait` instead of dropping it.
        // SAFETY: zeroed storage sigaction fills; only the current action is read.
        let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a valid signal number and storage for its action.
        let asked = unsafe { libc::sigaction(s, std::ptr::null(), &raw mut now) };
        if asked == 0 && now.sa_sigaction == libc::SIG_IGN {
            continue;
        }
        // SAFETY: `set` is initialized; the signal numbers are valid.
        unsafe { libc::sigaddset(&raw mut set, s) };
    }
    set
}

/// While held, [`FORWARDED`] are blocked in the calling thread (and in every thread it starts,
/// which inherit its mask) and wait for [`pending_forwarded`]; dropped, the thread's mask is
/// restored (a signal still pending is then delivered as before).
pub struct ForwardedBlocked {
    old: libc::sigset_t,
}

impl ForwardedBlocked {
    pub fn block() -> io::Result<ForwardedBlocked> {
        let set = forwarded_set();
        // SAFETY: zeroed storage for the old mask, which pthread_sigmask fills.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid sets for this thread's mask.
        let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, &raw mut old) };
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
        Ok(ForwardedBlocked { old })
    }
}

impl Drop for ForwardedBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `block` for this thread.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &raw const self.old, std::ptr::null_mut())
        };
    }
}

/// A forwarded signal sent to this process or thread while blocked, taken (`None`: none is).
pub fn pending_forwarded() -> Option<libc::c_int> {
    let set = forwarded_set();
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid set and timeout; no siginfo is asked for.
    let sig = unsafe { libc::sigtimedwait(&raw const set, std::ptr::null_mut(), &raw const now) };
    (sig > 0).then_some(sig)
}

/// Whether a forwarded signal waits for this thread or process, left pending (not taken).
pub fn forwarded_is_pending() -> bool {
    // SAFETY: zeroed storage sigpending fills.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid storage for the pending set.
    if unsafe { libc::sigpending(&raw mut set) } != 0 {
        return false;
    }
    let ours = forwarded_set();
    // SAFETY: an initialized set (sigpending's or forwarded_set's) and a valid signal number.
    let has = |set: &libc::sigset_t, s: libc::c_int| unsafe { libc::sigismember(set, s) } == 1;
    FORWARDED.iter().any(|s| has(&set, *s) && has(&ours, *s))
}
