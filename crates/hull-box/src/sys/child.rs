//! The processes hull clones, which run between `clone` and `execve` (or `_exit`): the box side
//! ([`clone_box`]: executes a plan inside the freshly cloned process: a fresh box's pid 1 its
//! [`BoxPlan`], a template process its [`TemplatePlan`], a templated box's entry process its
//! [`TemplatedPlan`], whose pid 1 it forks), a template's pool helper ([`with_pool_helper`]) and the `--subids` remover
//! ([`fork_remover`]). They are in `sys` because the `unsafe` clone that starts each relies on
//! what they do: only data prepared before the clone, and allocation-free system calls.
//!
//! Runs between `clone` and `execve`, so it only reads data the parent prepared and calls the
//! allocation-free wrappers of [`crate::sys`]. A failed step is sent to the supervisor as
//! [`Message::SetupFailed`] with the step's index and errno, then the process exits with 125.
//! After setup, pid 1 forks the program and stays behind as the box's reaper: as soon as the
//! program exits it kills every other process in the pid namespace and reports the status,
//! then waits for the supervisor's teardown to kill it (its exit is the namespace teardown,
//! kept off the result's path).

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::plan::{BoxPlan, Step};
use crate::proto::Message;
use crate::split::{EntryStep, LaunchPlan, TemplatePlan, TemplateStep, TemplatedPlan};
use crate::sys::{
    self, Errno, SysResult, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
};

/// What a cloned process runs, in the vocabulary of its role.
#[derive(Clone, Copy)]
pub(crate) enum ChildPlan<'a> {
    /// A fresh box: the clone is pid 1 and runs the whole plan.
    Box(&'a BoxPlan),
    /// A template process: the skeleton, then its namespaces kept for boxes.
    Template(&'a TemplatePlan),
    /// A box entering a template: the clone is its entry process, which forks pid 1.
    Templated(&'a TemplatedPlan),
}

impl<'a> From<&'a LaunchPlan> for ChildPlan<'a> {
    fn from(plan: &'a LaunchPlan) -> ChildPlan<'a> {
        match plan {
            LaunchPlan::Fresh(p) => ChildPlan::Box(p),
            LaunchPlan::Templated(p) => ChildPlan::Templated(p),
        }
    }
}

/// What a box's pid 1 does once its setup is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pid1Role {
    /// Runs the plan's program and reports its exit.
    Program,
    /// A ready box (see `ready.rs`): waits for the program to run, sent later as a
    /// [`crate::proto::go`] datagram, instead of running the plan's own.
    Ready,
    /// A resident box (see `resident.rs`): serves [`crate::proto::resident`] requests, each
    /// a program started with the descriptors that came with it, until its channel closes.
    Resident,
}

/// Descriptors and pre-built pointer arrays the child needs; all created by the parent.
pub(crate) struct ChildContext<'a> {
    pub plan: ChildPlan<'a>,
    pub sock: RawFd,
    /// The supervisor's end of the channel, inherited by the fork: closed first, so that the
    /// supervisor's death shows as a hangup on `sock`.
    pub peer: RawFd,
    /// A pidfd of the supervisor's process (none without pidfd support): readable once it
    /// exited, which a child in a new pid namespace cannot learn from getppid().
    pub supervisor: Option<RawFd>,
    pub stdin: RawFd,
    pub stdout: RawFd,
    pub stderr: RawFd,
    /// `stdin` is a terminal made for the box (`hull run -t`, and then also its stdout and
    /// stderr): the program makes it its controlling terminal in a session of its own, so the
    /// terminal's Ctrl-C and window-size changes signal it.
    pub tty: bool,
    /// `execve` argv and envp: null-terminated arrays pointing into the plan's C strings.
    pub argv: &'a [*const libc::c_char],
    pub envp: &'a [*const libc::c_char],
    /// The seccomp filter the `Seccomp` step installs (none for a template process).
    pub seccomp: Option<&'a hull_seccomp::Program>,
    /// `HULL_TRACE_STEPS`: a shared page where each step's start time (CLOCK_MONOTONIC ns) is
    /// stored.
    pub trace: Option<&'a sys::SharedSlots>,
    /// For a templated box: the stack pid 1 runs on (memory the supervisor set aside; in the
    /// entry process it is that process's own copy, which only pid 1 touches).
    pub pid1_stack: Option<(*mut u8, usize)>,
    /// What pid 1 does at `Exec`.
    pub pid1: Pid1Role,
    /// Idmapped bind sources the supervisor made for `AdoptTree` steps: (the step's descriptor
    /// number, our copy of the supervisor's descriptor).
    pub trees: &'a [(i32, RawFd)],
    /// Where the supervisor's argv and environment strings are ([`sys::process_strings`]),
    /// which pid 1 blanks before the program exists.
    pub strings: Option<[usize; 4]>,
}

/// In a pid 1 forked by a template's entry process: the read end of the pipe on which the entry
/// process says it has reported our pid. Our first message waits for it (see [`start_pid1`]).
static PID1_REPORTED: AtomicI32 = AtomicI32::new(-1);

fn send(sock: RawFd, m: Message, fd: Option<RawFd>) {
    let reported = PID1_REPORTED.swap(-1, Ordering::Relaxed);
    if reported >= 0 {
        // SAFETY: the pipe's read end is our own descriptor, read once and closed here.
        let reported = unsafe { std::os::fd::OwnedFd::from_raw_fd(reported) };
        let mut b = [0u8; 1];
        if !matches!(sys::read(reported.as_fd(), &mut b), Ok(1)) {
            // The entry process died before reporting us: the supervisor must not hear from a
            // pid 1 it does not know.
            sys::exit_now(125);
        }
    }
    // Nothing useful can be done if the supervisor is gone; the exit status still tells.
    let _ = sys::send_with_fd(sock, &m.encode(), fd);
}

/// Clones a box's (or a template's) first process with `flags` (its namespaces) to run
/// `ctx.plan`, and returns its pid. The child never returns: it ends in the program's `execve`
/// or in `_exit`.
pub(crate) fn clone_box(flags: libc::c_int, ctx: &ChildContext<'_>) -> SysResult<libc::pid_t> {
    // SAFETY: the child runs only `run`, which reads data prepared before the clone, calls
    // allocation-free wrappers and ends in execve or _exit.
    match unsafe { sys::clone_fork(flags) }? {
        0 => run(ctx),
        pid => Ok(pid),
    }
}

/// Runs the plan and never returns.
fn run(ctx: &ChildContext<'_>) -> ! {
    sys::close_raw(ctx.peer);
    // Holding our supervisor's owner lock would keep its leftovers from a sweep after it died.
    let lock = crate::owner::lock_fd();
    if lock >= 0 {
        sys::close_raw(lock);
    }
    match ctx.plan {
        ChildPlan::Box(plan) => run_box_steps(ctx, &plan.steps, 0),
        ChildPlan::Template(plan) => run_template(ctx, &plan.steps),
        ChildPlan::Templated(plan) => run_entry(ctx, plan),
    }
}

/// Stamps step `index`'s start for `HULL_TRACE_STEPS`.
fn stamp(ctx: &ChildContext<'_>, index: usize) {
    if let Some(t) = ctx.trace {
        t.set(index, sys::monotonic_ns());
    }
}

/// Reports step `index` failed with `e` and exits.
fn fail(ctx: &ChildContext<'_>, index: usize, e: Errno) -> ! {
    send(
        ctx.sock,
        Message::SetupFailed {
            step: u32::try_from(index).unwrap_or(u32::MAX),
            errno: e.0,
        },
        None,
    );
    sys::exit_now(125)
}

