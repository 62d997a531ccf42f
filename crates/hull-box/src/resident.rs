//! Resident boxes: a box whose pid 1 stays up after its setup and starts programs on request,
//! for as long as its supervisor holds it (a named sandbox's keeper, see `hull-cli`'s `named`).
//!
//! The box is built exactly as a fresh one (the same plan: namespaces, cgroup, mounts,
//! capability drop, no_new_privs, seccomp), and its pid 1 runs the whole plan but the program.
//! Then, instead of one program, it serves [`crate::proto::resident`] requests on its channel:
//! each is started as pid 1's child, so it inherits everything the setup made. The filter of a
//! resident box kills a process that makes a refused call (`SIGSYS`) rather than notifying a
//! listener: nobody watches a resident box's calls the way a run's watch does, and a stopped
//! call must never wait for an answer.
//!
//! Dropping a [`Resident`] kills pid 1 (and so its whole pid namespace) and removes its cgroup;
//! if its supervisor dies without that, pid 1 dies with it (`PDEATHSIG`, a hung-up channel).

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::channel::{Channel, Recv};
use crate::error::BoxError;
use crate::plan::{cstring, exec_candidates};
use crate::proto::Message;
use crate::resources::Resources;
use crate::split::LaunchPlan;
use crate::sys;
use crate::unenforced::Unenforced;

/// A running resident box (see the module comment).
pub struct Resident {
    pid: libc::pid_t,
    channel: Channel,
    /// Its cgroup and workspace, until [`Resident::end`] removes them.
    resources: Mutex<Resources>,
    ended: AtomicBool,
    /// The plan it ran (setup errors name its steps).
    plan: LaunchPlan,
}

impl std::fmt::Debug for Resident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resident")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// One program to start in a resident box.
#[derive(Debug, Clone, Copy)]
pub struct Program<'a> {
    pub argv: &'a [String],
    /// Its whole environment (nothing else is inherited).
    pub env: &'a [(String, String)],
    /// Its working directory, absolute in the box.
    pub cwd: &'a str,
}

/// What a resident box's pid 1 reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The program last sent runs as `pid` (in the box's pid namespace).
    Spawned { pid: libc::pid_t },
    /// A process pid 1 reaped ended with this wait status.
    Exited { pid: libc::pid_t, status: i32 },
    /// The program last sent could not be run: no exec candidate worked (`errno` the most
    /// telling); its `Spawned` and `Exited` (status 127) follow.
    ExecFailed { errno: i32 },
    /// The program last sent could not enter its working directory; `Spawned` and `Exited`
    /// (status 126) follow.
    ChdirFailed { errno: i32 },
    /// Pid 1 could not start the program last sent at all (no `Spawned` follows).
    Refused { errno: i32 },
    /// Pid 1 is gone.
    Closed,
}

impl Resident {
    pub(crate) fn new(
        pid: libc::pid_t,
        channel: Channel,
        resources: Resources,
        plan: LaunchPlan,
    ) -> Resident {
        Resident {
            pid,
            channel,
            resources: Mutex::new(resources),
            ended: AtomicBool::new(false),
            plan,
        }
    }

