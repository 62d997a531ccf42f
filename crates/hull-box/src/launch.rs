//! Starting a box. There are three ways, and each ends in the same [`Started`]: a fresh box
//! (one `clone` whose child becomes pid 1 and runs the whole plan), a box entering a template
//! (the clone is an entry process that forks pid 1 into the template's namespaces and reports
//! it; [`Launch::start`] for both), and a box set up ahead (`ready.rs`: its pid 1 is sent its
//! program). From a `Started` on, every box is watched, judged and torn down the same way.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

use crate::channel::{self, Channel};
use crate::error::BoxError;
use crate::plan::{IdMaps, Step};
use crate::proto::Message;
use crate::spec::Stdin;
use crate::split::{LaunchPlan, Steps};
use crate::sys::child::{self, ChildContext, Pid1Role};
use crate::sys::{self, Errno};
use crate::trace::TraceMap;

/// A box whose pid 1 exists: its pid, our ends of its channel and output pipes, when its
/// deadline started, and how far its setup is.
pub(crate) struct Started {
    pub(crate) pid: libc::pid_t,
    pub(crate) channel: Channel,
    pub(crate) out: OwnedFd,
    pub(crate) err: OwnedFd,
    /// When the box's clock started (CLOCK_MONOTONIC ns): its clone, or for a box set up ahead
    /// the go datagram; the deadline, the duration and `setup_us` count from it.
    pub(crate) clock: u64,
    pub(crate) setup: Setup,
}

/// How far a started box's setup is.
pub(crate) enum Setup {
    /// Still running: its `Ready` (with the seccomp listener) is to come on the channel.
    Running,
    /// Done before the box was started (a ready box): its `Ready` brought `listener`, `us`
    /// microseconds after its clone.
    Done { listener: Option<OwnedFd>, us: u64 },
}

/// What a box's first process is cloned with.
pub(crate) struct Launch<'a> {
    /// The plan the clone runs (for a box entering a template, the split one: the entry
    /// process's steps, then pid 1's).
    pub(crate) plan: &'a LaunchPlan,
    pub(crate) stdin: &'a Stdin,
    /// How long a template's entry process may take to report its pid 1.
    pub(crate) timeout: Duration,
    pub(crate) filter: &'a hull_seccomp::Program,
    /// `HULL_TRACE_STEPS`: where the child stamps its steps.
    pub(crate) trace: Option<&'a TraceMap>,
    /// What pid 1 does at the program: run the plan's, wait for one (a ready box, see
    /// `ready.rs`), or serve requests (a resident box, see `resident.rs`).
    pub(crate) pid1: Pid1Role,
}

