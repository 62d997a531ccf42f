//! The supervisor: creates one box, watches it from outside, and turns what happened into a
//! [`RunResult`]. It owns the wall-clock deadline, the output pipes and their caps, the seccomp
//! listener, and the cgroup evidence (OOM kills, peak memory). Nothing in the box can outlive it:
//! killing the box's pid 1 makes the kernel kill every process in the box's pid namespace.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::assemble::{self, Context};
use crate::child::{self, ChildContext};
use crate::error::BoxError;
use crate::plan::{BoxPlan, Step};
use crate::proto::Message;
use crate::result::{Fault, FaultType, RunResult, Stats};
use crate::size::Human;
use crate::spec::{BoxSpec, Stdin};
use crate::sys::{self, Errno};

/// Which stream a chunk of output came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Receives output as it arrives (for streaming front ends). Must not block for long: the box's
/// pipes fill while it runs.
pub trait OutputSink {
    fn chunk(&mut self, stream: Stream, data: &[u8]);
}

/// A sink that drops everything (when only the captured result matters).
pub struct NoSink;

impl OutputSink for NoSink {
    fn chunk(&mut self, _: Stream, _: &[u8]) {}
}

/// How a run is watched.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Keep output in the result (up to --max-output per stream).
    pub capture: bool,
}

/// Process-wide state: the detected cgroup layout and the compiled seccomp filter. Create once,
/// run many boxes (concurrently from several threads, too).
pub struct Runtime {
    core: Arc<Core>,
}

/// What a [`Runtime`] holds, shared with its ready-box thread (`ready.rs`).
pub(crate) struct Core {
    cgroups: Option<Arc<hull_cgroup::Host>>,
    cgroup_error: Option<String>,
    program: hull_seccomp::Program,
    fprog: libc::sock_fprog,
    listener: bool,
    rules: usize,
    counter: AtomicU64,
    started_ns: u64,
    /// Shared read-only skeletons, when enabled ([`Runtime::enable_templates`]).
    templates: Option<crate::template::Templates>,
    /// Cgroups and workspaces made ahead, with templates ([`Runtime::enable_templates`]).
    spares: Option<crate::spares::Spares>,
    /// Boxes set up ahead, waiting for their program, with templates.
    ready: Option<crate::ready::ReadyBoxes>,
    /// Polled by every box's watch: [`Runtime::end_every_box`].
    ending: crate::ending::Ending,
}

// SAFETY: `fprog` points into `program`, which the Core owns and never mutates; the pointer is
// only read (by the kernel, in a child's copy of memory).
unsafe impl Send for Core {}
// SAFETY: as above, all shared access is read-only.
unsafe impl Sync for Core {}

/// A pidfd of this process, opened once (-1 where the kernel has none): a box's processes in
/// their new pid namespace poll it to learn that their supervisor died before they asked for
/// PDEATHSIG (see `Step::DieWithSupervisor`). Close-on-exec, and pid 1 closes it before the
/// program starts.
pub(crate) fn own_pidfd() -> std::os::fd::RawFd {
    static FD: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    FD.get_or_init(|| sys::pidfd_open(sys::getpid()).ok())
        .as_ref()
        .map_or(-1, AsRawFd::as_raw_fd)
}

/// The signals the supervisor turns into "kill the box, clean up, report".
pub(crate) const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

impl Runtime {
    pub fn new() -> Result<Runtime, BoxError> {
        Ok(Runtime {
            core: Arc::new(Core::new()?),
        })
    }

    /// Builds each distinct read-only skeleton once and lets boxes enter a locked copy of it
    /// (see `template.rs`), instead of every box mounting its own ~90 steps; also keeps box
    /// cgroups and workspaces (`spares.rs`) and whole boxes (`ready.rs`) made ahead. For
    /// long-lived front ends; a one-shot `hull run` gains nothing.
    pub fn enable_templates(&mut self) -> Result<(), BoxError> {
        if self.core.ready.is_some() {
            return Ok(());
        }
        let core = Arc::get_mut(&mut self.core).ok_or(BoxError::Sys {
            what: "enable templates on a runtime already shared",
            errno: Errno(libc::EBUSY),
        })?;
        core.enable_templates()
    }

    /// How many templates this Runtime holds (0 when templates are off).
    pub fn templates_built(&self) -> usize {
        self.core
            .templates
            .as_ref()
            .map_or(0, crate::template::Templates::len)
    }

    /// How many boxes entered a pooled network namespace (0 when templates are off).
    pub fn pooled_nets_used(&self) -> u64 {
        self.core
            .templates
            .as_ref()
            .map_or(0, crate::template::Templates::pooled_nets)
    }

    /// How many boxes entered a pooled user namespace (templates only).
    pub fn pooled_users_used(&self) -> u64 {
        self.core
            .templates
            .as_ref()
            .map_or(0, crate::template::Templates::pooled_users)
    }

    /// How many boxes got a cgroup, and a temporary workspace, made ahead by the spares thread
    /// (0 when templates are off).
    pub fn spares_used(&self) -> (u64, u64) {
        self.core
            .spares
            .as_ref()
            .map_or((0, 0), crate::spares::Spares::used)
    }

    /// The directories (cgroups, then workspaces) of the spares made ahead and not yet used;
    /// they are removed with the Runtime.
    pub fn spare_paths(&self) -> Vec<PathBuf> {
        self.core
            .spares
            .as_ref()
            .map_or_else(Vec::new, crate::spares::Spares::paths)
    }

    /// Waits up to `timeout` for the boxes set up ahead to be complete for the last shape run
    /// (for benchmarks: so that measured runs do not share the CPU with that work); true if
    /// they are, or none are being set up.
    pub fn settle(&self, timeout: Duration) -> bool {
        self.core.ready.as_ref().is_none_or(|r| r.settle(timeout))
    }

    /// How many boxes ran in a box set up ahead of time (templates only).
    pub fn ready_used(&self) -> u64 {
        self.core
            .ready
            .as_ref()
            .map_or(0, crate::ready::ReadyBoxes::used)
    }

    /// The pid 1s of the boxes set up ahead and waiting now (they end with the Runtime).
    pub fn ready_pids(&self) -> Vec<libc::pid_t> {
        self.core
            .ready
            .as_ref()
            .map_or_else(Vec::new, crate::ready::ReadyBoxes::pids)
    }

    /// Kills every box this Runtime is running, and any it starts from now on, at once; their
    /// calls return with a `killed` fault saying so. For a front end whose client is gone
    /// (`hull serve` at the end of its input): nobody waits for those results, so the boxes
    /// should not run on to their deadlines. Teardowns still remove their cgroups and
    /// workspaces as usual.
    pub fn end_every_box(&self) {
        self.core.ending.end_all();
    }

    /// Removes box cgroups and temporary workspaces that SIGKILLed hulls left behind (see
    /// [`crate::leftovers`]). Reads the temporary directory, so long-lived front ends call it
    /// once, off the hot path.
    pub fn sweep_leftovers(&self) -> crate::leftovers::Swept {
        self.core.sweep_leftovers()
    }