    /// Pid 1's pid (our child).
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// The channel, to poll for [`Resident::recv`].
    pub fn channel_fd(&self) -> BorrowedFd<'_> {
        self.channel.fd()
    }

    /// The caps its cgroup does not enforce, as warnings.
    pub fn warnings(&self) -> Vec<String> {
        crate::poison::lock(&self.resources)
            .warnings
            .iter()
            .map(Unenforced::warning)
            .collect()
    }

    /// The box's cgroup directories on the host (one per hierarchy; none without cgroups).
    pub fn cgroup_paths(&self) -> Vec<std::path::PathBuf> {
        crate::poison::lock(&self.resources)
            .cgroup
            .procs_files()
            .iter()
            .filter_map(|c| {
                std::path::Path::new(c.to_str().ok()?)
                    .parent()
                    .map(std::path::Path::to_path_buf)
            })
            .collect()
    }

    /// Sends pid 1 `program` with `stdio` (stdin, stdout, stderr) as its descriptors. Its
    /// answer comes through [`Resident::recv`]: `Spawned` (after an `ExecFailed` or
    /// `ChdirFailed` when it could not run), or `Refused`. Requests must not overlap: send the
    /// next once this one's `Spawned` or `Refused` is in.
    pub fn send(&self, program: &Program<'_>, stdio: [BorrowedFd<'_>; 3]) -> Result<(), BoxError> {
        let bad = |what: &'static str| BoxError::Sys {
            what,
            errno: sys::Errno(libc::EINVAL),
        };
        if program.argv.is_empty() || !program.cwd.starts_with('/') {
            return Err(bad(
                "send a program without a command or an absolute directory",
            ));
        }
        let nul = |s: &str| s.contains('\0');
        if program.argv.iter().any(|a| nul(a))
            || nul(program.cwd)
            || program
                .env
                .iter()
                .any(|(k, v)| k.is_empty() || k.contains('=') || nul(k) || nul(v))
        {
            return Err(bad("send a program with a NUL byte or a bad variable name"));
        }
        let path = program
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or(crate::spec::BOX_PATH, |(_, v)| v.as_str());
        let argv: Vec<CString> = program.argv.iter().map(|a| cstring(a)).collect();
        let env: Vec<CString> = program
            .env
            .iter()
            .map(|(k, v)| cstring(&format!("{k}={v}")))
            .collect();
        let candidates = exec_candidates(&program.argv[0], path);
        let data = crate::proto::resident::encode(&cstring(program.cwd), &argv, &env, &candidates)
            .ok_or_else(|| bad("send a program larger than 128 KiB of arguments"))?;
        let fds = stdio.map(|f| f.as_raw_fd());
        sys::send_with_fds(self.channel.fd().as_raw_fd(), &data, &fds).map_err(|errno| {
            BoxError::Sys {
                what: "send the box a program",
                errno,
            }
        })
    }

    /// Asks pid 1 to send `sig` to `pid` (a program it started, in the box's pid namespace)
    /// and to its process group: what the program started in its session goes too, unless it
    /// moved elsewhere.
    pub fn kill(&self, pid: libc::pid_t, sig: i32) -> Result<(), BoxError> {
        let data = crate::proto::resident::kill(pid, sig);
        sys::send_with_fds(self.channel.fd().as_raw_fd(), &data, &[]).map_err(|errno| {
            BoxError::Sys {
                what: "ask the box to kill a program",
                errno,
            }
        })
    }

    /// An `O_PATH` descriptor of the box's root directory (pid 1's `/`, in the box's mount
    /// namespace): paths resolved beneath it with `RESOLVE_IN_ROOT` stay inside the box's root.
    /// Waits for pid 1's answer on the channel itself, so call it before anything else reads
    /// the channel (before the first [`Resident::send`]).
    pub fn root_dir(&self) -> Result<std::os::fd::OwnedFd, BoxError> {
        sys::send_with_fds(
            self.channel.fd().as_raw_fd(),
            crate::proto::resident::ROOT,
            &[],
        )
        .map_err(|errno| BoxError::Sys {
            what: "ask the box for its root",
            errno,
        })?;
        match self.channel.wait(10_000)? {
            (Message::Root { errno: 0 }, Some(fd)) => Ok(fd),
            (Message::Root { errno }, _) => Err(BoxError::Sys {
                what: "open the box's root",
                errno: sys::Errno(if errno == 0 { libc::EBADF } else { errno }),
            }),
            (m, _) => Err(crate::channel::unexpected(&self.plan, "Root", m)),
        }
    }

    /// Receives pid 1's next report without waiting (poll [`Resident::channel_fd`] first).
    pub fn recv(&self) -> Result<Event, BoxError> {
        match self.channel.recv()? {
            Recv::Closed => Ok(Event::Closed),
            Recv::Failed(errno) => Err(BoxError::Sys {
                what: "read the box channel",
                errno,
            }),
            Recv::Message(m, _) => Ok(match m {
                Message::Spawned { pid } => Event::Spawned { pid },
                Message::Exited { pid, status } => Event::Exited { pid, status },
                Message::ExecFailed { errno } => Event::ExecFailed { errno },
                Message::ChdirFailed { errno } => Event::ChdirFailed { errno },
                Message::SetupFailed { errno, .. } => Event::Refused { errno },
                m => return Err(crate::channel::unexpected(&self.plan, "Spawned", m)),
            }),
        }
    }
}

impl Resident {
    /// Ends the box: kills pid 1 (and so every process in its pid namespace), reaps it and
    /// removes the cgroup. Once; later calls (and the drop) do nothing.
    pub fn end(&self) {
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        // Pid 1's death ends its pid namespace; the cgroup is emptied and removed after it.
        let _ = sys::kill(self.pid, libc::SIGKILL);
        let _ = sys::wait4(self.pid, false);
        let paths = self.cgroup_paths();
        let cgroup = crate::poison::lock(&self.resources).cgroup.0.take();
        if let Some(cg) = cgroup {
            if !cg.is_empty() {
                cg.kill_all();
            }
            // The supervisor's child cgroups (a named sandbox's spawns) go first: rmdir
            // refuses a cgroup that has children. Their processes died with the pid namespace.
            for p in &paths {
                remove_children(p);
            }
            let _ = cg.remove();
        }
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        self.end();
    }
}

/// Removes the child cgroups of a box cgroup directory (empty once their processes are gone),
/// retrying briefly while one still reports busy (a process still exiting).
pub fn remove_children(dir: &std::path::Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::fs::remove_dir(e.path())
            .is_err_and(|err| err.raw_os_error() == Some(libc::EBUSY))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}