/// Runs box steps (numbered from `first` in the plan the supervisor holds) and never returns:
/// the last is `Exec`.
fn run_box_steps(ctx: &ChildContext<'_>, steps: &[Step], first: usize) -> ! {
    // The program's start stack is in this frame, so its pages are touched (the frame's stack
    // probes) when the steps start, not when the program does: a ready box's program arrives
    // long after its setup, and faulting 16 fresh pages in then would be on its start path.
    let mut program_stack = ProgramStack::uninit();
    for (i, step) in steps.iter().enumerate() {
        stamp(ctx, first + i);
        let done = match step {
            Step::Exec {
                candidates, user, ..
            } => start_program(ctx, candidates, user.as_ref(), &mut program_stack),
            _ => execute(ctx, step),
        };
        if let Err(e) = done {
            fail(ctx, first + i, e);
        }
    }
    // The last step is Exec, which never returns; a plan without one is a bug in the builder.
    fail(ctx, first + steps.len(), Errno(libc::EINVAL))
}

/// Runs a template process's plan and never returns: the last step, `HoldTemplate`, exits.
fn run_template(ctx: &ChildContext<'_>, steps: &[TemplateStep]) -> ! {
    for (i, step) in steps.iter().enumerate() {
        stamp(ctx, i);
        let done = match step {
            TemplateStep::Box(s) => execute(ctx, s),
            TemplateStep::LeanRoot { root, keep_fd } => lean_root(root, *keep_fd),
            TemplateStep::HoldTemplate { keep_fd } => hold_template(ctx, *keep_fd),
        };
        if let Err(e) = done {
            fail(ctx, i, e);
        }
    }
    fail(ctx, steps.len(), Errno(libc::EINVAL))
}

/// Runs a templated box's entry process: its steps, then the fork of pid 1, which runs the
/// rest of the plan; never returns.
fn run_entry(ctx: &ChildContext<'_>, plan: &TemplatedPlan) -> ! {
    for (i, step) in plan.entry.iter().enumerate() {
        stamp(ctx, i);
        if let Err(e) = execute_entry(ctx, step) {
            fail(ctx, i, e);
        }
    }
    let fork = plan.entry.len();
    stamp(ctx, fork);
    match start_pid1(ctx, &plan.pid1, fork + 1) {
        Ok(never) => match never {},
        Err(e) => fail(ctx, fork, e),
    }
}

/// What pid 1 needs to go on with the plan, passed through `clone`'s single pointer argument.
struct Pid1Args<'a> {
    ctx: &'a ChildContext<'a>,
    /// Pid 1's steps, and the number of the first in the plan the supervisor holds.
    steps: &'a [Step],
    first: usize,
    reported_r: RawFd,
    reported_w: RawFd,
}

/// Forks the process that becomes pid 1 of the box's new pid namespace, as the supervisor's
/// child (`CLONE_PARENT`), to run `steps` (numbered from `first`), reports its pid and exits;
/// returns only an error. Pid 1 shares our memory (`CLONE_VM`), so no page tables are copied;
/// we exit right after, and from then on the memory is its alone.
fn start_pid1(
    ctx: &ChildContext<'_>,
    steps: &[Step],
    first: usize,
) -> Result<std::convert::Infallible, Errno> {
    let Some((stack, len)) = ctx.pid1_stack else {
        return Err(Errno(libc::EINVAL));
    };
    // Pid 1's first message waits for a byte on this pipe, so its messages (Ready...) reach the
    // supervisor after our Pid1; a hangup instead means we died before sending it, and pid 1
    // must not run unknown to the supervisor.
    let (reported_r, reported_w) = sys::pipe()?;
    let args = Pid1Args {
        ctx,
        steps,
        first,
        reported_r: reported_r.as_raw_fd(),
        reported_w: reported_w.as_raw_fd(),
    };
    // SAFETY: the supervisor set this memory aside for pid 1's stack and nothing else uses it.
    let stack = unsafe { std::slice::from_raw_parts_mut(stack, len) };
    // SAFETY: `pid1_main` runs the allocation-free plan loop and ends in execve or _exit;
    // `args` stays in place, since we never return from here.
    let pid = unsafe {
        sys::spawn_shared(
            stack,
            pid1_main,
            std::ptr::addr_of!(args).cast_mut().cast(),
            libc::CLONE_PARENT,
        )
    }?;
    // Not `send`: PID1_REPORTED in our shared memory is pid 1's now.
    // The byte only follows a Pid1 that was sent: otherwise pid 1 sees the pipe close with
    // us and exits instead of running unknown to the supervisor.
    if sys::send_with_fd(ctx.sock, &Message::Pid1 { pid }.encode(), None).is_ok() {
        let _ = sys::write_all(reported_w.as_fd(), b"g");
    }
    sys::exit_now(0)
}

extern "C" fn pid1_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the Pid1Args start_pid1 passed; that frame is never left.
    let args = unsafe { &*arg.cast::<Pid1Args<'_>>() };
    // Our descriptor table is our own copy: keep only the pipe's read end.
    sys::close_raw(args.reported_w);
    PID1_REPORTED.store(args.reported_r, Ordering::Relaxed);
    run_box_steps(args.ctx, args.steps, args.first)
}

/// Exits at once if the supervisor is gone: its pid is no longer our parent (`supervisor`, when
/// not 0 and we share its pid namespace), or [`supervisor_gone`]. Follows every arming of the
/// death signal, which a death just before it missed.
fn supervisor_alive(ctx: &ChildContext<'_>, supervisor: i32) {
    if supervisor != 0 && sys::getppid() != 0 && sys::getppid() != supervisor {
        sys::exit_now(125);
    }
    if supervisor_gone(ctx) {
        sys::exit_now(125);
    }
}

/// Whether our supervisor is gone: its process exited (its pidfd is readable) or its end of our
/// channel is closed (a copy held by a box another thread was forking may delay the hangup,
/// hence the pidfd).
fn supervisor_gone(ctx: &ChildContext<'_>) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: ctx.sock,
            events: 0,
            revents: 0,
        },
        libc::pollfd {
            fd: ctx.supervisor.unwrap_or(ctx.sock),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // Without a pidfd only the channel is polled.
    let polled = if ctx.supervisor.is_some() { 2 } else { 1 };
    sys::poll(&mut fds[..polled], 0).is_ok()
        && (fds[0].revents & (libc::POLLHUP | libc::POLLERR) != 0
            || (polled == 2 && fds[1].revents & libc::POLLIN != 0))
}

/// ENOENT on an optional step means the kernel or host simply has no such path.
fn optional(r: SysResult<()>) -> SysResult<()> {
    match r {
        Err(Errno(libc::ENOENT)) => Ok(()),
        other => other,
    }
}

const BIND: libc::c_ulong = libc::MS_BIND | libc::MS_REC;

