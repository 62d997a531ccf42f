//! Ready boxes: whole boxes set up ahead of time by a background thread ("hull-ready"), each
//! waiting at its last step for the program to run. A long-lived runtime keeps two for the shape
//! of the last box it ran; the next box with the same setup (the same plan up to the program,
//! the same limits) only sends its argv, environment and exec candidates (a go datagram, see
//! [`crate::proto::go`]) and is watched from there, so its start costs one message instead of
//! the namespaces, mounts, capability drop and seccomp install.
//!
//! A ready box is used once, like any box: it is the same setup run earlier (fresh namespaces
//! from the pools, its own spare cgroup and empty workspace, nothing run in it yet), and its
//! pid 1 has already closed every descriptor but the program's and its channel. Its deadline
//! starts with the go datagram. A box whose setup differs, or whose program does not fit in one
//! datagram, takes the ordinary path and the ready ones are made again for its shape. Ready
//! boxes left when the runtime goes are killed and removed; their pid 1s are children of the
//! thread and die with it (PDEATHSIG) if the process does.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::plan::BoxPlan;
use crate::spec::BoxSpec;
use crate::supervise::{CgroupGuard, Core, Workspace};
use crate::sys;
use crate::template::Entered;
use crate::worker::{lock, Worker};

/// How many are kept ready: two covers a box starting while the last one's replacement is still
/// being set up.
const KEEP: usize = 2;

/// One box set up ahead, its pid 1 waiting for a go datagram.
pub(crate) struct ReadyBox {
    /// The whole plan it was set up from (its `Exec` is the one it was built for, never run).
    pub(crate) plan: BoxPlan,
    /// The plan its pid 1 ran (after the template split): setup errors name its steps.
    pub(crate) boxed: BoxPlan,
    /// Clone to Ready when it was set up, in microseconds (the result's `setup_us`).
    pub(crate) setup_us: u64,
    pub(crate) limits: hull_cgroup::Limits,
    pub(crate) pid: libc::pid_t,
    pub(crate) sock: OwnedFd,
    pub(crate) out: OwnedFd,
    pub(crate) err: OwnedFd,
    pub(crate) listener: Option<OwnedFd>,
    pub(crate) workspace: Workspace,
    pub(crate) cgroup: CgroupGuard,
    pub(crate) warnings: Vec<String>,
    _entered: Option<Entered>,
    /// Its pid 1 got the go datagram: from then on the watch and the teardown own it.
    used: bool,
}

impl ReadyBox {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        plan: BoxPlan,
        boxed: BoxPlan,
        limits: hull_cgroup::Limits,
        pid: libc::pid_t,
        sock: OwnedFd,
        out: OwnedFd,
        err: OwnedFd,
        workspace: Workspace,
        cgroup: CgroupGuard,
        warnings: Vec<String>,
        entered: Option<Entered>,
    ) -> ReadyBox {
        ReadyBox {
            plan,
            boxed,
            setup_us: 0,
            limits,
            pid,
            sock,
            out,
            err,
            listener: None,
            workspace,
            cgroup,
            warnings,
            _entered: entered,
            used: false,
        }
    }

    pub(crate) fn mark_used(&mut self) {
        self.used = true;
    }

    /// Its cgroup, workspace and warnings, for the box's teardown and result.
    pub(crate) fn hand_over(&mut self) -> (CgroupGuard, Workspace, Vec<String>) {
        (
            std::mem::replace(&mut self.cgroup, CgroupGuard(None)),
            std::mem::replace(&mut self.workspace, Workspace::none()),
            std::mem::take(&mut self.warnings),
        )
    }
}

impl Drop for ReadyBox {
    fn drop(&mut self) {
        if !self.used {
            // Never used: pid 1 is still waiting (or died); its cgroup and workspace go after it.
            let _ = sys::kill(self.pid, libc::SIGKILL);
            let _ = sys::wait4(self.pid, false);
        }
    }
}

pub(crate) struct ReadyBoxes {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// The thread, joined by `stop` so that no box is left half set up at exit.
    worker: Worker,
    used: AtomicU64,
}

#[derive(Default)]
struct State {
    /// The spec of the last box that could use one: what the thread sets boxes up for.
    want: Option<BoxSpec>,
    /// Bumped when `want` changes shape: a box set up for an older one is not kept.
    generation: u64,
    boxes: Vec<ReadyBox>,
    /// Boxes of an older shape, for the thread to end (off the caller's path).
    discard: Vec<ReadyBox>,
    /// Setting one up for `want` failed: no retry until the shape changes.
    failed: bool,
}

impl ReadyBoxes {
    pub(crate) fn new() -> ReadyBoxes {
        let shared = Shared {
            state: Mutex::new(State::default()),
            worker: Worker::default(),
            used: AtomicU64::new(0),
        };
        ReadyBoxes {
            shared: Arc::new(shared),
        }
    }

