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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::error::BoxError;
use crate::launch::{Setup, Started};
use crate::plan::{BoxPlan, Step};
use crate::poison::lock;
use crate::resources::{limits_of, CgroupGuard, Resources, Workspace};
use crate::spec::{BoxSpec, RootSpec, Stdin};
use crate::split::LaunchPlan;
use crate::sys;
use crate::template::Entered;
use crate::warm::Worker;

/// How many are kept ready: two covers a box starting while the last one's replacement is still
/// being set up.
const KEEP: usize = 2;

/// What sets boxes up ahead (the Runtime's engine); the thread holds it weakly.
pub(crate) trait SetUpAhead: Send + Sync {
    /// Sets up a box for `spec` and leaves its pid 1 waiting for the program.
    fn set_up_ahead(&self, spec: &BoxSpec) -> Result<ReadyBox, BoxError>;
}

/// One box set up ahead, its pid 1 waiting for a go datagram.
pub(crate) struct ReadyBox {
    /// The whole plan it was set up from (its `Exec` is the one it was built for, never run).
    plan: BoxPlan,
    /// The plan its entry process and pid 1 ran (after the template split): setup errors name
    /// its steps.
    pub(crate) entry_plan: LaunchPlan,
    limits: hull_cgroup::Limits,
    /// Its pid 1 and channel, until it is sent its program: from then on the watch and the
    /// teardown own them.
    started: Option<Started>,
    resources: Resources,
    _entered: Option<Entered>,
}

impl ReadyBox {
    /// `started` has just been cloned to run `entry_plan` (see [`ReadyBox::await_setup`]).
    pub(crate) fn new(
        plan: BoxPlan,
        entry_plan: LaunchPlan,
        limits: hull_cgroup::Limits,
        started: Started,
        resources: Resources,
        entered: Option<Entered>,
    ) -> ReadyBox {
        ReadyBox {
            plan,
            entry_plan,
            limits,
            started: Some(started),
            resources,
            _entered: entered,
        }
    }

    /// Its pid 1 (0 once sent its program).
    fn pid(&self) -> libc::pid_t {
        self.started.as_ref().map_or(0, |s| s.pid)
    }

    /// Waits up to `timeout_ms` for its setup to run to the end: `Ready`, with the seccomp
    /// listener, whose time is the result's `setup_us`.
    pub(crate) fn await_setup(&mut self, timeout_ms: i32) -> Result<(), BoxError> {
        let Some(started) = self.started.as_mut() else {
            return Ok(());
        };
        let listener = started.channel.expect_ready(timeout_ms, &self.entry_plan)?;
        started.setup = Setup::Done {
            listener,
            us: (sys::monotonic_ns() - started.clock) / 1000,
        };
        Ok(())
    }

    /// Whether it was set up with the limits `spec` asks for (and, with `require_limits`, every
    /// cap enforced).
    pub(crate) fn fits(&self, spec: &BoxSpec) -> bool {
        self.limits == limits_of(spec)
            && (!spec.require_limits || self.resources.warnings.is_empty())
    }

    /// The go datagram that runs `plan`'s program in this box, when `plan` (built with this
    /// box's workspace and cgroup) is exactly what it was set up with: every step up to the
    /// program, and the clone flags. None otherwise, or when the program does not fit one
    /// datagram.
    pub(crate) fn go_for(&self, plan: &BoxPlan) -> Option<Vec<u8>> {
        let (
            Some((
                Step::Exec {
                    argv,
                    env,
                    candidates,
                    ..
                },
                setup,
            )),
            Some((_, ready_setup)),
        ) = (plan.steps.split_last(), self.plan.steps.split_last())
        else {
            return None;
        };
        if setup != ready_setup || plan.clone_flags != self.plan.clone_flags {
            return None;
        }
        crate::proto::go::encode(argv, env, candidates)
    }

    /// Its workspace and cgroup, for the plan `go_for` checks.
    pub(crate) fn workspace(&self) -> &Workspace {
        &self.resources.workspace
    }

    pub(crate) fn cgroup(&self) -> &CgroupGuard {
        &self.resources.cgroup
    }

    /// Sends pid 1 its program (the box's clock starts now) and hands the started box over;
    /// None if pid 1 is gone (the box is ended when dropped).
    pub(crate) fn launch(&mut self, go: &[u8]) -> Option<Started> {
        let mut started = self.started.take()?;
        started.clock = sys::monotonic_ns();
        if started.channel.send_bytes(go).is_err() {
            self.started = Some(started);
            return None;
        }
        Some(started)
    }