    /// The detected cgroup layout, for `hull doctor`.
    pub fn cgroups(&self) -> Result<&hull_cgroup::Host, String> {
        self.core
            .cgroups
            .as_deref()
            .ok_or_else(|| self.core.cgroup_error.clone().unwrap_or_default())
    }

    pub fn seccomp_program(&self) -> &hull_seccomp::Program {
        &self.core.program
    }

    /// The plan `spec` would run, without running it (`hull run --plan`).
    pub fn plan(&self, spec: &BoxSpec) -> Result<BoxPlan, BoxError> {
        self.core.plan(spec)
    }

    /// Runs `spec` in a fresh box and returns what happened, after the box is fully torn down.
    pub fn run(
        &self,
        spec: &BoxSpec,
        opts: RunOptions,
        sink: &mut dyn OutputSink,
    ) -> Result<RunResult, BoxError> {
        let (result, teardown) = self.run_detached(spec, opts, sink)?;
        teardown.finish();
        Ok(result)
    }

    /// Runs `spec` and returns the result as soon as the program has exited and its output is
    /// complete, with the [`Teardown`] still to do: reaping the box's pid 1 (the kernel's namespace
    /// teardown, ~1.5 ms here), removing its cgroup and temporary workspace. Dropping the
    /// `Teardown` does it too, so nothing is left behind.
    pub fn run_detached(
        &self,
        spec: &BoxSpec,
        opts: RunOptions,
        sink: &mut dyn OutputSink,
    ) -> Result<(RunResult, Teardown), BoxError> {
        self.core.run_detached(&self.core, spec, opts, sink)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // The ready-box thread holds only a weak reference; the boxes it made go now.
        if let Some(r) = &self.core.ready {
            r.stop();
        }
    }
}