fn execute(ctx: &ChildContext<'_>, step: &Step) -> SysResult<()> {
    match step {
        Step::DieWithSupervisor { supervisor } => {
            sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong)?;
            supervisor_alive(ctx, *supervisor);
            Ok(())
        }
        Step::BecomeRoot => {
            sys::become_ns_root(true)?;
            // The id change cleared the death signal until become_ns_root set it again: the
            // supervisor may have died in between.
            supervisor_alive(ctx, 0);
            Ok(())
        }
        Step::MapIds {
            uid_map, gid_map, ..
        } => {
            optional(sys::write_file(c"/proc/self/setgroups", b"deny", 0, 0))?;
            sys::write_file(c"/proc/self/uid_map", uid_map, 0, 0)?;
            sys::write_file(c"/proc/self/gid_map", gid_map, 0, 0)
        }
        Step::AwaitIdMaps { .. } => {
            send(ctx.sock, Message::WantIdMaps, None);
            let mut m = [0u8; crate::proto::LEN];
            // SAFETY: the channel is ours for the life of the process.
            let sock = unsafe { std::os::fd::BorrowedFd::borrow_raw(ctx.sock) };
            match sys::read(sock, &mut m) {
                Ok(crate::proto::LEN) if Message::decode(&m) == Ok(Message::IdsMapped) => Ok(()),
                Ok(0) => sys::exit_now(125),
                Ok(_) => Err(Errno(libc::EPROTO)),
                Err(e) => Err(e),
            }
        }
        Step::AdoptTree { fd, .. } => {
            reserved_is_free(ctx, *fd)?;
            let from = ctx
                .trees
                .iter()
                .find(|(at, _)| at == fd)
                .map(|(_, from)| *from)
                .ok_or(Errno(libc::EBADF))?;
            sys::place_at(from, *fd)
        }
        Step::JoinCgroup { procs } => sys::write_file(&procs.c, b"0", 0, 0),
        Step::UnshareCgroupNs => sys::unshare(libc::CLONE_NEWCGROUP),
        Step::OpenSource { path, fd } => {
            reserved_is_free(ctx, *fd)?;
            sys::open_path_at(&path.c, *fd)
        }
        Step::MountFuse { at, fd, opts } => {
            reserved_is_free(ctx, *fd)?;
            let dev = sys::open_rdwr(c"/dev/fuse")?;
            sys::place_at(std::os::fd::IntoRawFd::into_raw_fd(dev), *fd)?;
            let r = sys::mount(
                Some(c"fuse-overlayfs"),
                &at.c,
                Some(c"fuse.fuse-overlayfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(opts),
            );
            if r.is_ok() {
                send(ctx.sock, Message::FuseDevice, Some(*fd));
            }
            // Only the supervisor's daemon holds the device from here on.
            sys::close_raw(*fd);
            r
        }
        Step::OpenTun { fd } => {
            reserved_is_free(ctx, *fd)?;
            let tun = sys::open_rdwr(c"/dev/net/tun")?;
            sys::place_at(std::os::fd::IntoRawFd::into_raw_fd(tun), *fd)
        }
        Step::PrivatizeMounts => {
            sys::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        }
        Step::MountRoot { at, opts, .. } => sys::mount(
            Some(c"tmpfs"),
            &at.c,
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(opts),
        ),
        Step::MountOverlayRoot {
            at,
            merged: Some(src),
            ..
        } => sys::mount(Some(src), &at.c, None, libc::MS_BIND, None),
        Step::MountOverlayRoot { at, opts, .. } => sys::mount(
            Some(c"overlay"),
            &at.c,
            Some(c"overlay"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(opts),
        ),
        Step::Mkdir { path } => sys::mkdir(&path.c, 0o755),
        Step::Touch { path } => sys::touch(&path.c),
        // A writable root keeps the links an earlier start made.
        Step::Symlink { target, path, .. } => match sys::symlink(target, &path.c) {
            Err(Errno(libc::EEXIST)) => Ok(()),
            r => r,
        },
        Step::WriteFile { path, data } => sys::write_file(
            &path.c,
            data,
            libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW,
            0o644,
        ),
        Step::Bind {
            source,
            target,
            optional: opt,
        } => {
            let r = sys::mount(Some(&source.c), &target.c, None, BIND, None);
            if *opt {
                optional(r)
            } else {
                r
            }
        }
        Step::Tmpfs { target, opts, .. } => sys::mount(
            Some(c"tmpfs"),
            &target.c,
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(opts),
        ),
        Step::Seal { root, dev } => {
            sys::mount_setattr(
                &root.c,
                true,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                0,
            )?;
            sys::mount_setattr(&dev.c, true, 0, MOUNT_ATTR_NODEV)
        }
        Step::SetAttr { target, set, clear } => sys::mount_setattr(&target.c, true, *set, *clear),
        Step::ClearReadOnly { target } => {
            sys::mount_setattr(&target.c, false, 0, MOUNT_ATTR_RDONLY)
        }
        Step::Devpts { target } => sys::mount(
            Some(c"devpts"),
            &target.c,
            Some(c"devpts"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some(c"newinstance,ptmxmode=0666,mode=0620"),
        ),
        Step::Proc { target } => sys::mount(
            Some(c"proc"),
            &target.c,
            Some(c"proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        ),
        Step::MaskFile { target, null } => optional(sys::mount(
            Some(&null.c),
            &target.c,
            None,
            libc::MS_BIND,
            None,
        )),
        Step::MaskDir { target } => optional(sys::mount(
            Some(c"tmpfs"),
            &target.c,
            Some(c"tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some(c"size=4k,mode=0555"),
        )),
        Step::ProtectProc { target } => {
            if let Err(e) = sys::mount(Some(&target.c), &target.c, None, BIND, None) {
                return optional(Err(e));
            }
            sys::mount_setattr(
                &target.c,
                true,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                0,
            )
        }
        Step::UserNsLimits {
            instances,
            watches,
            values,
        } => {
            optional(sys::write_file(&instances.c, &values.0, 0, 0))?;
            optional(sys::write_file(&watches.c, &values.1, 0, 0))
        }
        Step::LowerRlimits { limits } => limits
            .iter()
            .try_for_each(|(res, v)| sys::set_limit(*res, *v)),
        Step::Pivot { root } => pivot(root),
        Step::Hostname { name } => sys::sethostname(name.as_bytes()),
        Step::LoopbackUp => sys::loopback_up(),
        Step::Tap { fd } => make_tap(ctx, *fd),
        Step::AwaitGateway => await_gateway(ctx),
        Step::Chdir { path } => sys::chdir(&path.c),
        Step::BindBelow {
            source,
            root,
            under_parts,
            parts,
            is_dir,
            read_only,
            tree_fd,
            ..
        } => {
            let at = mount_point_below(&root.c, under_parts, parts, *is_dir)?;
            let copy;
            let tree = match tree_fd {
                // SAFETY: the plan's AdoptTree step put a detached tree at this number, ours
                // until the box execs.
                Some(fd) => unsafe { std::os::fd::BorrowedFd::borrow_raw(*fd) },
                None => {
                    copy = sys::clone_tree(&source.c)?;
                    copy.as_fd()
                }
            };
            let mut set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
            if *read_only {
                set |= MOUNT_ATTR_RDONLY;
            }
            sys::mount_setattr_fd(tree, true, set, 0)?;
            if !*read_only {
                // Read-write for the top mount only, as `Bind`'s.
                sys::mount_setattr_fd(tree, false, 0, MOUNT_ATTR_RDONLY)?;
            }
            sys::attach_tree_on(tree, at.as_fd())
        }
        Step::TmpfsBelow {
            root,
            under_parts,
            parts,
            opts,
            ..
        } => {
            let at = mount_point_below(&root.c, under_parts, parts, true)?;
            sys::tmpfs_on(at.as_fd(), opts)
        }
        Step::Give { path, uid, gid } => sys::lchown(&path.c, *uid, *gid),
        Step::DropCaps { keep, own } => drop_caps(*keep, *own),
        Step::NoNewPrivs => sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map(drop),
        Step::Seccomp { listener, .. } => {
            let mut fd = None;
            if let Some(prog) = ctx.seccomp {
                // The program is our copy of the parent's; no_new_privs was set by the step
                // before.
                match prog.install(*listener) {
                    Ok(l) if *listener => fd = Some(l),
                    Ok(_) => {}
                    Err(e) => return Err(Errno(e)),
                }
            }
            send(ctx.sock, Message::Ready, fd);
            if let Some(l) = fd {
                sys::close_raw(l);
            }
            Ok(())
        }
        // Run by pid 1's step loop (`run_box_steps`), which holds the program's stack; no
        // other process hull clones starts a program.
        Step::Exec { .. } => Err(Errno(libc::EINVAL)),
        Step::AttachSource { fd, target, .. } => sys::attach_tree(*fd, &target.c),
    }
}

/// Makes and opens the mount point `parts` below the mount reached from the staged `root`
/// (hull's own directory) through `under_parts`, one component at a time: never through a
/// symlink, and below `under` never into another mount (see [`sys::mount_point_at`]); the last
/// component is a directory when `is_dir`.
fn mount_point_below(
    root: &std::ffi::CStr,
    under_parts: &[std::ffi::CString],
    parts: &[std::ffi::CString],
    is_dir: bool,
) -> SysResult<std::os::fd::OwnedFd> {
    let mut at = sys::open_dir_path(root)?;
    for p in under_parts {
        at = sys::open_beneath(at.as_fd(), p, true, false)?;
    }
    for (i, p) in parts.iter().enumerate() {
        let dir = is_dir || i + 1 < parts.len();
        at = sys::mount_point_at(at.as_fd(), p, dir)?;
    }
    Ok(at)
}

/// The stack the program starts on (a vfork-style child that execs at once), carved from pid
/// 1's.
type ProgramStack = std::mem::MaybeUninit<[u8; 64 * 1024]>;

/// The `Exec` step: pid 1 starts the program (a ready box's once it is sent) on `stack`, then
/// reaps until it exits and reports its status. Never returns on success.
fn start_program(
    ctx: &ChildContext<'_>,
    candidates: &[std::ffi::CString],
    user: Option<&crate::proto::resident::Ids>,
    stack: &mut ProgramStack,
) -> SysResult<()> {
    // Checked again before the program runs, once the setup's milliseconds have let a dying
    // supervisor's process finish exiting: a supervisor that died while its other threads
    // still ran when we asked for PDEATHSIG would never signal us, and its box would run with
    // nobody enforcing its deadline.
    if supervisor_gone(ctx) {
        sys::exit_now(125);
    }
    isolate_pid1(ctx)?;
    if ctx.pid1 == Pid1Role::Resident {
        serve_resident(ctx, stack)
    } else if ctx.pid1 == Pid1Role::Ready {
        let sent = await_program(ctx)?;
        spawn_and_reap(ctx, &sent.program(), stack)
    } else {
        spawn_and_reap(
            ctx,
            &Program {
                cwd: None,
                // `--user`: the switch a resident box's program makes, to the plan's user.
                ids: user.map(|u| ProgramIds {
                    switch: Some((u.uid, u.gid)),
                    groups: &u.groups,
                    keep: planned_caps(ctx),
                }),
                argv: ctx.argv,
                envp: ctx.envp,
                candidates: Candidates::Plan(candidates),
            },
            stack,
        )
    }
}

/// A template process keeps the mount namespace the skeleton was built in at `keep_fd`, then
/// pivots a copy of it into the sealed `root` (see [`TemplateStep::LeanRoot`]).
fn lean_root(root: &crate::plan::BoxPath, keep_fd: i32) -> SysResult<()> {
    sys::keep_mount_ns(keep_fd)?;
    sys::unshare(libc::CLONE_NEWNS)?;
    pivot(root)
}

/// A template process reports its skeleton done (sending `keep_fd`) and exits once the
/// supervisor has opened its namespaces.
fn hold_template(ctx: &ChildContext<'_>, keep_fd: i32) -> ! {
    send(ctx.sock, Message::Ready, Some(keep_fd));
    // The supervisor opens our namespaces, then closes its end: that hangup is the cue.
    let mut fds = [libc::pollfd {
        fd: ctx.sock,
        events: libc::POLLIN,
        revents: 0,
    }];
    let _ = sys::poll(&mut fds, -1);
    sys::exit_now(0)
}

/// One step of a templated box's entry process.
fn execute_entry(ctx: &ChildContext<'_>, step: &EntryStep) -> SysResult<()> {
    match step {
        EntryStep::Box(s) => execute(ctx, s),
        EntryStep::JoinTemplate {
            user_fd,
            mnt_fd,
            become_root,
        } => {
            sys::setns(*user_fd, libc::CLONE_NEWUSER)?;
            if *become_root {
                sys::become_ns_root(true)?;
                supervisor_alive(ctx, 0);
            }
            sys::setns(*mnt_fd, libc::CLONE_NEWNS)
        }
        EntryStep::CloneSource { path, fd } => {
            reserved_is_free(ctx, *fd)?;
            sys::open_path_at(&path.c, *fd)?;
            sys::clone_tree_at(*fd)
        }
        EntryStep::EnterTemplate {
            mnt_fd,
            net_fd,
            own_fds,
            flags,
        } => enter_template(*mnt_fd, *net_fd, *own_fds, *flags),
    }
}

/// Joins the template's root namespace and the box's own namespaces below it (see
/// [`EntryStep::EnterTemplate`]).
fn enter_template(
    mnt_fd: i32,
    net_fd: Option<i32>,
    own_fds: Option<[i32; 3]>,
    flags: libc::c_int,
) -> SysResult<()> {
    let mut flags = flags;
    // The template's root has no /proc mounted: keep our own /proc entry for the maps.
    let proc_self = match own_fds {
        None => Some(sys::open_dir_path(c"/proc/self")?),
        Some(_) => None,
    };
    sys::setns(mnt_fd, libc::CLONE_NEWNS)?;
    if let Some(net) = net_fd {
        sys::setns(net, libc::CLONE_NEWNET)?;
        flags &= !libc::CLONE_NEWNET;
    }
    if let Some([user, ipc, uts]) = own_fds {
        // A pooled user namespace, ids mapped already; joined last, since the joins above
        // need our capabilities in the template's.
        sys::setns(user, libc::CLONE_NEWUSER)?;
        if flags & libc::CLONE_NEWIPC != 0 {
            sys::setns(ipc, libc::CLONE_NEWIPC)?;
        }
        if flags & libc::CLONE_NEWUTS != 0 {
            sys::setns(uts, libc::CLONE_NEWUTS)?;
        }
        return sys::unshare(
            flags & !(libc::CLONE_NEWUSER | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS),
        );
    }
    sys::unshare(flags)?;
    match proc_self {
        Some(proc_self) => map_root_in(proc_self.as_raw_fd()),
        None => Err(Errno(libc::EINVAL)),
    }
}

/// A bind source goes to a fixed descriptor number; in a supervisor with that many descriptors
/// open, the number could be one we still need (our channel, the output pipes, a template's
/// namespaces). Refuse (EBUSY, naming the step) rather than replace it.
fn reserved_is_free(ctx: &ChildContext<'_>, fd: RawFd) -> SysResult<()> {
    let mut used = [ctx.sock, ctx.stdin, ctx.stdout, ctx.stderr]
        .into_iter()
        .chain(ctx.supervisor)
        .any(|u| u == fd);
    if let ChildPlan::Templated(plan) = ctx.plan {
        used |= plan.entry.iter().any(|s| s.holds(fd));
    }
    if used {
        Err(Errno(libc::EBUSY))
    } else {
        Ok(())
    }
}

/// [`Step::Tap`]: makes and configures the TAP on `/dev/net/tun` at `fd`, sends the descriptor
/// to the supervisor, closes ours (the supervisor's copy, in flight, keeps the device), and waits
/// until the supervisor says the caller has taken it. A hangup instead means the supervisor
/// gave up (the caller's handler failed, or it died): we leave without running the program.
fn make_tap(ctx: &ChildContext<'_>, fd: RawFd) -> SysResult<()> {
    let link = sys::tap::link();
    let made = sys::tap::set_tap(fd, &link).and_then(|()| sys::tap::configure(&link));
    if made.is_ok() {
        send(ctx.sock, Message::TapDevice, Some(fd));
    }
    // Only the caller holds the TAP from here on (or nobody, and the device goes with our
    // network namespace).
    sys::close_raw(fd);
    made?;
    await_gateway(ctx)
}

/// Waits for the supervisor's `GatewayReady`; a hangup means it gave up, and we leave.
fn await_gateway(ctx: &ChildContext<'_>) -> SysResult<()> {
    let mut m = [0u8; crate::proto::LEN];
    // SAFETY: the channel is ours for the life of the process.
    let sock = unsafe { BorrowedFd::borrow_raw(ctx.sock) };
    match sys::read(sock, &mut m) {
        Ok(crate::proto::LEN) if Message::decode(&m) == Ok(Message::GatewayReady) => Ok(()),
        Ok(0) => sys::exit_now(125),
        Ok(_) => Err(Errno(libc::EPROTO)),
        Err(e) => Err(e),
    }
}

/// Maps uid and gid 0 of the user namespace we just unshared to 0 of its parent (a template's),
/// through `proc_self`, a descriptor of our /proc entry. The template's user namespace already
/// denies setgroups, which its children inherit (EPERM).
pub(crate) fn map_root_in(proc_self: RawFd) -> SysResult<()> {
    const ROOT_MAP: &[u8] = b"0 0 1\n";
    match sys::write_file_at(proc_self, c"setgroups", b"deny", 0, 0) {
        Ok(()) | Err(Errno(libc::ENOENT | libc::EPERM)) => {}
        Err(e) => return Err(e),
    }
    sys::write_file_at(proc_self, c"uid_map", ROOT_MAP, 0, 0)?;
    sys::write_file_at(proc_self, c"gid_map", ROOT_MAP, 0, 0)
}

/// Makes `root` the root of our mount namespace and detaches the old root (stacked on top of
/// it by `pivot_root(".", ".")`) with everything mounted below it.
fn pivot(root: &crate::plan::BoxPath) -> SysResult<()> {
    sys::chdir(&root.c)?;
    sys::pivot_root(c".", c".")?;
    sys::umount_detach(c".")?;
    sys::chdir(c"/")
}

/// Drops every capability not in `keep` from the bounding and ambient sets, then sets the
/// inheritable set to `keep` and the effective and permitted sets to `keep | own`: `own` (a
/// resident box's pid 1's `CAP_SETUID`, `CAP_SETGID`, `CAP_CHOWN`, `CAP_KILL`) stays with this
/// process only, outside the bounding set, so no exec can give it to a program.
fn drop_caps(keep: u64, own: u64) -> SysResult<()> {
    for cap in 0..64u32 {
        if keep & (1u64 << cap) != 0 {
            continue;
        }
        match sys::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap)) {
            Ok(_) => {}
            Err(Errno(libc::EINVAL)) => break, // past the kernel's last capability
            Err(e) => return Err(e),
        }
    }
    sys::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
    )?;
    if own & !keep == 0 {
        sys::capset(keep)
    } else {
        sys::capset_own(keep | own, keep)
    }
}

/// Before the program exists: a session of its own, pid 1 non-dumpable and holding only the
/// program's descriptors and its channel.
fn isolate_pid1(ctx: &ChildContext<'_>) -> SysResult<()> {
    // A new session: the program has no controlling terminal, so it cannot push input into the
    // caller's terminal (TIOCSTI) even when stdin is inherited.
    sys::setsid()?;
    // Pid 1 is not dumpable (the program cannot read its memory or descriptors through
    // /proc/1) and keeps only what the program needs before it exists, so nothing it inherited
    // from the supervisor (other boxes' pipes, a template's namespaces) is reachable even in the
    // moment between the program's exec and our return, nor kept while a ready box waits.
    let _ = sys::prctl(libc::PR_SET_DUMPABLE, 0);
    // Our argv and environment are the supervisor's (we are its copy): /proc/1/cmdline would
    // show the host's command line, whatever secret it carries.
    if let Some(areas) = ctx.strings {
        sys::retitle(areas, c"hull-init");
    }
    sys::close_all_except(&mut [ctx.sock, ctx.stdin, ctx.stdout, ctx.stderr]);
    Ok(())
}

/// The program to start: execve's null-terminated argv and envp, and the paths to try.
struct Program<'a> {
    /// A resident box's per-program working directory (others start in the plan's).
    cwd: Option<&'a CStr>,
    /// A resident box's program: the ids it takes (None: pid 1's, root) and the capabilities
    /// it keeps (the plan's; pid 1's own are dropped). None for any other box's program,
    /// which inherits pid 1's ids and capabilities as they are.
    ids: Option<ProgramIds<'a>>,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    candidates: Candidates<'a>,
}

/// What a resident box's program runs as (see [`Program::ids`]).
#[derive(Clone, Copy)]
struct ProgramIds<'a> {
    /// The user and group id to switch to; None keeps pid 1's (root).
    switch: Option<(u32, u32)>,
    groups: &'a [u32],
    /// The capabilities the plan keeps (`--cap-add`): a root program's sets; a program of
    /// another user has none.
    keep: u64,
}