    /// Its cgroup, workspace and warnings, for the box's teardown and result.
    pub(crate) fn hand_over(&mut self) -> Resources {
        std::mem::replace(
            &mut self.resources,
            Resources {
                workspace: Workspace::none(),
                cgroup: CgroupGuard(None),
                warnings: Vec::new(),
            },
        )
    }
}

impl Drop for ReadyBox {
    fn drop(&mut self) {
        if let Some(s) = self.started.take() {
            // Never used: pid 1 is still waiting (or died); its cgroup and workspace go after it.
            let _ = sys::kill(s.pid, libc::SIGKILL);
            let _ = sys::wait4(s.pid, false);
        }
    }
}

pub(crate) struct ReadyBoxes {
    pool: Arc<ReadyPool>,
}

struct ReadyPool {
    state: Mutex<ReadyStock>,
    /// The thread, joined by `stop` so that no box is left half set up at exit.
    worker: Worker,
    used: AtomicU64,
}

#[derive(Default)]
struct ReadyStock {
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
        let pool = ReadyPool {
            state: Mutex::new(ReadyStock::default()),
            worker: Worker::default(),
            used: AtomicU64::new(0),
        };
        ReadyBoxes {
            pool: Arc::new(pool),
        }
    }

    /// A ready box for `spec`'s shape, if one is there (the caller still checks its plan). A
    /// spec that can use one also becomes what the next ones are set up for.
    pub(crate) fn take<E: SetUpAhead + 'static>(
        &self,
        engine: &Arc<E>,
        spec: &BoxSpec,
    ) -> Option<ReadyBox> {
        if !eligible(spec) {
            return None;
        }
        let (taken, still_ready) = {
            let mut st = lock(&self.pool.state);
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
        self.pool.worker.start_once("hull-ready", || {
            let engine: Weak<dyn SetUpAhead> = Arc::downgrade(engine) as Weak<dyn SetUpAhead>;
            let pool = Arc::clone(&self.pool);
            move || keep_boxes_ready(&pool, &engine)
        });
        // With one still ready, its replacement waits for this box's result (`refill`): the
        // setup would compete with the box for the CPU.
        if taken.is_none() || !still_ready {
            self.pool.worker.wake();
        }
        if taken.is_some() {
            self.pool.used.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// A box has its result: set up the ones missing.
    pub(crate) fn refill(&self) {
        self.pool.worker.wake();
    }

    /// Waits up to `timeout` until the thread is done setting up boxes for the current shape
    /// (it has all it keeps, or failed); true if so.
    pub(crate) fn settle(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            {
                let st = lock(&self.pool.state);
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
        lock(&self.pool.state)
            .boxes
            .iter()
            .map(ReadyBox::pid)
            .collect()
    }

    pub(crate) fn used(&self) -> u64 {
        self.pool.used.load(Ordering::Relaxed)
    }

    /// Ends the thread (after the box it may be setting up) and the ready boxes.
    pub(crate) fn stop(&self) {
        self.pool.worker.stop();
        self.pool.worker.join();
        let (boxes, discard) = {
            let mut st = lock(&self.pool.state);
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
    spec.root == RootSpec::Host
        && spec.workspace.is_none()
        && spec.mounts.is_empty()
        && spec.stdin == Stdin::Null
        && !spec.subids
        && spec.network != crate::spec::Network::Gateway
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

fn keep_boxes_ready(pool: &ReadyPool, engine: &Weak<dyn SetUpAhead>) {
    loop {
        let (spec, generation) = {
            let mut st = lock(&pool.state);
            loop {
                if pool.worker.stopping() {
                    return;
                }
                if !st.discard.is_empty() {
                    let stale = std::mem::take(&mut st.discard);
                    drop(st);
                    drop(stale);
                    st = lock(&pool.state);
                    continue;
                }
                if let Some(w) = st
                    .want
                    .as_ref()
                    .filter(|_| !st.failed && st.boxes.len() < KEEP)
                {
                    break (w.clone(), st.generation);
                }
                st = pool.worker.sleep(st);
            }
        };
        let Some(engine) = engine.upgrade() else {
            return;
        };
        let made = engine.set_up_ahead(&spec);
        // Not kept across the wait: the Runtime may go meanwhile.
        drop(engine);
        let mut st = lock(&pool.state);
        match made {
            Ok(b) if st.generation == generation && !pool.worker.stopping() => st.boxes.push(b),
            Ok(b) => {
                drop(st);
                drop(b);
            }
            Err(_) if st.generation == generation => st.failed = true,
            Err(_) => {}
        }
    }
}