impl Core {
    fn new() -> Result<Core, BoxError> {
        let support = hull_seccomp::probe();
        if !support.filter {
            return Err(BoxError::Seccomp("the kernel has no seccomp filter support (CONFIG_SECCOMP_FILTER); hull will not run code unfiltered".into()));
        }
        let listener = support.user_notif;
        let opts = hull_seccomp::CompileOptions {
            kill_mode: if listener {
                hull_seccomp::KillMode::UserNotif
            } else {
                hull_seccomp::KillMode::KillProcess
            },
            default_errno: u16::try_from(libc::ENOSYS).unwrap_or(38),
        };
        let rules = hull_seccomp::default_policy();
        let program =
            hull_seccomp::compile(rules, &opts).map_err(|e| BoxError::Seccomp(e.to_string()))?;
        let fprog = program.as_fprog();
        let (cgroups, cgroup_error) = match hull_cgroup::Host::detect() {
            Ok(h) => (Some(Arc::new(h)), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let started_ns = sys::monotonic_ns() % 1_000_000_000_000;
        Ok(Core {
            cgroups,
            cgroup_error,
            program,
            fprog,
            listener,
            rules: rules.len(),
            counter: AtomicU64::new(0),
            started_ns,
            templates: None,
            spares: None,
            ready: None,
            ending: crate::ending::Ending::new()?,
        })
    }

    fn enable_templates(&mut self) -> Result<(), BoxError> {
        if self.templates.is_none() {
            self.templates = Some(crate::template::Templates::new()?);
        }
        if self.spares.is_none() {
            self.spares = Some(crate::spares::Spares::new(
                self.cgroups.clone(),
                self.started_ns,
            ));
        }
        if self.ready.is_none() {
            self.ready = Some(crate::ready::ReadyBoxes::new());
        }
        Ok(())
    }

    /// Removes box cgroups and temporary workspaces that SIGKILLed hulls left behind (see
    /// [`crate::leftovers`]). Reads the temporary directory, so long-lived front ends call it
    /// once, off the hot path.
    fn sweep_leftovers(&self) -> crate::leftovers::Swept {
        let mut parents: Vec<PathBuf> = self
            .cgroups
            .as_ref()
            .map(|h| {
                h.report()
                    .into_iter()
                    .filter_map(|r| r.box_parent)
                    .collect()
            })
            .unwrap_or_default();
        parents.sort();
        parents.dedup();
        crate::leftovers::sweep(&parents, &std::env::temp_dir())
    }

    /// The plan `spec` would run, without running it (`hull run --plan`).
    fn plan(&self, spec: &BoxSpec) -> Result<BoxPlan, BoxError> {
        spec.validate()?;
        // A temporary workspace like a real run's (deleted when the plan is printed).
        let temp = if spec.workspace.is_none() {
            Some(Workspace::temporary()?)
        } else {
            None
        };
        let ws = spec
            .workspace
            .clone()
            .or_else(|| temp.as_ref().map(|t| t.path.clone()))
            .unwrap_or_default();
        let procs: Vec<CString> = Vec::new();
        let mut procs_shown = procs;
        if let Some(h) = &self.cgroups {
            // Show where the box would join without creating anything.
            procs_shown = h
                .report()
                .iter()
                .filter_map(|r| {
                    r.box_parent.as_ref().map(|p| {
                        crate::plan::cstring(&format!("{}/hull-<id>/cgroup.procs", p.display()))
                    })
                })
                .collect();
        }
        let keep = crate::caps::resolve_for(
            &spec.cap_add,
            &spec.cap_drop,
            crate::remap::box_root().is_some(),
        )
        .map_err(crate::spec::SpecError::from)?;
        let ctx = Context {
            uid: sys::geteuid(),
            gid: sys::getegid(),
            cgroup_procs: &procs_shown,
            workspace: &ws,
            seccomp_rules: self.rules,
            listener: self.listener,
            keep_caps: keep,
            stage: crate::plan::STAGE,
            remap: remap_of(spec),
            temporary_workspace: temp.is_some(),
        };
        build_plan(spec, &ctx)
    }

    /// [`Runtime::run_detached`]; `shared` is this Core's own Arc (the ready-box thread keeps a
    /// weak one).
    fn run_detached(
        &self,
        shared: &Arc<Core>,
        spec: &BoxSpec,
        opts: RunOptions,
        sink: &mut dyn OutputSink,
    ) -> Result<(RunResult, Teardown), BoxError> {
        let t0 = sys::monotonic_ns();
        let tracing = std::env::var_os("HULL_TRACE_STEPS").is_some();
        let mark = |what: &str| {
            if tracing {
                eprintln!(
                    "hull trace: supervisor {:>7} us  {what}",
                    (sys::monotonic_ns() - t0) / 1000
                );
            }
        };
        spec.validate()?;
        let keep = crate::caps::resolve_for(
            &spec.cap_add,
            &spec.cap_drop,
            crate::remap::box_root().is_some(),
        )
        .map_err(crate::spec::SpecError::from)?;
        // A box set up ahead for this shape of spec, if one is ready (not while tracing steps,
        // which a ready box ran long ago).
        if let (Some(pool), false) = (&self.ready, tracing) {
            if let Some(rb) = pool.take(shared, spec) {
                let done = self.run_ready(rb, spec, keep, opts, sink);
                pool.refill();
                if let Some(done) = done? {
                    return Ok(done);
                }
            }
        }
        let mut workspace = match &spec.workspace {
            Some(w) => Workspace {
                path: w.clone(),
                temporary: false,
                subids: None,
            },
            None => self.temporary_workspace()?,
        };
        let (guard, warnings) = self.box_cgroup(spec)?;
        mark("workspace and cgroup created");
        let plan = self.assemble(spec, keep, &workspace.path, &guard)?;
        workspace.subids = match plan.id_maps() {
            Some(crate::plan::IdMaps::Helpers { uids, gids }) => Some((uids.clone(), gids.clone())),
            _ => None,
        };
        // Holds the template's namespaces (and a pooled network namespace) until the box has
        // entered them.
        let (plan, _entered) = match &self.templates {
            Some(t) => t.prepare(plan)?,
            None => (plan, None),
        };
        mark("plan built");
        let outcome = self.supervise(spec, &plan, opts, sink, tracing);
        mark("result known");
        let (outcome, pid) = outcome?;
        Ok(self.conclude(
            spec,
            outcome,
            pid,
            guard,
            workspace,
            warnings,
            tracing.then_some(t0),
        ))
    }

    /// A fresh temporary workspace: a spare one when ready.
    fn temporary_workspace(&self) -> Result<Workspace, BoxError> {
        match self
            .spares
            .as_ref()
            .and_then(crate::spares::Spares::workspace)
        {
            Some(w) => Ok(w),
            None => Workspace::temporary(),
        }
    }

    /// The box's cgroup (a spare one when ready) and the warnings for caps it cannot enforce;
    /// refused when `require_limits` is set and a cap is not enforced.
    fn box_cgroup(&self, spec: &BoxSpec) -> Result<(CgroupGuard, Vec<String>), BoxError> {
        let limits = limits_of(spec);
        let cgroup = match &self.cgroups {
            Some(h) => match self.spares.as_ref().and_then(|s| s.cgroup(&limits)) {
                Some(cg) => Some(cg),
                None => {
                    let seq = self.counter.fetch_add(1, Ordering::Relaxed);
                    // The owner identity lets a later hull sweep the cgroup if we are SIGKILLed
                    // (`leftovers`); the start time keeps two Runtimes of one process apart.
                    let name = format!(
                        "{}{}-{seq}-{}",
                        crate::leftovers::CGROUP_PREFIX,
                        crate::owner::id(),
                        self.started_ns
                    );
                    Some(h.create(&name, &limits)?)
                }
            },
            None => None,
        };
        let guard = CgroupGuard(cgroup);
        let mut unenforced: Vec<String> = Vec::new();
        match &guard.0 {
            Some(cg) => unenforced.extend(
                cg.unenforced()
                    .iter()
                    .map(|(c, why)| format!("{c:?} cap not enforced: {why}")),
            ),
            None => {
                if spec.memory.is_some() || spec.pids.is_some() || spec.cpus.is_some() {
                    unenforced.push(format!(
                        "no cgroup available, so no memory/pids/cpu cap is enforced: {}",
                        self.cgroup_error.clone().unwrap_or_default()
                    ));
                }
            }
        }
        if spec.require_limits && !unenforced.is_empty() {
            return Err(BoxError::LimitsUnenforced(unenforced.join("; ")));
        }
        Ok((guard, unenforced))
    }

    /// The whole plan of `spec` with this workspace and cgroup (before any template split).
    fn assemble(
        &self,
        spec: &BoxSpec,
        keep: u64,
        workspace: &Path,
        cgroup: &CgroupGuard,
    ) -> Result<BoxPlan, BoxError> {
        let procs: Vec<CString> = cgroup
            .0
            .as_ref()
            .map(|c| c.procs_files().to_vec())
            .unwrap_or_default();
        let ctx = Context {
            uid: sys::geteuid(),
            gid: sys::getegid(),
            cgroup_procs: &procs,
            workspace,
            seccomp_rules: self.rules,
            listener: self.listener,
            keep_caps: keep,
            stage: self
                .templates
                .as_ref()
                .map_or(crate::plan::STAGE, |t| t.stage()),
            remap: remap_of(spec),
            temporary_workspace: spec.workspace.is_none(),
        };
        build_plan(spec, &ctx)
    }

    /// The result of a watched box, and its teardown.
    #[allow(clippy::too_many_arguments)]
    fn conclude(
        &self,
        spec: &BoxSpec,
        outcome: Outcome,
        pid: libc::pid_t,
        guard: CgroupGuard,
        workspace: Workspace,
        warnings: Vec<String>,
        trace_t0: Option<u64>,
    ) -> (RunResult, Teardown) {
        let cg = guard.0.as_ref();
        let oom_kills = cg.map_or(0, hull_cgroup::BoxCgroup::oom_kills);
        let peak = cg.and_then(hull_cgroup::BoxCgroup::peak_memory);
        let st = outcome.status.unwrap_or(outcome.pid1_status);
        let failed = !(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0);
        let ws_full = failed && workspace_is_full(&workspace.path);
        let exited = outcome.exited;
        // With a listener every kill the filter orders is reported through it, so a bare SIGSYS
        // death is the program's own (`kill -SYS $$`), not a fault.
        let mut result = finish(spec, outcome, oom_kills, peak, ws_full, !self.listener);
        result.warnings.splice(0..0, warnings);
        let teardown = Teardown {
            pid: if exited { None } else { Some(pid) },
            cgroup: guard,
            workspace: Some(workspace),
            tracing: trace_t0,
        };
        (result, teardown)
    }

    /// Runs `spec` in `rb`, a box set up ahead, when its setup is exactly what `spec` asks for
    /// (the same plan, with its workspace and cgroup, up to the program; the same limits);
    /// otherwise None, and `rb` goes.
    fn run_ready(
        &self,
        mut rb: crate::ready::ReadyBox,
        spec: &BoxSpec,
        keep: u64,
        opts: RunOptions,
        sink: &mut dyn OutputSink,
    ) -> Result<Option<(RunResult, Teardown)>, BoxError> {
        if rb.limits != limits_of(spec) || (spec.require_limits && !rb.warnings.is_empty()) {
            return Ok(None);
        }
        let plan = self.assemble(spec, keep, &rb.workspace.path, &rb.cgroup)?;
        let (
            Some((
                Step::Exec {
                    argv,
                    env,
                    candidates,
                },
                setup,
            )),
            Some((_, ready_setup)),
        ) = (plan.steps.split_last(), rb.plan.steps.split_last())
        else {
            return Ok(None);
        };
        if setup != ready_setup || plan.clone_flags != rb.plan.clone_flags {
            return Ok(None);
        }
        let Some(go) = crate::proto::go::encode(argv, env, candidates) else {
            return Ok(None);
        };
        let sigfd = sys::block_signals_fd(&FORWARDED).map_err(|errno| BoxError::Sys {
            what: "block signals",
            errno,
        })?;
        let start = sys::monotonic_ns();
        if sys::send_with_fd(rb.sock.as_raw_fd(), &go, None).is_err() {
            sys::unblock_signals(&FORWARDED);
            return Ok(None);
        }
        rb.mark_used();
        let pid = rb.pid;
        let watch = Watch {
            pid,
            ending: self.ending.fd(),
            start,
            spec,
            opts,
            tracing: false,
        };
        // Pid 1 reports failures by its index in the plan it ran (the template-split one).
        let outcome = watch.run(
            &rb.sock,
            &rb.out,
            &rb.err,
            &sigfd,
            sink,
            &rb.boxed,
            Some(rb.listener.take()),
        );
        sys::unblock_signals(&FORWARDED);
        let (guard, workspace, warnings) = rb.hand_over();
        let outcome = match outcome {
            // Its setup ran ahead: report how long it took then.
            Ok(o) => Outcome {
                setup_us: rb.setup_us,
                ..o
            },
            Err(e) => {
                end_unreaped(pid);
                return Err(e);
            }
        };
        Ok(Some(self.conclude(
            spec, outcome, pid, guard, workspace, warnings, None,
        )))
    }

    /// Sets up a box for `spec` and leaves its pid 1 waiting for the program (see `ready.rs`).
    pub(crate) fn build_ready(&self, spec: &BoxSpec) -> Result<crate::ready::ReadyBox, BoxError> {
        spec.validate()?;
        let keep = crate::caps::resolve_for(
            &spec.cap_add,
            &spec.cap_drop,
            crate::remap::box_root().is_some(),
        )
        .map_err(crate::spec::SpecError::from)?;
        let Some(templates) = &self.templates else {
            return Err(BoxError::Sys {
                what: "set up a box ahead without templates",
                errno: Errno(libc::EINVAL),
            });
        };
        let workspace = self.temporary_workspace()?;
        let (cgroup, warnings) = self.box_cgroup(spec)?;
        let plan = self.assemble(spec, keep, &workspace.path, &cgroup)?;
        let (boxed, entered) = templates.prepare(plan.clone())?;
        if entered.is_none() {
            return Err(BoxError::Sys {
                what: "set up a box ahead without a template",
                errno: Errno(libc::EINVAL),
            });
        }
        let started = self.start(spec, &boxed, true, None)?;
        let start = started.start;
        let mut rb = crate::ready::ReadyBox::new(
            plan,
            boxed,
            limits_of(spec),
            started.pid,
            started.sock,
            started.out,
            started.err,
            workspace,
            cgroup,
            warnings,
            entered,
        );
        // Its setup runs to the end: Ready, with the seccomp listener.
        match crate::template::await_message_fd(&rb.sock, 10_000)? {
            (Message::Ready, listener) => rb.listener = listener,
            (Message::SetupFailed { step, errno }, _) => {
                return Err(setup_error(&rb.boxed, step, errno))
            }
            _ => return Err(BoxError::SetupVanished(0)),
        }
        rb.setup_us = (sys::monotonic_ns() - start) / 1000;
        Ok(rb)
    }

    fn supervise(
        &self,
        spec: &BoxSpec,
        plan: &BoxPlan,
        opts: RunOptions,
        sink: &mut dyn OutputSink,
        tracing: bool,
    ) -> Result<(Outcome, libc::pid_t), BoxError> {
        let trace = if tracing { TraceMap::new() } else { None };
        let sigfd = sys::block_signals_fd(&FORWARDED).map_err(|errno| BoxError::Sys {
            what: "block signals",
            errno,
        })?;
        let started = match self.start(spec, plan, false, trace.as_ref()) {
            Ok(s) => s,
            Err(e) => {
                sys::unblock_signals(&FORWARDED);
                return Err(e);
            }
        };
        let Started {
            pid,
            start,
            sock,
            out,
            err,
        } = started;
        let watch = Watch {
            pid,
            ending: self.ending.fd(),
            start,
            spec,
            opts,
            tracing,
        };
        let outcome = watch.run(&sock, &out, &err, &sigfd, sink, plan, None);
        let watched = sys::monotonic_ns();
        if outcome.is_err() {
            end_unreaped(pid);
        }
        sys::unblock_signals(&FORWARDED);
        if let Some(t) = &trace {
            eprintln!(
                "hull trace: watch ended {:>7} us after clone",
                (watched - start) / 1000
            );
            t.print(start, plan);
        }
        outcome.map(|o| (o, pid))
    }

    /// Clones the box's first process to run `plan` (for a template box, it reports the pid 1
    /// it forks); with `ready_box`, pid 1 waits at the program for a go datagram.
    fn start(
        &self,
        spec: &BoxSpec,
        plan: &BoxPlan,
        ready_box: bool,
        trace: Option<&TraceMap>,
    ) -> Result<Started, BoxError> {
        let sysf = |what: &'static str| move |errno: Errno| BoxError::Sys { what, errno };
        let (out_r, out_w) = sys::pipe().map_err(sysf("create the stdout pipe"))?;
        let (err_r, err_w) = sys::pipe().map_err(sysf("create the stderr pipe"))?;
        let (sock_parent, sock_child) =
            sys::seqpacket_pair().map_err(sysf("create the box channel"))?;
        let null;
        let stdin_fd = match spec.stdin {
            Stdin::Inherit => 0,
            Stdin::Null => {
                null = std::fs::File::open("/dev/null").map_err(|error| BoxError::Io {
                    what: "open /dev/null".into(),
                    error,
                })?;
                null.as_raw_fd()
            }
        };
        let Some(Step::Exec { argv, env, .. }) = plan.steps.last() else {
            return Err(BoxError::Seccomp("plan without exec".into()));
        };
        // Pid 1 of a box entering a template runs on memory set aside once (its entry process's
        // copy of it; ours is never touched, so boxes at once can share it).
        let pid1_stack = if plan.steps.iter().any(|s| matches!(s, Step::StartPid1)) {
            pid1_stack()
        } else {
            None
        };
        let argv_ptrs = child::pointer_array(argv);
        let env_ptrs = child::pointer_array(env);
        // Idmapped copies of the host directories the box may write (host root only): made
        // here, in the initial user namespace, and held until the clone has its copies.
        let trees = adopted_trees(plan)?;
        let tree_fds: Vec<(i32, RawFd)> =
            trees.iter().map(|(at, fd)| (*at, fd.as_raw_fd())).collect();
        let ctx = ChildContext {
            plan,
            sock: sock_child.as_raw_fd(),
            peer: sock_parent.as_raw_fd(),
            supervisor: own_pidfd(),
            stdin: stdin_fd,
            stdout: out_w.as_raw_fd(),
            stderr: err_w.as_raw_fd(),
            argv: &argv_ptrs,
            envp: &env_ptrs,
            seccomp: Some(&self.fprog),
            trace: trace.map(|t| t.0),
            pid1_stack,
            ready_box,
            trees: &tree_fds,
            strings: sys::process_strings(),
        };
        let start = sys::monotonic_ns();
        // SAFETY: the child runs only `child::run`, which reads prepared data, calls
        // allocation-free wrappers and ends in execve or _exit.
        let pid = match unsafe { sys::clone_fork(plan.clone_flags) } {
            Ok(0) => child::run(&ctx),
            Ok(pid) => pid,
            Err(errno) => {
                return Err(BoxError::Clone {
                    errno,
                    hint: clone_hint(errno),
                })
            }
        };
        drop((out_w, err_w, sock_child, trees));
        if let Some(maps) = plan.id_maps() {
            if let Err(e) = map_ids(pid, &sock_parent, maps, plan) {
                let _ = sys::kill(pid, libc::SIGKILL);
                let _ = sys::wait4(pid, false);
                return Err(e);
            }
        }
        // A box entering a template starts with a plain fork that forks pid 1 and exits.
        let pid = if plan.steps.iter().any(|s| matches!(s, Step::StartPid1)) {
            await_pid1(pid, &sock_parent, plan, spec)?
        } else {
            pid
        };
        Ok(Started {
            pid,
            start,
            sock: sock_parent,
            out: out_r,
            err: err_r,
        })
    }
}

/// Idmapped copies of the plan's `AdoptTree` sources (see [`crate::remap`]), by descriptor
/// number.
fn adopted_trees(plan: &BoxPlan) -> Result<Vec<(i32, OwnedFd)>, BoxError> {
    plan.steps
        .iter()
        .filter_map(|s| match s {
            Step::AdoptTree {
                path,
                fd,
                uid,
                gid,
                count,
            } => Some(
                crate::remap::tree(&path.c, (*uid, *gid), *count)
                    .map(|t| (*fd, t))
                    .map_err(|errno| BoxError::Idmap {
                        arg: "--workspace or --mount",
                        path: path.c.to_string_lossy().into_owned(),
                        errno,
                    }),
            ),
            _ => None,
        })
        .collect()
}

/// Waits for the box's request and writes its id maps: with the uidmap helpers (`--subids`),
/// or ourselves (host root, see [`crate::remap`]); then answers.
pub(crate) fn map_ids(
    pid: libc::pid_t,
    sock: &OwnedFd,
    maps: &crate::plan::IdMaps,
    plan: &BoxPlan,
) -> Result<(), BoxError> {
    match crate::template::await_message(sock, 10_000)? {
        Message::WantIdMaps => {}
        Message::SetupFailed { step, errno } => return Err(setup_error(plan, step, errno)),
        _ => return Err(crate::proto::ProtoError::Tag(0).into()),
    }
    match maps {
        crate::plan::IdMaps::Helpers { uids, gids } => crate::subids::apply(pid, uids, gids)?,
        crate::plan::IdMaps::Direct { uid, gid, count } => {
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
    sys::send_with_fd(sock.as_raw_fd(), &Message::IdsMapped.encode(), None).map_err(|errno| {
        BoxError::Sys {
            what: "answer the box's id-map request",
            errno,
        }
    })
}

/// A box's first process, cloned: its pid 1, when the clone started, and our ends of its
/// channel and output pipes.
struct Started {
    pid: libc::pid_t,
    start: u64,
    sock: OwnedFd,
    out: OwnedFd,
    err: OwnedFd,
}

/// The host ids host root's box maps to (see [`crate::remap`]): with `--subids`, the whole
/// range.
fn remap_of(spec: &BoxSpec) -> Option<crate::assemble::Remap> {
    crate::remap::box_root().map(|(uid, gid)| crate::assemble::Remap {
        uid,
        gid,
        count: if spec.subids { crate::remap::COUNT } else { 1 },
    })
}

/// The plan of `spec` in `ctx`, its id maps left to the uidmap helpers with `--subids` (host
/// root's are written by the supervisor, see [`crate::remap`]).
fn build_plan(spec: &BoxSpec, ctx: &Context<'_>) -> Result<BoxPlan, BoxError> {
    let mut plan = assemble::build(spec, ctx)?;
    if spec.subids && ctx.remap.is_none() {
        let (uids, gids) = crate::subids::lookup(ctx.uid, ctx.gid)?;
        plan.use_subids(uids, gids);
    }
    Ok(plan)
}

/// Ends a box's pid 1 after a failed watch, only while it is still our unreaped child (WNOHANG
/// reaps a zombie; ECHILD means it was reaped already and the pid may be reused).
fn end_unreaped(pid: libc::pid_t) {
    if let Ok(None) = sys::wait4(pid, true) {
        let _ = sys::kill(pid, libc::SIGKILL);
        let _ = sys::wait4(pid, false);
    }
}

fn limits_of(spec: &BoxSpec) -> hull_cgroup::Limits {
    hull_cgroup::Limits {
        memory_bytes: spec.memory,
        pids: spec.pids,
        cpu_millis: spec.cpu_millis(),
    }
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
    sock: &OwnedFd,
    plan: &BoxPlan,
    spec: &BoxSpec,
) -> Result<libc::pid_t, BoxError> {
    let timeout = i32::try_from(spec.timeout.as_millis()).unwrap_or(i32::MAX);
    let answer = crate::template::await_message(sock, timeout);
    if answer.is_err() {
        let _ = sys::kill(entry, libc::SIGKILL);
    }
    let reaped = sys::wait4(entry, false);
    if answer.is_err() {
        // A Pid1 sent just as we gave up: that pid 1 is our child; end it rather than leave it
        // running without a supervisor.
        if let Ok(Message::Pid1 { pid }) = crate::template::await_message(sock, 0) {
            let _ = sys::kill(pid, libc::SIGKILL);
            let _ = sys::wait4(pid, false);
        }
    }
    match answer? {
        Message::Pid1 { pid } => Ok(pid),
        Message::SetupFailed { step, errno } => Err(setup_error(plan, step, errno)),
        _ => Err(BoxError::SetupVanished(
            reaped.ok().flatten().map_or(0, |w| w.status),
        )),
    }
}

/// Number of steps `HULL_TRACE_STEPS` records.
pub(crate) const TRACE_SLOTS: usize = 512;

/// A shared anonymous mapping the child writes step timestamps into (a debugging aid).
struct TraceMap(*mut u64);

impl TraceMap {
    fn new() -> Option<TraceMap> {
        // SAFETY: a fresh anonymous shared mapping; checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                TRACE_SLOTS * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        (p != libc::MAP_FAILED).then(|| TraceMap(p.cast()))
    }

    fn print(&self, start: u64, plan: &BoxPlan) {
        let mut prev = start;
        for (i, s) in plan.steps.iter().enumerate().take(TRACE_SLOTS) {
            // SAFETY: index within the mapping.
            let t = unsafe { *self.0.add(i) };
            if t == 0 {
                break;
            }
            eprintln!(
                "hull trace: {:>7} us  +{:>5} us  before step {:>3}: {s}",
                (t - start) / 1000,
                (t.saturating_sub(prev)) / 1000,
                i + 1
            );
            prev = t;
        }
    }
}

impl Drop for TraceMap {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `new`.
        unsafe { libc::munmap(self.0.cast(), TRACE_SLOTS * 8) };
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

/// What the watch loop saw.
struct Outcome {
    /// Whether pid 1 has been reaped (else the teardown reaps it).
    exited: bool,
    main_cpu_ms: u64,
    status: Option<i32>,
    pid1_status: i32,
    rusage_cpu_ms: u64,
    timed_out: bool,
    interrupted: Option<i32>,
    /// Killed because every box was to end ([`Runtime::end_every_box`]).
    ended: bool,
    /// A seccomp notification: (what to name in the fault's `syscall`, the reason).
    escape: Option<(String, String)>,
    exec_failed: Option<Errno>,
    stdout: Captured,
    stderr: Captured,
    duration_ms: u64,
    setup_us: u64,
}

#[derive(Default)]
struct Captured {
    data: Vec<u8>,
    total: u64,
    dropped: u64,
    eof: bool,
}

struct Watch<'a> {
    pid: libc::pid_t,
    /// Readable once every box is to end ([`Runtime::end_every_box`]).
    ending: BorrowedFd<'a>,
    start: u64,
    spec: &'a BoxSpec,
    opts: RunOptions,
    /// `HULL_TRACE_STEPS` was set: report when the program's exit arrives.
    tracing: bool,
}

impl Watch<'_> {
    /// `ready_box`: for a ready box, whose Ready (with the seccomp listener, if any) came before.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        sock: &OwnedFd,
        out: &OwnedFd,
        err: &OwnedFd,
        sigfd: &OwnedFd,
        sink: &mut dyn OutputSink,
        plan: &BoxPlan,
        ready_box: Option<Option<OwnedFd>>,
    ) -> Result<Outcome, BoxError> {
        let pidfd = sys::pidfd_open(self.pid).map_err(|errno| BoxError::Sys {
            what: "open a pidfd for the box",
            errno,
        })?;
        let _ = sys::set_nonblocking(out.as_fd());
        let _ = sys::set_nonblocking(err.as_fd());
        let deadline = self.start + u64::try_from(self.spec.timeout.as_nanos()).unwrap_or(u64::MAX);
        let mut o = Outcome {
            exited: false,
            main_cpu_ms: 0,
            status: None,
            pid1_status: 0,
            rusage_cpu_ms: 0,
            timed_out: false,
            interrupted: None,
            ended: false,
            escape: None,
            exec_failed: None,
            stdout: Captured::default(),
            stderr: Captured::default(),
            duration_ms: 0,
            setup_us: 0,
        };
        let (mut ready, mut listener) = match ready_box {
            Some(l) => (true, l),
            None => (false, None),
        };
        let mut setup_error: Option<BoxError> = None;
        let mut sock_open = true;
        let mut killed = false;
        let mut exited = false;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // After pid 1 is gone every writer of the pipes is gone too; drain to EOF. Once the
            // program has exited and its output is complete, the result is known: pid 1 is
            // ending the box on its own, and the teardown reaps it (off the result's path).
            if o.stdout.eof && o.stderr.eof && ((exited && !sock_open) || o.status.is_some()) {
                break;
            }
            let mut fds: Vec<libc::pollfd> = Vec::with_capacity(7);
            let mut push = |fd: BorrowedFd<'_>, on: bool| {
                fds.push(libc::pollfd {
                    fd: if on { fd.as_raw_fd() } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                });
            };
            push(sock.as_fd(), sock_open);
            push(out.as_fd(), !o.stdout.eof);
            push(err.as_fd(), !o.stderr.eof);
            push(pidfd.as_fd(), !exited);
            push(sigfd.as_fd(), !exited);
            match &listener {
                Some(l) => push(l.as_fd(), !exited),
                None => push(sock.as_fd(), false),
            }
            push(self.ending, !killed);
            let now = sys::monotonic_ns();
            let timeout_ms = if exited {
                // Bounded drain: a pipe still open after the box died would be a kernel surprise.
                1000
            } else if now >= deadline {
                0
            } else {
                i32::try_from((deadline - now) / 1_000_000 + 1).unwrap_or(i32::MAX)
            };
            let n = sys::poll(&mut fds, timeout_ms).map_err(|errno| BoxError::Sys {
                what: "poll the box",
                errno,
            })?;
            if n == 0 && exited {
                break;
            }
            if !exited && sys::monotonic_ns() >= deadline && !killed {
                o.timed_out = true;
                killed = true;
                let _ = sys::kill(self.pid, libc::SIGKILL);
            }
            let ready_in =
                |i: usize| fds[i].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
            if ready_in(0) {
                let mut m = [0u8; 64];
                match sys::recv_with_fd(sock.as_fd(), &mut m) {
                    Ok((0, _)) | Err(_) => sock_open = false,
                    Ok((len, fd)) => match Message::decode(&m[..len])? {
                        Message::Ready => {
                            ready = true;
                            if self.tracing {
                                eprintln!(
                                    "hull trace: ready {:>7} us after clone",
                                    (sys::monotonic_ns() - self.start) / 1000
                                );
                            }
                            o.setup_us = (sys::monotonic_ns() - self.start) / 1000;
                            listener = fd;
                        }
                        Message::SetupFailed { step, errno } => {
                            setup_error = Some(self::setup_error(plan, step, errno))
                        }
                        // Only a template's entry process sends this, and it is handled before
                        // the watch starts.
                        Message::Pid1 { .. } => return Err(crate::proto::ProtoError::Tag(5).into()),
                        // Id maps are settled before the watch starts.
                        Message::WantIdMaps | Message::IdsMapped => {
                            return Err(crate::proto::ProtoError::Tag(6).into())
                        }
                        Message::ExecFailed { errno } => o.exec_failed = Some(Errno(errno)),
                        Message::MainExited { status, cpu_ms } => {
                            o.main_cpu_ms = u64::try_from(cpu_ms).unwrap_or(0);
                            o.duration_ms = (sys::monotonic_ns() - self.start) / 1_000_000;
                            if self.tracing {
                                eprintln!(
                                    "hull trace: program exited {:>7} us after clone",
                                    (sys::monotonic_ns() - self.start) / 1000
                                );
                            }
                            o.status = Some(status);
                        }
                    },
                }
            }
            for (i, which) in [(1usize, Stream::Stdout), (2, Stream::Stderr)] {
                if ready_in(i) {
                    let (fd, cap) = if which == Stream::Stdout {
                        (out, &mut o.stdout)
                    } else {
                        (err, &mut o.stderr)
                    };
                    drain(
                        fd.as_fd(),
                        cap,
                        which,
                        &mut buf,
                        self.spec.max_output,
                        self.opts.capture,
                        sink,
                    );
                }
            }
            if ready_in(5) {
                if let Some(l) = &listener {
                    if let Ok(n) = hull_seccomp::recv_notification(l.as_fd()) {
                        if o.escape.is_none() {
                            let what = n.describe();
                            let reason = match n.syscall_name() {
                                Some(name) if what == name => format!("the box called {name} (syscall {}), an escape primitive; the box was killed", n.nr),
                                _ => format!("the box made {what}, which the filter refuses; the box was killed"),
                            };
                            o.escape = Some((what, reason));
                        }
                        if !killed {
                            killed = true;
                            let _ = sys::kill(self.pid, libc::SIGKILL);
                        }
                    } else {
                        // The listener reports POLLHUP once no filtered process remains.
                        listener = None;
                    }
                }
            }
            if ready_in(6) && !killed {
                o.ended = true;
                killed = true;
                let _ = sys::kill(self.pid, libc::SIGKILL);
            }
            if ready_in(4) {
                let mut si = [0u8; 128];
                if sys::read(sigfd.as_fd(), &mut si).is_ok() {
                    let signo = i32::from_ne_bytes([si[0], si[1], si[2], si[3]]);
                    o.interrupted = Some(signo);
                    if !killed {
                        killed = true;
                        let _ = sys::kill(self.pid, libc::SIGKILL);
                    }
                }
            }
            if ready_in(3) && !exited {
                if let Ok(Some(w)) = sys::wait4(self.pid, true) {
                    exited = true;
                    o.pid1_status = w.status;
                    let ru = &w.rusage;
                    let ms = |t: libc::timeval| {
                        u64::try_from(t.tv_sec).unwrap_or(0) * 1000
                            + u64::try_from(t.tv_usec).unwrap_or(0) / 1000
                    };
                    o.rusage_cpu_ms = ms(ru.ru_utime) + ms(ru.ru_stime);
                    if o.duration_ms == 0 {
                        o.duration_ms = (sys::monotonic_ns() - self.start) / 1_000_000;
                    }
                }
            }
        }
        o.exited = exited;
        if !exited {
            // Pid 1 is on its way out (it sent the program's status) or must go now; either way
            // SIGKILL makes sure, and kills the whole pid namespace with it.
            let _ = sys::kill(self.pid, libc::SIGKILL);
            if o.status.is_none() {
                if let Ok(Some(w)) = sys::wait4(self.pid, false) {
                    o.pid1_status = w.status;
                    o.exited = true;
                }
            }
        }
        if !o.exited || o.rusage_cpu_ms == 0 {
            o.rusage_cpu_ms = o.rusage_cpu_ms.max(o.main_cpu_ms);
        }
        if let Some(e) = setup_error {
            return Err(e);
        }
        if !ready
            && o.status.is_none()
            && o.exec_failed.is_none()
            && !o.timed_out
            && o.interrupted.is_none()
            && !o.ended
        {
            return Err(BoxError::SetupVanished(o.pid1_status));
        }
        Ok(o)
    }
}