enum Candidates<'a> {
    /// The plan's own.
    Plan(&'a [std::ffi::CString]),
    /// Pointers into a ready box's go datagram.
    Raw(&'a [*const libc::c_char]),
}

/// A ready box's program: pointer arrays into a private mapping that holds its go datagram,
/// kept until pid 1 execs or exits.
struct SentProgram {
    ptrs: &'static [*const libc::c_char],
    counts: (usize, usize),
}

impl SentProgram {
    fn program(&self) -> Program<'_> {
        let (argc, envc) = self.counts;
        Program {
            cwd: None,
            ids: None,
            argv: &self.ptrs[..=argc],
            envp: &self.ptrs[argc + 1..=argc + 1 + envc],
            candidates: Candidates::Raw(&self.ptrs[argc + envc + 2..]),
        }
    }
}

/// Waits for the supervisor's go datagram (see [`crate::proto::go`]) and lays out its strings
/// for execve, without allocating: the datagram and the pointer arrays live in one fresh private
/// mapping. A hangup means the ready box was never used: exit quietly.
fn await_program(ctx: &ChildContext<'_>) -> SysResult<SentProgram> {
    use crate::proto::go;
    let nomem = Errno(libc::ENOMEM);
    let data = sys::anonymous::<u8>(go::MAX).ok_or(nomem)?;
    let starts = sys::anonymous::<usize>(go::POINTERS).ok_or(nomem)?;
    let ptrs = sys::anonymous::<*const libc::c_char>(go::POINTERS).ok_or(nomem)?;
    // SAFETY: the channel is ours for the life of the process.
    let sock = unsafe { std::os::fd::BorrowedFd::borrow_raw(ctx.sock) };
    let n = sys::read(sock, data)?;
    if n == 0 {
        sys::exit_now(0);
    }
    let (argc, envc, candc) = go::parse(&data[..n], starts).ok_or(Errno(libc::EINVAL))?;
    let total = argc + envc + candc + 2;
    for (p, &at) in ptrs.iter_mut().zip(starts.iter()).take(total) {
        *p = if at == go::NULL {
            std::ptr::null()
        } else {
            data[at..].as_ptr().cast()
        };
    }
    Ok(SentProgram {
        ptrs: &ptrs[..total],
        counts: (argc, envc),
    })
}