impl Launch<'_> {
    /// Clones the box's first process to run the plan: pid 1 itself, or, for a box entering a
    /// template, an entry process whose pid 1 is awaited here.
    pub(crate) fn start(&self) -> Result<Started, BoxError> {
        let plan = self.plan;
        // Every plan ends in `Exec` (the plan builder's `finish` adds it, and no later rewrite
        // removes it); checked before anything is created.
        let Some(Step::Exec { argv, env, .. }) = plan.pid1_steps().last() else {
            return Err(BoxError::Internal(
                "a box's plan does not end by running its program",
            ));
        };
        let sysf = |what: &'static str| move |errno: Errno| BoxError::Sys { what, errno };
        let (out_r, out_w) = sys::pipe().map_err(sysf("create the stdout pipe"))?;
        let (err_r, err_w) = sys::pipe().map_err(sysf("create the stderr pipe"))?;
        let (sock_parent, sock_child) =
            sys::seqpacket_pair().map_err(sysf("create the box channel"))?;
        // Fd 0 as it is, or a file opened here for the box.
        let input = match self.stdin {
            Stdin::Inherit | Stdin::Terminal => None,
            Stdin::Null => Some(Path::new("/dev/null")),
            Stdin::File(p) => Some(p.as_path()),
        };
        let opened = input
            .map(|path| {
                std::fs::File::open(path).map_err(|error| BoxError::Io {
                    what: format!("open {} as the program's standard input", path.display()),
                    error,
                })
            })
            .transpose()?;
        let stdin_fd = opened.as_ref().map_or(0, AsRawFd::as_raw_fd);
        let tty = *self.stdin == Stdin::Terminal;
        let enters_template = matches!(plan, LaunchPlan::Templated(_));
        // Pid 1 of a box entering a template runs on memory set aside once (its entry process's
        // copy of it; ours is never touched, so boxes at once can share it).
        let pid1_stack = if enters_template { pid1_stack() } else { None };
        let argv_ptrs = child::pointer_array(argv);
        let env_ptrs = child::pointer_array(env);
        // Idmapped copies of the host directories the box may write (host root only): made
        // here, in the initial user namespace, and held until the clone has its copies.
        let trees = adopted_trees(plan)?;
        let tree_fds: Vec<(i32, RawFd)> =
            trees.iter().map(|(at, fd)| (*at, fd.as_raw_fd())).collect();
        let ctx = ChildContext {
            plan: plan.into(),
            sock: sock_child.as_raw_fd(),
            peer: sock_parent.as_raw_fd(),
            supervisor: supervisor_pidfd(),
            stdin: stdin_fd,
            stdout: if tty { stdin_fd } else { out_w.as_raw_fd() },
            stderr: if tty { stdin_fd } else { err_w.as_raw_fd() },
            tty,
            argv: &argv_ptrs,
            envp: &env_ptrs,
            seccomp: Some(self.filter),
            trace: self.trace.map(TraceMap::slots),
            pid1_stack,
            pid1: self.pid1,
            trees: &tree_fds,
            strings: sys::process_strings(),
        };
        let clock = sys::monotonic_ns();
        let pid = match child::clone_box(plan.clone_flags(), &ctx) {
            Ok(pid) => pid,
            Err(errno) => {
                return Err(BoxError::Clone {
                    errno,
                    hint: clone_hint(errno),
                })
            }
        };
        drop((out_w, err_w, sock_child, trees));
        let channel = Channel::new(sock_parent);
        if let Some(maps) = plan.id_maps() {
            // A fresh box's user namespace exists once the clone returns: host root's maps are
            // written at once, beside the box's first step, instead of after its request.
            let unasked = plan.clone_flags() & libc::CLONE_NEWUSER != 0;
            if let Err(e) = map_ids(pid, &channel, maps, plan, unasked) {
                let _ = sys::kill(pid, libc::SIGKILL);
                let _ = sys::wait4(pid, false);
                return Err(e);
            }
            if self.trace.is_some() {
                crate::steplog::step("supervisor: id maps written");
            }
        }
        let pid = if enters_template {
            await_pid1(pid, &channel, plan, self.timeout)?
        } else {
            pid
        };
        Ok(Started {
            pid,
            channel,
            out: out_r,
            err: err_r,
            clock,
            setup: Setup::Running,
        })
    }
}

/// A pidfd of this process, opened once (none where the kernel has none): a box's processes in
/// their new pid namespace poll it to learn that their supervisor died before they asked for
/// PDEATHSIG (see `Step::DieWithSupervisor`). Close-on-exec, and pid 1 closes it before the
/// program starts.
pub(crate) fn supervisor_pidfd() -> Option<RawFd> {
    static FD: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    FD.get_or_init(|| sys::pidfd_open(sys::getpid()).ok())
        .as_ref()
        .map(AsRawFd::as_raw_fd)
}

/// Idmapped copies of the plan's `AdoptTree` sources (see [`crate::remap`]), by descriptor
/// number.
fn adopted_trees(plan: &LaunchPlan) -> Result<Vec<(i32, OwnedFd)>, BoxError> {
    plan.box_steps()
        .filter_map(|s| match s {
            Step::AdoptTree {
                path,
                fd,
                uid,
                gid,
                count,
                field,
            } => Some(
                crate::remap::tree(&path.c, (*uid, *gid), *count)
                    .map(|t| (*fd, t))
                    .map_err(|errno| BoxError::Idmap {
                        field: *field,
                        path: path.c.to_string_lossy().into_owned(),
                        errno,
                    }),
            ),
            _ => None,
        })
        .collect()
}

/// Waits for the box's request and writes its id maps: with the uidmap helpers (`--subids`),
/// or ourselves (host root, see [`crate::remap`]); then answers. With `unasked` (the box's
/// user namespace already exists) host root's maps are written and answered first, so the box
/// never waits for them, and its request is taken after.
pub(crate) fn map_ids(
    pid: libc::pid_t,
    channel: &Channel,
    maps: &IdMaps,
    plan: &dyn Steps,
    unasked: bool,
) -> Result<(), BoxError> {
    let unasked = unasked && matches!(maps, IdMaps::Direct { .. });
    if !unasked {
        channel.expect_want_id_maps(10_000, plan)?;
    }
    match maps {
        IdMaps::Helpers { uids, gids } => crate::subids::apply(pid, uids, gids)?,
        IdMaps::Direct { uid, gid, count } => {
            for (file, id) in [("uid_map", uid), ("gid_map", gid)] {
                let path = format!("/proc/{pid}/{file}");
                std::fs::write(&path, format!("0 {id} {count}\n")).map_err(|error| {
                    BoxError::Io {
                        what: format!("write {path}"),
                        error,
                    }
                })?;
            }
        }
    }
    channel
        .send(Message::IdsMapped)
        .map_err(|errno| BoxError::Sys {
            what: "answer the box's id-map request",
            errno,
        })?;
    if unasked {
        channel.expect_want_id_maps(10_000, plan)?;
    }
    Ok(())
}