fn drain(
    fd: BorrowedFd<'_>,
    cap: &mut Captured,
    which: Stream,
    buf: &mut [u8],
    max: u64,
    capture: bool,
    sink: &mut dyn OutputSink,
) {
    // Bounded so one flooding stream cannot starve the deadline check.
    for _ in 0..16 {
        match sys::read(fd, buf) {
            Ok(0) => {
                cap.eof = true;
                return;
            }
            Ok(n) => {
                let room = usize::try_from(max.saturating_sub(cap.total)).unwrap_or(usize::MAX);
                let keep = n.min(room);
                if keep > 0 {
                    if capture {
                        cap.data.extend_from_slice(&buf[..keep]);
                    }
                    sink.chunk(which, &buf[..keep]);
                }
                cap.total += n as u64;
                cap.dropped += (n - keep) as u64;
            }
            Err(Errno(libc::EAGAIN)) => return,
            Err(_) => {
                cap.eof = true;
                return;
            }
        }
    }
}

/// The error for step `step` of `plan` failing with `errno`, as the box reported it.
pub(crate) fn setup_error(plan: &BoxPlan, step: u32, errno: i32) -> BoxError {
    let idx = usize::try_from(step).unwrap_or(usize::MAX);
    let s = plan.steps.get(idx);
    BoxError::Setup {
        index: idx + 1,
        step: s.map_or("unknown step", Step::name),
        path: s.and_then(Step::path),
        errno: Errno(errno),
        hint: s.and_then(|s| setup_hint(s, errno)),
    }
}