/// A resident box's pid 1 (see `resident.rs`): serves requests on its channel until it closes.
/// Each is a [`crate::proto::resident`] datagram with the program's stdin, stdout and stderr
/// attached; the program starts on `stack` (vfork-style, so one at a time, each gone to its
/// `execve` before the next), inheriting everything the setup made (namespaces, cgroup,
/// dropped capabilities, no_new_privs, the seccomp filter). Pid 1 answers `Spawned` with its
/// pid, and `Exited` for every process it reaps, adopted orphans too. A closed channel (the
/// supervisor gone or done) ends the box: pid 1 kills everything and exits. Never returns on
/// success; allocates nothing (its buffers are fresh private mappings).
fn serve_resident(ctx: &ChildContext<'_>, stack: &mut ProgramStack) -> SysResult<()> {
    use crate::proto::go;
    let nomem = Errno(libc::ENOMEM);
    let data = sys::anonymous::<u8>(go::MAX).ok_or(nomem)?;
    let starts = sys::anonymous::<usize>(go::POINTERS).ok_or(nomem)?;
    let ptrs = sys::anonymous::<*const libc::c_char>(go::POINTERS).ok_or(nomem)?;
    sys::close_all_except(&mut [ctx.sock]);
    // Descriptors 0-2 stay taken (copies of the channel), so the ones each request brings are
    // numbered 3 and up and the program's `dup2`s onto 0-2 cannot overwrite one another.
    for fd in 0..3 {
        if fd != ctx.sock {
            sys::dup2(ctx.sock, fd)?;
        }
    }
    // SIGCHLD comes as a readable descriptor: pid 1 waits on its channel and its children at
    // once, without a handler.
    let children = sys::block_signals_fd(&[libc::SIGCHLD])?;
    // SAFETY: the channel is ours for the life of the process.
    let sock = unsafe { BorrowedFd::borrow_raw(ctx.sock) };
    loop {
        let mut fds = [sys::poll_in(sock), sys::poll_in(children.as_fd())];
        sys::poll(&mut fds, -1)?;
        if fds[1].revents != 0 {
            let mut info = [0u8; 128];
            let _ = sys::read(children.as_fd(), &mut info);
            while let Ok(Some(w)) = sys::wait4(-1, true) {
                send(
                    ctx.sock,
                    Message::Exited {
                        pid: w.pid,
                        status: w.status,
                    },
                    None,
                );
            }
        }
        if fds[0].revents == 0 {
            continue;
        }
        let mut got = [-1; sys::MAX_FDS];
        let (n, count) = sys::recv_with_fds(ctx.sock, data, &mut got)?;
        if n == 0 {
            // The supervisor is gone (or stopped the box): nothing may run without it.
            let _ = sys::kill(-1, libc::SIGKILL);
            sys::exit_now(0);
        }
        if &data[..n] == crate::proto::resident::ROOT {
            for &fd in &got[..count] {
                sys::close_raw(fd);
            }
            match sys::open_dir_path(c"/") {
                Ok(root) => send(ctx.sock, Message::Root { errno: 0 }, Some(root.as_raw_fd())),
                Err(e) => send(ctx.sock, Message::Root { errno: e.0 }, None),
            }
            continue;
        }
        if let Some(h) = crate::proto::resident::parse_hand_over(&data[..n]) {
            // Pid 1's own work (its `CAP_CHOWN`), done before any program of the user runs.
            let errno = match sys::make_dir_owned(h.path, h.uid, h.gid, h.only_made) {
                Ok(()) => 0,
                Err(e) => e.0,
            };
            for &fd in &got[..count] {
                sys::close_raw(fd);
            }
            send(ctx.sock, Message::HandedOver { errno }, None);
            continue;
        }
        if let Some((pid, sig)) = crate::proto::resident::parse_kill(&data[..n]) {
            // Only a program's own group and itself: never pid 1, never everything.
            if pid > 1 {
                let _ = sys::kill(-pid, sig);
                let _ = sys::kill(pid, sig);
            }
            for &fd in &got[..count] {
                sys::close_raw(fd);
            }
            continue;
        }
        let started = start_sent(ctx, &data[..n], &got[..count], starts, ptrs, stack);
        // A program's process that switched its ids shared our memory until its exec, and the
        // switch resets the dumpable flag of that memory (ours): pid 1 stays non-dumpable.
        let _ = sys::prctl(libc::PR_SET_DUMPABLE, 0);
        for &fd in &got[..count] {
            sys::close_raw(fd);
        }
        let pid = match started {
            Ok(pid) => pid,
            Err(e) => {
                // Not started at all: no `Spawned` follows.
                send(
                    ctx.sock,
                    Message::SetupFailed {
                        step: 0,
                        errno: e.0,
                    },
                    None,
                );
                continue;
            }
        };
        send(ctx.sock, Message::Spawned { pid }, None);
    }
}