    /// A ready box for `spec`'s shape, if one is there (the caller still checks its plan). A
    /// spec that can use one also becomes what the next ones are set up for.
    pub(crate) fn take(&self, core: &Arc<Core>, spec: &BoxSpec) -> Option<ReadyBox> {
        if !eligible(spec) {
            return None;
        }
        let (taken, still_ready) = {
            let mut st = lock(&self.shared.state);
            if st.want.as_ref().is_some_and(|w| same_shape(w, spec)) {
                let taken = st.boxes.pop();
                (taken, !st.boxes.is_empty())
            } else {
                st.want = Some(spec.clone());
                st.generation += 1;
                st.failed = false;
                let stale = std::mem::take(&mut st.boxes);
                st.discard.extend(stale);
                (None, false)
            }
        };
        // Without the thread no box is set up ahead: every box takes the ordinary path.
        self.shared.worker.start_once("hull-ready", || {
            let (shared, core) = (Arc::clone(&self.shared), Arc::downgrade(core));
            move || fill(&shared, &core)
        });
        // With one still ready, its replacement waits for this box's result (`refill`): the
        // setup would compete with the box for the CPU.
        if taken.is_none() || !still_ready {
            self.shared.worker.wake();
        }
        if taken.is_some() {
            self.shared.used.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// A box has its result: set up the ones missing.
    pub(crate) fn refill(&self) {
        self.shared.worker.wake();
    }

    /// Waits up to `timeout` until the thread is done setting up boxes for the current shape
    /// (it has all it keeps, or failed); true if so.
    pub(crate) fn settle(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            {
                let st = lock(&self.shared.state);
                if st.want.is_none() || st.failed || st.boxes.len() >= KEEP {
                    return true;
                }
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The pid 1s of the boxes ready now.
    pub(crate) fn pids(&self) -> Vec<libc::pid_t> {
        lock(&self.shared.state)
            .boxes
            .iter()
            .map(|b| b.pid)
            .collect()
    }

    pub(crate) fn used(&self) -> u64 {
        self.shared.used.load(Ordering::Relaxed)
    }

    /// Ends the thread (after the box it may be setting up) and the ready boxes.
    pub(crate) fn stop(&self) {
        self.shared.worker.stop();
        self.shared.worker.join();
        let (boxes, discard) = {
            let mut st = lock(&self.shared.state);
            (
                std::mem::take(&mut st.boxes),
                std::mem::take(&mut st.discard),
            )
        };
        drop((boxes, discard));
    }
}

/// Only boxes of the `host` image with a temporary workspace, no `--mount`, no inherited stdin
/// and no sub-ids are set up ahead. A bind source is resolved when the box is set up, so a
/// ready box would mount what a path named then, not at the call (a directory replaced in
/// between); other roots and sub-ids are never templated.
fn eligible(spec: &BoxSpec) -> bool {
    spec.root == crate::spec::RootSpec::Host
        && spec.workspace.is_none()
        && spec.mounts.is_empty()
        && spec.stdin == crate::spec::Stdin::Null
        && !spec.subids
}

/// Equal but for what only the program or the watch uses (argv, env, timeout, output cap).
fn same_shape(a: &BoxSpec, b: &BoxSpec) -> bool {
    let blank = |s: &BoxSpec| BoxSpec {
        argv: Vec::new(),
        env: Vec::new(),
        timeout: Duration::ZERO,
        max_output: 0,
        ..s.clone()
    };
    blank(a) == blank(b)
}

fn fill(shared: &Shared, core: &Weak<Core>) {
    loop {
        let (spec, generation) = {
            let mut st = lock(&shared.state);
            loop {
                if shared.worker.stopping() {
                    return;
                }
                if !st.discard.is_empty() {
                    let stale = std::mem::take(&mut st.discard);
                    drop(st);
                    drop(stale);
                    st = lock(&shared.state);
                    continue;
                }
                if let Some(w) = st
                    .want
                    .as_ref()
                    .filter(|_| !st.failed && st.boxes.len() < KEEP)
                {
                    break (w.clone(), st.generation);
                }
                st = shared.worker.sleep(st);
            }
        };
        let Some(core) = core.upgrade() else { return };
        let made = core.build_ready(&spec);
        // Not kept across the wait: the Runtime may go meanwhile.
        drop(core);
        let mut st = lock(&shared.state);
        match made {
            Ok(b) if st.generation == generation && !shared.worker.stopping() => st.boxes.push(b),
            Ok(b) => {
                drop(st);
                drop(b);
            }
            Err(_) if st.generation == generation => st.failed = true,
            Err(_) => {}
        }
    }
}