fn setup_hint(step: &Step, errno: i32) -> Option<String> {
    match (step, errno) {
        (Step::Chdir { path }, libc::ENOENT) => Some(format!(
            "the working directory {} does not exist in the box; pass --cwd with an existing path",
            path.shown
        )),
        (Step::JoinCgroup { .. }, libc::EACCES | libc::EPERM) => {
            Some("the cgroup is not delegated to this user; see `hull doctor`".into())
        }
        (Step::Seal { .. }, libc::ENOSYS) => {
            Some("mount_setattr(2) needs Linux 5.12 or newer".into())
        }
        (Step::Proc { .. }, libc::EPERM) => Some(
            "procfs cannot be mounted here (an over-mounted /proc on the host prevents it)".into(),
        ),
        _ => None,
    }
}

fn workspace_is_full(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statvfs is plain old data written by the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid C string and st is valid for writes.
    let ret = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    ret == 0 && (st.f_bavail == 0 || st.f_favail == 0)
}

fn signal_name(sig: i32) -> String {
    let names = [
        (1, "SIGHUP"),
        (2, "SIGINT"),
        (3, "SIGQUIT"),
        (4, "SIGILL"),
        (6, "SIGABRT"),
        (7, "SIGBUS"),
        (8, "SIGFPE"),
        (9, "SIGKILL"),
        (11, "SIGSEGV"),
        (13, "SIGPIPE"),
        (14, "SIGALRM"),
        (15, "SIGTERM"),
        (31, "SIGSYS"),
    ];
    names
        .iter()
        .find(|(n, _)| *n == sig)
        .map_or_else(|| format!("signal {sig}"), |(_, s)| (*s).to_string())
}