/// The capabilities the plan keeps (its `DropCaps` step's `keep`): what a resident box's root
/// programs run with.
fn planned_caps(ctx: &ChildContext<'_>) -> u64 {
    let steps: &[Step] = match ctx.plan {
        ChildPlan::Box(p) => &p.steps,
        ChildPlan::Templated(p) => &p.pid1,
        ChildPlan::Template(_) => &[],
    };
    steps
        .iter()
        .find_map(|s| match s {
            Step::DropCaps { keep, .. } => Some(*keep),
            _ => None,
        })
        .unwrap_or(0)
}

/// Starts one program a resident box's pid 1 was sent: `data` its request, `stdio` the three
/// descriptors that came with it. Returns its pid (its exec failure, if any, was reported by
/// the program's own process before this returns).
fn start_sent(
    ctx: &ChildContext<'_>,
    data: &[u8],
    stdio: &[RawFd],
    starts: &mut [usize],
    ptrs: &mut [*const libc::c_char],
    stack: &mut ProgramStack,
) -> SysResult<libc::pid_t> {
    use crate::proto::{go, resident};
    let bad = Errno(libc::EINVAL);
    let [stdin, stdout, stderr] = stdio else {
        return Err(bad);
    };
    let split = resident::split(data).ok_or(bad)?;
    let cwd = CStr::from_bytes_until_nul(&data[split.cwd_at..split.go_at]).map_err(|_| bad)?;
    let mut groups = [0u32; resident::MAX_GROUPS];
    for (n, g) in groups.iter_mut().enumerate().take(split.groups) {
        *g = resident::group(data, n).ok_or(bad)?;
    }
    let sent = &data[split.go_at..];
    let (argc, envc, candc) = go::parse(sent, starts).ok_or(bad)?;
    let total = argc + envc + candc + 2;
    for (p, &s) in ptrs.iter_mut().zip(starts.iter()).take(total) {
        *p = if s == go::NULL {
            std::ptr::null()
        } else {
            sent[s..].as_ptr().cast()
        };
    }
    let program = Program {
        cwd: Some(cwd),
        ids: Some(ProgramIds {
            switch: split.ids,
            groups: &groups[..split.groups],
            keep: planned_caps(ctx),
        }),
        argv: &ptrs[..=argc],
        envp: &ptrs[argc + 1..=argc + 1 + envc],
        candidates: Candidates::Raw(&ptrs[argc + envc + 2..total]),
    };
    let io = ChildContext {
        stdin: *stdin,
        stdout: *stdout,
        stderr: *stderr,
        ..*ctx
    };
    // SAFETY: a byte array needs no initialisation to be written through a raw pointer; the
    // child only uses it as its stack.
    let stack = unsafe { &mut *stack.as_mut_ptr() };
    let args = ExecArgs {
        ctx: &io,
        program: &program,
    };
    // SAFETY: `exec_entry` only calls allocation-free wrappers and ends in execve or _exit;
    // `args` lives on our stack, which stays untouched while we are suspended.
    unsafe {
        sys::spawn_vfork(
            stack,
            exec_entry,
            std::ptr::addr_of!(args).cast_mut().cast(),
        )
    }
}

/// Forks the program, then reaps until it exits and reports its status. Never returns on success.
fn spawn_and_reap(
    ctx: &ChildContext<'_>,
    program: &Program<'_>,
    stack: &mut ProgramStack,
) -> SysResult<()> {
    // The program starts as a vfork-style child on a stack carved from ours: copying pid 1's
    // page tables (a copy of the supervisor's) for a process that execs at once costs more
    // than the rest of its start.
    // SAFETY: a byte array needs no initialisation to be written through a raw pointer; the
    // child only uses it as its stack.
    let stack = unsafe { &mut *stack.as_mut_ptr() };
    let args = ExecArgs { ctx, program };
    // SAFETY: `exec_entry` only calls allocation-free wrappers and ends in execve or _exit;
    // `args` lives on our stack, which stays untouched while we are suspended.
    let pid = unsafe {
        sys::spawn_vfork(
            stack,
            exec_entry,
            std::ptr::addr_of!(args).cast_mut().cast(),
        )
    }?;
    // Pid 1 keeps only its channel to the supervisor.
    sys::close_all_except(&mut [ctx.sock]);
    loop {
        match sys::wait4(-1, false) {
            Ok(Some(w)) if w.pid == pid => {
                #[allow(clippy::useless_conversion)]
                // tv_sec and tv_usec are not i64 on every target
                let ms =
                    |t: libc::timeval| i64::from(t.tv_sec) * 1000 + i64::from(t.tv_usec) / 1000;
                let cpu = i32::try_from(ms(w.rusage.ru_utime) + ms(w.rusage.ru_stime))
                    .unwrap_or(i32::MAX);
                // Everything else in the box goes now (so no leftover holds the output pipes),
                // but pid 1 itself stays until the supervisor's teardown kills it: its exit
                // tears down the box's namespaces, which would otherwise compete with the
                // supervisor for the CPU on the result's path.
                let _ = sys::kill(-1, libc::SIGKILL);
                send(
                    ctx.sock,
                    Message::MainExited {
                        status: w.status,
                        cpu_ms: cpu,
                    },
                    None,
                );
                // SIGKILL (teardown, deadline or the supervisor's death through PDEATHSIG)
                // ends us.
                pause_forever()
            }
            Ok(_) => {}
            Err(Errno(libc::ECHILD)) => sys::exit_now(0),
            Err(_) => {}
        }
    }
}