/// The stack of a template box's pid 1, which also carves its program's 64 KiB start stack from
/// it.
const PID1_STACK: usize = 256 * 1024;

/// The memory every template box's pid 1 runs its stack on, reserved once per process: each box
/// gets its own copy through its entry process's fork, and nothing writes ours. (A fresh zeroed
/// allocation per box cost ~0.14 ms of page faults and zeroing here.)
fn pid1_stack() -> Option<(*mut u8, usize)> {
    static STACK: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let addr = match STACK.get() {
        Some(a) => *a,
        // A failed reservation is not remembered: the next box tries again. (Two threads racing
        // here may each map one; the loser's stays unused.)
        None => {
            let mapped = sys::Stack::reserve(PID1_STACK)?.leak();
            *STACK.get_or_init(|| mapped)
        }
    };
    Some((addr as *mut u8, PID1_STACK))
}

/// Waits for a template entry process (`entry`) to report the pid 1 it forked, reaps it, and
/// returns that pid; a setup failure before the fork comes back as the box's error.
fn await_pid1(
    entry: libc::pid_t,
    channel: &Channel,
    plan: &dyn Steps,
    timeout: Duration,
) -> Result<libc::pid_t, BoxError> {
    let timeout = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let answer = channel.wait(timeout);
    if answer.is_err() {
        let _ = sys::kill(entry, libc::SIGKILL);
    }
    let _ = sys::wait4(entry, false);
    if answer.is_err() {
        // A Pid1 sent just as we gave up: that pid 1 is our child; end it rather than leave it
        // running without a supervisor.
        if let Ok((Message::Pid1 { pid }, _)) = channel.wait(0) {
            let _ = sys::kill(pid, libc::SIGKILL);
            let _ = sys::wait4(pid, false);
        }
    }
    match answer? {
        (Message::Pid1 { pid }, _) => Ok(pid),
        (m, _) => Err(channel::unexpected(plan, "Pid1", m)),
    }
}

/// Ends a box's pid 1 after a failed watch, only while it is still our unreaped child (WNOHANG
/// reaps a zombie; ECHILD means it was reaped already and the pid may be reused).
pub(crate) fn end_unreaped(pid: libc::pid_t) {
    if let Ok(None) = sys::wait4(pid, true) {
        let _ = sys::kill(pid, libc::SIGKILL);
        let _ = sys::wait4(pid, false);
    }
}

fn clone_hint(errno: Errno) -> String {
    match errno.0 {
        libc::EPERM | libc::EACCES => "user namespaces look disabled: check `sysctl kernel.unprivileged_userns_clone` (Debian), `user.max_user_namespaces`, or an AppArmor userns restriction (`kernel.apparmor_restrict_unprivileged_userns`); `hull doctor` checks all of these".into(),
        libc::ENOSPC | libc::EUSERS => "the namespace limit is reached: raise `user.max_user_namespaces` (or other /proc/sys/user/max_* limits)".into(),
        libc::EINVAL => "this kernel lacks a namespace type hull needs (user, mount, pid, net, ipc, uts, cgroup)".into(),
        _ => "run `hull doctor` to check the host".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan that does not end by running the program is a bug in hull's plan builder (its
    /// `finish` adds the `Exec`): it is reported as one, before anything is created, and not
    /// blamed on seccomp or the caller.
    #[test]
    fn a_plan_without_exec_is_an_internal_error() {
        let filter = hull_seccomp::compile(
            hull_seccomp::default_policy(),
            &hull_seccomp::CompileOptions {
                kill_mode: hull_seccomp::KillMode::KillProcess,
                default_errno: 38,
            },
        )
        .unwrap();
        let plan = LaunchPlan::Fresh(crate::plan::BoxPlan {
            steps: vec![Step::LoopbackUp],
            clone_flags: 0,
        });
        let launch = Launch {
            plan: &plan,
            stdin: &Stdin::Null,
            timeout: Duration::from_secs(1),
            filter: &filter,
            trace: None,
            pid1: Pid1Role::Program,
        };
        let Err(e) = launch.start() else {
            panic!("a plan without exec was started");
        };
        assert_eq!(e.kind(), "internal", "{e:?}");
        assert!(e.to_string().contains("a bug in hull"), "{e}");
    }
}