/// Classifies the outcome into exit code and fault (one fault, most telling first).
/// `sigsys_is_filter`: a SIGSYS death can only be the filter's doing (no listener reports kills).
fn finish(
    spec: &BoxSpec,
    mut o: Outcome,
    oom_kills: u64,
    peak: Option<u64>,
    ws_full: bool,
    sigsys_is_filter: bool,
) -> RunResult {
    let status = o.status.unwrap_or(o.pid1_status);
    let (exit_code, signal) = if libc::WIFEXITED(status) {
        (libc::WEXITSTATUS(status), None)
    } else if libc::WIFSIGNALED(status) {
        (128 + libc::WTERMSIG(status), Some(libc::WTERMSIG(status)))
    } else {
        (128 + libc::SIGKILL, Some(libc::SIGKILL))
    };
    let timeout = spec.timeout;
    let truncated = o.stdout.dropped > 0 || o.stderr.dropped > 0;
    let fault = if let Some((name, reason)) = o.escape.take() {
        Some(Fault {
            kind: FaultType::EscapeBlocked,
            reason,
            syscall: Some(name),
        })
    } else if sigsys_is_filter && signal == Some(libc::SIGSYS) {
        Some(Fault {
            kind: FaultType::EscapeBlocked,
            reason: "killed by the seccomp filter (a foreign-architecture or x32 system call)"
                .into(),
            syscall: None,
        })
    } else if oom_kills > 0 && exit_code != 0 {
        Some(Fault {
            kind: FaultType::Oom,
            reason: format!(
                "out of memory: the kernel killed a process at the {} cap ({oom_kills} OOM kill{})",
                spec.memory
                    .map_or_else(|| "memory".to_string(), |m| Human(m).to_string()),
                if oom_kills == 1 { "" } else { "s" }
            ),
            syscall: None,
        })
    } else if o.timed_out {
        Some(Fault {
            kind: FaultType::Timeout,
            reason: format!(
                "the wall-clock deadline of {} passed; the whole box was killed",
                fmt_duration(timeout)
            ),
            syscall: None,
        })
    } else if o.ended {
        Some(Fault {
            kind: FaultType::Killed,
            reason: "hull was told to end every box (its client went away); the box was killed"
                .into(),
            syscall: None,
        })
    } else if let Some(sig) = o.interrupted {
        Some(Fault {
            kind: FaultType::Killed,
            reason: format!("hull received {}; the box was killed", signal_name(sig)),
            syscall: None,
        })
    } else if let Some(e) = o.exec_failed {
        let prog = &spec.argv[0];
        let reason = if e.0 == libc::ENOENT {
            format!(
                "{prog}: not found in image `{}` (searched {})",
                spec.image_name,
                if prog.contains('/') {
                    prog.clone()
                } else {
                    "PATH".to_string()
                }
            )
        } else {
            format!(
                "{prog}: cannot be executed in image `{}`: {e}",
                spec.image_name
            )
        };
        Some(Fault {
            kind: FaultType::ExecFailed,
            reason,
            syscall: None,
        })
    } else if signal == Some(libc::SIGKILL) {
        Some(Fault {
            kind: FaultType::Killed,
            reason: "the program was killed by SIGKILL from outside the box".into(),
            syscall: None,
        })
    } else if ws_full {
        Some(Fault {
            kind: FaultType::WorkspaceFull,
            reason: "the workspace file system is full".into(),
            syscall: None,
        })
    } else if truncated {
        Some(Fault {
            kind: FaultType::OutputLimit,
            reason: format!(
                "output passed the {} cap per stream; {} discarded (the program kept running)",
                Human(spec.max_output),
                Human(o.stdout.dropped + o.stderr.dropped)
            ),
            syscall: None,
        })
    } else {
        None
    };
    let exit_code = if o.exec_failed.is_some() {
        127
    } else {
        exit_code
    };
    RunResult {
        stdout: String::from_utf8_lossy(&o.stdout.data).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr.data).into_owned(),
        exit_code,
        success: exit_code == 0
            && fault
                .as_ref()
                .is_none_or(|f| f.kind == FaultType::OutputLimit),
        fault,
        truncated,
        duration_ms: o.duration_ms,
        stats: Stats {
            peak_memory: peak,
            cpu_ms: o.rusage_cpu_ms,
            setup_us: o.setup_us,
        },
        warnings: Vec::new(),
        dropped_bytes: o.stdout.dropped + o.stderr.dropped,
    }
}