/// What the program's starter needs, passed through `clone`'s single pointer argument.
struct ExecArgs<'a> {
    ctx: &'a ChildContext<'a>,
    program: &'a Program<'a>,
}

extern "C" fn exec_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ExecArgs` spawn_and_reap passed, alive while it is suspended.
    let args = unsafe { &*arg.cast::<ExecArgs<'_>>() };
    exec_program(args.ctx, args.program)
}

fn exec_program(ctx: &ChildContext<'_>, program: &Program<'_>) -> ! {
    let stdio = [(ctx.stdin, 0), (ctx.stdout, 1), (ctx.stderr, 2)];
    for (from, to) in stdio {
        if sys::dup2(from, to).is_err() {
            sys::exit_now(126);
        }
    }
    if ctx.tty && (sys::setsid().is_err() || sys::set_controlling_terminal(0).is_err()) {
        sys::exit_now(126);
    }
    sys::reset_signals();
    if let Some(ids) = program.ids {
        // Pid 1's own capabilities go before anything of the program's runs: a program of
        // another user loses every capability with its ids (setresuid to a non-zero uid
        // clears the permitted and effective sets), a root program keeps the plan's.
        let switched = match ids.switch {
            Some((uid, gid)) => sys::switch_ids(uid, gid, ids.groups).map(|()| {
                // Until its exec this process shares pid 1's memory. The switch made that
                // memory non-dumpable (fs.suid_dumpable 0 or 2; the keeper refuses a user at
                // 1), so no process of the user can ptrace it or read it through /proc; made
                // so again here in any case.
                let _ = sys::prctl(libc::PR_SET_DUMPABLE, 0);
                uid
            }),
            None => Ok(0),
        };
        let dropped = switched.and_then(|uid| sys::capset(if uid == 0 { ids.keep } else { 0 }));
        if let Err(e) = dropped {
            send(ctx.sock, Message::IdsFailed { errno: e.0 }, None);
            sys::exit_now(126);
        }
    }
    if let Some(cwd) = program.cwd {
        // Its own session too, so that ending it can end what it started.
        let _ = sys::setsid();
        // Entered with the program's ids: a user's program cannot start in a directory it
        // could not enter itself.
        if let Err(e) = sys::chdir(cwd) {
            send(ctx.sock, Message::ChdirFailed { errno: e.0 }, None);
            sys::exit_now(126);
        }
    }
    if sys::cloexec_from(3).is_err() {
        // Old kernel without CLOSE_RANGE_CLOEXEC: close everything but our channel.
        let sock = u32::try_from(ctx.sock).unwrap_or(u32::MAX);
        sys::close_range(3, sock.saturating_sub(1));
        sys::close_range(sock.saturating_add(1), u32::MAX);
    }
    let mut worst = Errno(libc::ENOENT);
    let mut try_one = |c: &std::ffi::CStr| {
        let e = sys::execve(c, program.argv, program.envp);
        // ENOENT and ENOTDIR mean "not here, try the next PATH entry"; anything else
        // (EACCES, ENOEXEC, E2BIG) is what the user needs to hear about.
        if e.0 != libc::ENOENT && e.0 != libc::ENOTDIR {
            worst = e;
        }
    };
    match program.candidates {
        Candidates::Plan(list) => list.iter().for_each(|c| try_one(c.as_c_str())),
        // SAFETY: each pointer is to a NUL-terminated string inside the go datagram (await_program
        // checked every terminator), which stays mapped until we exec or exit.
        Candidates::Raw(list) => list
            .iter()
            .for_each(|&c| try_one(unsafe { std::ffi::CStr::from_ptr(c) })),
    }
    send(ctx.sock, Message::ExecFailed { errno: worst.0 }, None);
    // The shells' codes: 127 when nothing was found, 126 when it was but cannot run.
    sys::exit_now(if worst.0 == libc::ENOENT { 127 } else { 126 })
}

/// A NUL-terminated pointer array over C strings, for execve.
pub(crate) fn pointer_array(strings: &[std::ffi::CString]) -> Vec<*const libc::c_char> {
    let mut v: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    v.push(std::ptr::null());
    v
}

/// What a template's pool helper makes (see `template.rs`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pooled {
    /// A network namespace owned by the template's user namespace, loopback up.
    Net,
    /// A user namespace below the template's, uid and gid 0 mapped, with the ipc and uts
    /// namespaces it owns.
    User,
    /// A network namespace owned by the template's user namespace with loopback up and the
    /// gateway network's TAP made and configured in it (see [`crate::tap`]); the TAP's
    /// descriptor is sent over `ready` (a socket for this kind) with the report.
    Tap,
}

/// What a pool helper is told: the template's user namespace, the pipe end it reports on,
/// which namespaces to make, whether to become the template's root first, and the pid of the
/// process that made it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolHelper {
    pub(crate) user: RawFd,
    pub(crate) ready: RawFd,
    pub(crate) kind: Pooled,
    pub(crate) become_root: bool,
    pub(crate) parent: libc::pid_t,
}

/// Kills and reaps a pool helper when dropped, so its stack and arguments outlive it.
struct Reap(libc::pid_t);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = sys::kill(self.0, libc::SIGKILL);
        let _ = sys::wait4(self.0, false);
    }
}

/// Starts a pool helper for `args` on `stack` (it shares our memory, `CLONE_VM`: a fork would
/// copy the supervisor's page tables and leave every page it writes afterwards to be copied
/// again on the next write), calls `meanwhile` with its pid (which reads its report and opens
/// its namespaces), then kills and reaps it, and returns what `meanwhile` returned.
pub(crate) fn with_pool_helper<R>(
    stack: &mut [u8],
    args: &PoolHelper,
    meanwhile: impl FnOnce(libc::pid_t) -> R,
) -> SysResult<R> {
    // SAFETY: `pool_helper` calls only allocation-free wrappers and ends in _exit or is killed;
    // it reads `args` and runs on `stack`, both borrowed until `Reap` has killed and reaped it
    // (also when `meanwhile` unwinds).
    let pid = unsafe {
        sys::spawn_shared(
            stack,
            pool_helper,
            std::ptr::from_ref(args).cast_mut().cast(),
            0,
        )
    }?;
    let _reap = Reap(pid);
    Ok(meanwhile(pid))
}

extern "C" fn pool_helper(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the PoolHelper with_pool_helper passed, alive until we are reaped.
    let PoolHelper {
        user,
        ready,
        kind,
        become_root,
        parent,
    } = unsafe { std::ptr::read(arg.cast::<PoolHelper>()) };
    // We pause until our maker kills us, so we must die with it: SIGKILL when the pool thread
    // (our parent; it reaps us before it ends) goes, with the process or otherwise. A parent
    // that died before this prctl sent no signal and left us reparented, which getppid shows
    // (we are in its pid namespace); without this check such a helper paused forever.
    let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    if sys::getppid() != parent {
        sys::exit_now(1);
    }
    // Our descriptor table is a copy of a busy process's: drop every descriptor but ours
    // (another thread's box pipes among them, whose end of output we would otherwise delay;
    // the owner lock, which would keep our maker's leftovers from a sweep).
    sys::close_all_except(&mut [user, ready]);
    if let Pooled::Tap = kind {
        pool_tap(user, ready, become_root, parent);
    }
    let joined = sys::setns(user, libc::CLONE_NEWUSER).and_then(|()| {
        if !become_root {
            return Ok(());
        }
        sys::become_ns_root(true)?;
        // The id change cleared the death signal until become_ns_root set it again.
        if sys::getppid() != parent {
            sys::exit_now(1);
        }
        Ok(())
    });
    let made = joined.and_then(|()| match kind {
        Pooled::Net => sys::unshare(libc::CLONE_NEWNET).and_then(|()| sys::loopback_up()),
        Pooled::User => sys::open_dir_path(c"/proc/self").and_then(|proc_self| {
            sys::unshare(libc::CLONE_NEWUSER)?;
            map_root_in(proc_self.as_raw_fd())?;
            sys::unshare(libc::CLONE_NEWIPC | libc::CLONE_NEWUTS)
        }),
        Pooled::Tap => Err(Errno(libc::EINVAL)),
    });
    if made.is_err() {
        sys::exit_now(1);
    }
    // SAFETY: `ready` is our copy of the pipe's write end.
    let w = unsafe { BorrowedFd::borrow_raw(ready) };
    let _ = sys::write_all(w, b"r");
    pause_forever()
}

/// A pool helper making a [`Pooled::Tap`]: joins the template's user namespace, makes a network
/// namespace owned by it, opens `/dev/net/tun` there before becoming the template's root (as a
/// fresh box does, with our maker's rights on the device node), brings up loopback, makes and
/// configures the TAP, sends its descriptor over `ready` with the report, closes ours and pauses.
fn pool_tap(user: RawFd, ready: RawFd, become_root: bool, parent: libc::pid_t) -> ! {
    let made = sys::setns(user, libc::CLONE_NEWUSER)
        .and_then(|()| sys::unshare(libc::CLONE_NEWNET))
        .and_then(|()| sys::open_rdwr(c"/dev/net/tun"))
        .and_then(|tun| {
            if become_root {
                sys::become_ns_root(true)?;
                // The id change cleared the death signal until become_ns_root set it again.
                if sys::getppid() != parent {
                    sys::exit_now(1);
                }
            }
            sys::loopback_up()?;
            let link = sys::tap::link();
            sys::tap::set_tap(tun.as_raw_fd(), &link)?;
            sys::tap::configure(&link)?;
            Ok(tun)
        });
    match made {
        Ok(tun) => {
            let _ = sys::send_with_fd(ready, b"r", Some(tun.as_raw_fd()));
            // Only the pool holds the TAP from here on; our copy goes before we pause.
            drop(tun);
        }
        Err(_) => sys::exit_now(1),
    }
    pause_forever()
}

/// Waits for the SIGKILL that ends us.
fn pause_forever() -> ! {
    loop {
        // SAFETY: pause takes no arguments; the SIGKILL we wait for ends it.
        unsafe { libc::pause() };
    }
}

/// What the `--subids` remover (see `subids.rs`) is given, all made before the clone.
pub(crate) struct Remover<'a> {
    /// Our pid: the remover exits if it is no longer its parent.
    pub(crate) parent: libc::pid_t,
    /// The pipe it waits on until its maps are written: (read end, our write end).
    pub(crate) maps_pipe: (RawFd, RawFd),
    /// Its stdin and stdout (`/dev/null` for `rm`).
    pub(crate) stdin: RawFd,
    pub(crate) stdout: RawFd,
    pub(crate) argv: &'a [*const libc::c_char],
    pub(crate) envp: &'a [*const libc::c_char],
    /// The programs to exec, in the order tried.
    pub(crate) programs: &'a [&'a CStr],
}

/// Forks the remover into a new user namespace (its maps are the caller's to write) and returns
/// its pid.
pub(crate) fn fork_remover(r: &Remover<'_>) -> SysResult<libc::pid_t> {
    // SAFETY: the child runs only `remover`, which calls allocation-free wrappers on data made
    // before the clone and ends in execve or exit_now.
    match unsafe { sys::clone_fork(libc::CLONE_NEWUSER) }? {
        0 => remover(r),
        pid => Ok(pid),
    }
}

/// The remover's side: dies with us, waits for its maps, then becomes its program (`rm`, or
/// `hull __files`: as root of its user namespace, with every capability there) with the stdin
/// and stdout it was given.
fn remover(r: &Remover<'_>) -> ! {
    let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    if sys::getppid() != r.parent {
        sys::exit_now(1);
    }
    let (maps_r, maps_w) = r.maps_pipe;
    sys::close_raw(maps_w);
    if sys::dup2(r.stdin, 0).is_err() || sys::dup2(r.stdout, 1).is_err() {
        sys::exit_now(1);
    }
    let lock = crate::owner::lock_fd();
    if lock >= 0 {
        sys::close_raw(lock);
    }
    let mut b = [0u8; 1];
    // SAFETY: `maps_r` is our copy of the pipe's read end, open until we exec.
    let maps = unsafe { BorrowedFd::borrow_raw(maps_r) };
    if !matches!(sys::read(maps, &mut b), Ok(1)) {
        sys::exit_now(1);
    }
    sys::reset_signals();
    for rm in r.programs {
        sys::execve(rm, r.argv, r.envp);
    }
    sys::exit_now(127)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_number_still_in_use_is_refused_not_replaced() {
        let plan = TemplatedPlan {
            entry: vec![
                EntryStep::JoinTemplate {
                    user_fd: 905,
                    mnt_fd: 906,
                    become_root: false,
                },
                EntryStep::EnterTemplate {
                    mnt_fd: 907,
                    net_fd: None,
                    own_fds: Some([908, 909, 910]),
                    flags: 0,
                },
            ],
            pid1: Vec::new(),
        };
        let none = pointer_array(&[]);
        let ctx = ChildContext {
            plan: ChildPlan::Templated(&plan),
            sock: 901,
            peer: 3,
            supervisor: Some(904),
            stdin: 0,
            stdout: 902,
            stderr: 903,
            tty: false,
            argv: &none,
            envp: &none,
            seccomp: None,
            trace: None,
            pid1_stack: None,
            pid1: Pid1Role::Program,
            trees: &[],
            strings: None,
        };
        for busy in [901, 902, 903, 904, 905, 906, 907, 908, 909, 910] {
            assert_eq!(
                reserved_is_free(&ctx, busy),
                Err(Errno(libc::EBUSY)),
                "fd {busy}"
            );
        }
        for free in [900, 911] {
            assert_eq!(reserved_is_free(&ctx, free), Ok(()), "fd {free}");
        }
    }

    /// The supervisor is gone once its pidfd is readable or its end of the channel is closed;
    /// without a pidfd (a kernel without pidfd_open) only the channel tells.
    #[test]
    fn the_supervisor_is_gone_when_its_pidfd_is_readable_or_the_channel_hangs_up() {
        let plan = BoxPlan {
            steps: Vec::new(),
            clone_flags: 0,
        };
        let none = pointer_array(&[]);
        let (ours, theirs) = sys::seqpacket_pair().unwrap();
        let ctx = |supervisor: Option<RawFd>| ChildContext {
            plan: ChildPlan::Box(&plan),
            sock: ours.as_raw_fd(),
            peer: -1,
            supervisor,
            stdin: 0,
            stdout: 1,
            stderr: 2,
            tty: false,
            argv: &none,
            envp: &none,
            seccomp: None,
            trace: None,
            pid1_stack: None,
            pid1: Pid1Role::Program,
            trees: &[],
            strings: None,
        };
        // A process that exits, standing in for the supervisor.
        let mut exiting = std::process::Command::new("true").spawn().unwrap();
        let pid = libc::pid_t::try_from(exiting.id()).unwrap();
        let pidfd = sys::pidfd_open(pid).unwrap();
        let running = sys::pidfd_open(sys::getpid()).unwrap();
        exiting.wait().unwrap();
        assert!(!supervisor_gone(&ctx(None)));
        assert!(!supervisor_gone(&ctx(Some(running.as_raw_fd()))));
        assert!(supervisor_gone(&ctx(Some(pidfd.as_raw_fd()))));
        drop(theirs);
        assert!(supervisor_gone(&ctx(None)));
    }
}