fn fmt_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

/// What is left of a box once its result is known: its exiting pid 1, its cgroup and its
/// temporary workspace. [`Teardown::finish`] (or dropping it) reaps and removes them.
pub struct Teardown {
    pid: Option<libc::pid_t>,
    cgroup: CgroupGuard,
    workspace: Option<Workspace>,
    tracing: Option<u64>,
}

impl Teardown {
    /// Waits for the box's pid 1 (and so every process of the box) to be gone, then removes the
    /// cgroup and the temporary workspace.
    pub fn finish(mut self) {
        self.run();
    }

    fn run(&mut self) {
        if let Some(pid) = self.pid.take() {
            // Pid 1 waits to be killed once the program has exited (its own exit is the box's
            // namespace teardown); it is our unreaped child, so the pid is still its.
            let _ = sys::kill(pid, libc::SIGKILL);
            let _ = sys::wait4(pid, false);
        }
        if let Some(t0) = self.tracing {
            eprintln!(
                "hull trace: supervisor {:>7} us  box reaped",
                (sys::monotonic_ns() - t0) / 1000
            );
        }
        if let Some(cg) = self.cgroup.0.take() {
            if !cg.is_empty() {
                cg.kill_all();
            }
            let _ = cg.remove();
        }
        self.workspace.take();
        if let Some(t0) = self.tracing.take() {
            eprintln!(
                "hull trace: supervisor {:>7} us  cgroup and workspace removed",
                (sys::monotonic_ns() - t0) / 1000
            );
        }
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        self.run();
    }
}

/// Removes the box's cgroup when dropped.
pub(crate) struct CgroupGuard(pub(crate) Option<hull_cgroup::BoxCgroup>);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        if let Some(cg) = self.0.take() {
            if !cg.is_empty() {
                cg.kill_all();
            }
            let _ = cg.remove();
        }
    }
}

/// The box's /workspace on the host; a temporary one is deleted when dropped.
pub(crate) struct Workspace {
    pub(crate) path: PathBuf,
    temporary: bool,
    /// A `--subids` box's id ranges: what it left owned by them is removed from a user
    /// namespace mapped the same way ([`crate::subids::remove_tree_mapped`]).
    subids: Option<(crate::subids::IdRange, crate::subids::IdRange)>,
}

impl Workspace {
    /// No directory: nothing to delete.
    pub(crate) fn none() -> Workspace {
        Workspace {
            path: PathBuf::new(),
            temporary: false,
            subids: None,
        }
    }

    pub(crate) fn temporary() -> Result<Workspace, BoxError> {
        let base = std::env::temp_dir();
        // The owner identity lets a later hull sweep this directory if we are SIGKILLed
        // (`leftovers`).
        let name = format!(
            "{}{}-XXXXXX",
            crate::leftovers::WORKSPACE_PREFIX,
            crate::owner::id()
        );
        let mut template = base.join(name).into_os_string().into_vec();
        template.push(0);
        // SAFETY: template is a NUL-terminated, writable buffer ending in XXXXXX.
        let p = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
        if p.is_null() {
            return Err(BoxError::Sys {
                what: "create a temporary workspace",
                errno: Errno::last(),
            });
        }
        template.pop();
        let ws = Workspace {
            path: PathBuf::from(std::ffi::OsString::from_vec(template)),
            temporary: true,
            subids: None,
        };
        // Host root's box maps its root to hull's range (see `remap`): give it the directory.
        if let Some((uid, gid)) = crate::remap::box_root() {
            std::os::unix::fs::chown(&ws.path, Some(uid), Some(gid)).map_err(|error| {
                BoxError::Io {
                    what: format!(
                        "give the temporary workspace {} to the box",
                        ws.path.display()
                    ),
                    error,
                }
            })?;
        }
        Ok(ws)
    }
}

use std::os::unix::ffi::OsStringExt;

impl Drop for Workspace {
    fn drop(&mut self) {
        if !self.temporary || crate::leftovers::remove_tree(&self.path) {
            return;
        }
        // A `--subids` box may have given files to ids of our range, which we cannot remove as
        // ourselves.
        let mapped = match &self.subids {
            Some((uids, gids)) => crate::subids::remove_tree_mapped(&self.path, uids, gids).err(),
            None => None,
        };
        if std::fs::symlink_metadata(&self.path).is_ok() {
            // The result has gone out already: stderr is the only place left to say it.
            eprintln!(
                "hull: warning: could not remove the temporary workspace {}{}; remove it by hand",
                self.path.display(),
                mapped.map(|e| format!(" ({e})")).unwrap_or_default()
            );
        }
    }
}
