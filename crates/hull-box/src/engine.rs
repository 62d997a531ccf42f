//! The engine behind a [`crate::Runtime`]: its process-wide state (the compiled seccomp filter,
//! the detected cgroup layout, the warm pools, the ending pipe) and one run's pipeline along the
//! data flow:
//!
//! ```text
//! spec -> resources (workspace, cgroup) -> plan -> launch -> Started -> watch -> Outcome
//!      -> verdict (+ cgroup evidence) -> RunResult, and a Teardown
//! ```
//!
//! A box set up ahead (`ready.rs`) joins the same pipeline at `Started`.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::assemble::{self, Context};
use crate::ending::{Ending, FORWARDED};
use crate::error::BoxError;
use crate::launch::{self, Launch, Started};
use crate::plan::{BoxPlan, IdMaps, Step};
use crate::proto::Message;
use crate::ready::{ReadyBox, ReadyBoxes, SetUpAhead};
use crate::resources::{limits_of, CgroupGuard, Resources, Teardown, Workspace, WorkspaceAhead};
use crate::result::RunResult;
use crate::spares::Spares;
use crate::spec::{BoxSpec, Network};
use crate::split::{LaunchPlan, Steps};
use crate::sys::child::Pid1Role;
use crate::sys::{self, Errno};
use crate::tap::{Handoff, Tap};
use crate::template::Templates;
use crate::trace::{Marks, TraceMap};
use crate::unenforced::{Reason, Unenforced, UnenforcedCaps};
use crate::verdict::{verdict, Evidence};
use crate::warm::WarmOptions;
use crate::watch::{OutputSink, RunOptions, Watch};

/// What a [`crate::Runtime`] holds, shared with its ready-box thread (which holds it weakly).
pub(crate) struct Engine {
    /// The host's cgroup layout, or why there is none (detected once; the error is shared by
    /// every box's warnings, hence the `Arc`).
    pub(crate) cgroups: Result<Arc<hull_cgroup::Host>, Arc<hull_cgroup::CgroupError>>,
    pub(crate) filter: hull_seccomp::Program,
    /// The kernel has seccomp user notification: the filter kills through a listener.
    listener: bool,
    rules: usize,
    /// Where box cgroups go (recorded in our lock file before the first is made there).
    pub(crate) cgroup_parents: Vec<PathBuf>,
    /// Numbers the cgroups this engine makes.
    counter: AtomicU64,
    started_ns: u64,
    /// Shared read-only skeletons, when kept ([`crate::WarmOptions::templates`]).
    pub(crate) templates: Option<Templates>,
    /// Cgroups and workspaces made ahead ([`crate::WarmOptions::spares`]).
    pub(crate) spares: Option<Spares>,
    /// Boxes set up ahead, waiting for their program ([`crate::WarmOptions::ready`]).
    pub(crate) ready: Option<ReadyBoxes>,
    /// Polled by every box's watch: [`crate::Runtime::end_every_box`].
    pub(crate) ending: Ending,
}

/// What a runtime is, for `{:?}`: the host it found and what it turned on. The warm pools
/// (templates, spares, ready boxes) hold processes and descriptors; only whether each is on is
/// shown.
impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("cgroups", &self.cgroups)
            .field("filter", &self.filter)
            .field("listener", &self.listener)
            .field("rules", &self.rules)
            .field("templates", &self.templates.is_some())
            .field("spares", &self.spares.is_some())
            .field("ready", &self.ready.is_some())
            .finish_non_exhaustive()
    }
}

/// A box ready to launch: the plan its first process runs, and what it holds on the host.
struct Prepared {
    plan: LaunchPlan,
    resources: Resources,
}

impl Engine {
    pub(crate) fn new() -> Result<Engine, BoxError> {
        crate::steplog::step("engine: new");
        let support = hull_seccomp::probe();
        crate::steplog::step("engine: seccomp probed");
        if !support.filter {
            return Err(BoxError::NoSeccomp);
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
        let filter = hull_seccomp::compile(rules, &opts)?;
        crate::steplog::step("engine: seccomp filter compiled");
        let cgroups = hull_cgroup::Host::detect().map(Arc::new).map_err(Arc::new);
        crate::steplog::step("engine: cgroups detected");
        let started_ns = sys::monotonic_ns() % 1_000_000_000_000;
        let cgroup_parents = cgroups
            .as_ref()
            .map(|h| h.box_parents())
            .unwrap_or_default();
        Ok(Engine {
            cgroups,
            cgroup_parents,
            filter,
            listener,
            rules: rules.len(),
            counter: AtomicU64::new(0),
            started_ns,
            templates: None,
            spares: None,
            ready: None,
            ending: Ending::new()?,
        })
        .inspect(|_| crate::steplog::step("engine: ready"))
    }

    /// Turns on the warm pools `warm` names (see [`crate::WarmOptions`]).
    pub(crate) fn keep_warm(&mut self, warm: WarmOptions) -> Result<(), BoxError> {
        if warm.ready && !warm.templates {
            // A box is set up ahead by entering a template (`set_up_ahead`).
            return Err(BoxError::Sys {
                what: "keep ready boxes without templates (WarmOptions: ready needs templates)",
                errno: Errno(libc::EINVAL),
            });
        }
        if warm.templates {
            self.templates = Some(Templates::new()?);
        }
        if warm.spares {
            self.spares = Some(Spares::new(
                self.cgroups.as_ref().ok().cloned(),
                self.started_ns,
            ));
        }
        if warm.ready {
            self.ready = Some(ReadyBoxes::new());
        }
        Ok(())
    }

    /// Removes box cgroups and temporary workspaces that SIGKILLed hulls left behind (see
    /// [`crate::leftovers`]).
    pub(crate) fn sweep_leftovers(&self) -> crate::leftovers::Swept {
        crate::leftovers::sweep(&self.cgroup_parents, &std::env::temp_dir())
    }

    /// The plan `spec` would run, without running it (`hull run --plan`).
    pub(crate) fn plan(&self, spec: &BoxSpec) -> Result<BoxPlan, BoxError> {
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
        if let Ok(h) = &self.cgroups {
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
        let keep = keep_caps(spec)?;
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

    /// [`crate::Runtime::run_detached`]: `shared` is this engine's own Arc (the ready-box
    /// thread keeps a weak one).
    pub(crate) fn run_detached(
        &self,
        shared: &Arc<Engine>,
        spec: &BoxSpec,
        opts: RunOptions,
        sink: &mut dyn OutputSink,
        ahead: Option<WorkspaceAhead>,
        handoff: Handoff<'_>,
    ) -> Result<(RunResult, Teardown), BoxError> {
        let tracing = crate::steplog::on();
        let marks = Marks::new(tracing);
        marks.mark("run requested");
        spec.validate()?;
        let keep = keep_caps(spec)?;
        gateway_possible(spec, keep, &handoff)?;
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
        let workspace = match &spec.workspace {
            Some(w) => Workspace::named(w.clone()),
            None => match ahead.and_then(WorkspaceAhead::take) {
                Some(w) => w,
                None => self.temporary_workspace()?,
            },
        };
        marks.mark("workspace created");
        let (cgroup, warnings) = self.box_cgroup(spec)?;
        let mut resources = Resources {
            workspace,
            cgroup,
            warnings,
        };
        marks.mark("cgroup created");
        let plan = self.assemble(spec, keep, &resources.workspace.path, &resources.cgroup)?;
        marks.mark("plan assembled");
        resources.workspace.subids = match plan.id_maps() {
            Some(IdMaps::Helpers { uids, gids }) => Some((uids.clone(), gids.clone())),
            _ => None,
        };
        // Holds the template's namespaces (and a pooled network namespace) until the box has
        // entered them.
        let (plan, mut entered) = match &self.templates {
            Some(t) => t.prepare(plan)?,
            None => (LaunchPlan::Fresh(plan), None),
        };
        let pooled_tap = entered.as_mut().and_then(|e| e.tap.take());
        marks.mark("plan prepared");
        let prepared = Prepared { plan, resources };
        marks.mark("launch");
        let handoff = (handoff, pooled_tap);
        let watched = self.launch_and_watch(spec, &prepared.plan, opts, sink, tracing, handoff);
        marks.mark("result known");
        let (outcome, pid) = watched?;
        Ok(self.conclude(spec, outcome, pid, prepared.resources, tracing))
    }

    /// Launches a fresh box (or one entering a template) to run `plan`, and watches it.
    fn launch_and_watch(
        &self,
        spec: &BoxSpec,
        plan: &LaunchPlan,
        opts: RunOptions,
        sink: &mut dyn OutputSink,
        tracing: bool,
        (mut handoff, pooled_tap): (Handoff<'_>, Option<std::os::fd::OwnedFd>),
    ) -> Result<(crate::outcome::Outcome, libc::pid_t), BoxError> {
        let trace = if tracing { TraceMap::new() } else { None };
        let sigfd = sys::block_signals_fd(&FORWARDED).map_err(|errno| BoxError::Sys {
            what: "block signals",
            errno,
        })?;
        let launch = Launch {
            plan,
            stdin: &spec.stdin,
            timeout: spec.timeout,
            filter: &self.filter,
            trace: trace.as_ref(),
            pid1: Pid1Role::Program,
        };
        let started = match launch.start() {
            Ok(s) => s,
            Err(e) => {
                sys::unblock_signals(&FORWARDED);
                return Err(e);
            }
        };
        let pid = started.pid;
        Marks::new(tracing).mark("box cloned");
        let timeout = i32::try_from(spec.timeout.as_millis()).unwrap_or(i32::MAX);
        if let Err(e) = hand_over(&started, plan, timeout, &mut handoff, pooled_tap) {
            launch::end_unreaped(pid);
            sys::unblock_signals(&FORWARDED);
            return Err(e);
        }
        let outcome = self.watch(spec, plan, opts, started, &sigfd, sink, tracing);
        sys::unblock_signals(&FORWARDED);
        if let Some(t) = &trace {
            crate::steplog::step("supervisor: watch ended");
            t.record(plan);
        }
        outcome.map(|o| (o, pid))
    }

    /// Watches a started box; a failed watch ends its pid 1.
    #[allow(clippy::too_many_arguments)]
    fn watch(
        &self,
        spec: &BoxSpec,
        plan: &dyn Steps,
        opts: RunOptions,
        started: Started,
        sigfd: &std::os::fd::OwnedFd,
        sink: &mut dyn OutputSink,
        tracing: bool,
    ) -> Result<crate::outcome::Outcome, BoxError> {
        let pid = started.pid;
        let watch = Watch {
            ending: self.ending.fd(),
            spec,
            opts,
            plan,
            tracing,
        };
        let outcome = watch.run(started, sigfd, sink);
        if outcome.is_err() {
            launch::end_unreaped(pid);
        }
        outcome
    }

    /// A fresh temporary workspace: a spare one when ready.
    fn temporary_workspace(&self) -> Result<Workspace, BoxError> {
        match self.spares.as_ref().and_then(Spares::workspace) {
            Some(w) => Ok(w),
            None => Workspace::temporary(),
        }
    }

    /// The box's cgroup (a spare one when ready) and the warnings for caps it cannot enforce;
    /// refused when `require_limits` is set and a cap is not enforced.
    fn box_cgroup(&self, spec: &BoxSpec) -> Result<(CgroupGuard, Vec<Unenforced>), BoxError> {
        let limits = limits_of(spec);
        let cgroup = match &self.cgroups {
            Ok(h) => match self.spares.as_ref().and_then(|s| s.cgroup(&limits)) {
                Some(cg) => Some(cg),
                None => {
                    crate::owner::record_cgroup_parents(&self.cgroup_parents);
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
            Err(_) => None,
        };
        let guard = CgroupGuard(cgroup);
        let unenforced: Vec<Unenforced> = match (&guard.0, &self.cgroups) {
            (Some(cg), _) => cg
                .unenforced()
                .iter()
                .map(|(controller, why)| Unenforced {
                    controller: *controller,
                    reason: Reason::Controller(why.clone()),
                })
                .collect(),
            (None, Err(error)) => hull_cgroup::Controller::ALL
                .into_iter()
                .filter(|c| limits.get(*c).is_some())
                .map(|controller| Unenforced {
                    controller,
                    reason: Reason::NoCgroup(Arc::clone(error)),
                })
                .collect(),
            (None, Ok(_)) => Vec::new(),
        };
        if spec.require_limits && !unenforced.is_empty() {
            return Err(BoxError::LimitsUnenforced(UnenforcedCaps(unenforced)));
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
        let procs = cgroup.procs_files();
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
                .map_or(crate::plan::STAGE, Templates::stage),
            remap: remap_of(spec),
            temporary_workspace: spec.workspace.is_none(),
        };
        build_plan(spec, &ctx)
    }

    /// The result of a watched box (the verdict on its outcome and the evidence left in its
    /// cgroup and workspace), and its teardown.
    fn conclude(
        &self,
        spec: &BoxSpec,
        outcome: crate::outcome::Outcome,
        pid: libc::pid_t,
        mut resources: Resources,
        tracing: bool,
    ) -> (RunResult, Teardown) {
        let st = outcome.status.unwrap_or(outcome.pid1_status);
        let failed = !(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0);
        let (oom_kills, peak_memory, workspace_full) = resources.evidence(failed);
        let exited = outcome.exited;
        let evidence = Evidence {
            oom_kills,
            peak_memory,
            workspace_full,
            sigsys_is_filter: !self.listener,
        };
        let mut result = verdict(spec, outcome, &evidence);
        result.warnings.splice(
            0..0,
            std::mem::take(&mut resources.warnings)
                .iter()
                .map(Unenforced::warning),
        );
        let teardown = Teardown::new(if exited { None } else { Some(pid) }, resources, tracing);
        (result, teardown)
    }

    /// Runs `spec` in `rb`, a box set up ahead, when its setup is exactly what `spec` asks for
    /// (the same plan, with its workspace and cgroup, up to the program; the same limits);
    /// otherwise None, and `rb` goes.
    fn run_ready(
        &self,
        mut rb: ReadyBox,
        spec: &BoxSpec,
        keep: u64,
        opts: RunOptions,
        sink: &mut dyn OutputSink,
    ) -> Result<Option<(RunResult, Teardown)>, BoxError> {
        if !rb.fits(spec) {
            return Ok(None);
        }
        let plan = self.assemble(spec, keep, &rb.workspace().path, rb.cgroup())?;
        let Some(go) = rb.go_for(&plan) else {
            return Ok(None);
        };
        let sigfd = sys::block_signals_fd(&FORWARDED).map_err(|errno| BoxError::Sys {
            what: "block signals",
            errno,
        })?;
        let Some(started) = rb.launch(&go) else {
            sys::unblock_signals(&FORWARDED);
            return Ok(None);
        };
        let pid = started.pid;
        // Pid 1 reports failures by its index in the plan it ran (the template-split one).
        let outcome = self.watch(spec, &rb.entry_plan, opts, started, &sigfd, sink, false);
        sys::unblock_signals(&FORWARDED);
        let resources = rb.hand_over();
        Ok(Some(self.conclude(spec, outcome?, pid, resources, false)))
    }
}

impl Engine {
    /// [`crate::Runtime::start_resident`]: the plan of a fresh box with a filter that kills
    /// (no listener: see `resident.rs`), launched with a pid 1 that serves requests.
    pub(crate) fn start_resident(
        &self,
        spec: &BoxSpec,
        mut handoff: Handoff<'_>,
    ) -> Result<crate::Resident, BoxError> {
        spec.validate()?;
        let keep = keep_caps(spec)?;
        gateway_possible(spec, keep, &handoff)?;
        let workspace = match &spec.workspace {
            Some(w) => Workspace::named(w.clone()),
            None => Workspace::temporary()?,
        };
        let (cgroup, warnings) = self.box_cgroup(spec)?;
        let filter = hull_seccomp::compile(
            hull_seccomp::default_policy(),
            &hull_seccomp::CompileOptions {
                kill_mode: hull_seccomp::KillMode::KillProcess,
                default_errno: u16::try_from(libc::ENOSYS).unwrap_or(38),
            },
        )?;
        let procs = cgroup.procs_files();
        let ctx = Context {
            uid: sys::geteuid(),
            gid: sys::getegid(),
            cgroup_procs: &procs,
            workspace: &workspace.path,
            seccomp_rules: self.rules,
            listener: false,
            keep_caps: keep,
            stage: crate::plan::STAGE,
            remap: remap_of(spec),
            temporary_workspace: spec.workspace.is_none(),
        };
        let mut fresh = build_plan(spec, &ctx)?;
        if spec.subids {
            // More than one id: pid 1 can run programs as other users (see `resident.rs`).
            fresh.pid1_keeps(crate::caps::RESIDENT_PID1);
        }
        let plan = LaunchPlan::Fresh(fresh);
        let launch = Launch {
            plan: &plan,
            stdin: &crate::spec::Stdin::Null,
            timeout: spec.timeout,
            filter: &filter,
            trace: None,
            pid1: Pid1Role::Resident,
        };
        let started = launch.start()?;
        let timeout = i32::try_from(spec.timeout.as_millis()).unwrap_or(i32::MAX);
        if let Err(e) = hand_over(&started, &plan, timeout, &mut handoff, None) {
            launch::end_unreaped(started.pid);
            return Err(e);
        }
        if let Err(e) = started.channel.expect_ready(timeout, &plan) {
            launch::end_unreaped(started.pid);
            return Err(e);
        }
        let resources = Resources {
            workspace,
            cgroup,
            warnings,
        };
        Ok(crate::Resident::new(
            started.pid,
            started.channel,
            resources,
            plan,
        ))
    }
}

impl SetUpAhead for Engine {
    /// Sets up a box for `spec` and leaves its pid 1 waiting for the program (see `ready.rs`).
    fn set_up_ahead(&self, spec: &BoxSpec) -> Result<ReadyBox, BoxError> {
        spec.validate()?;
        let keep = keep_caps(spec)?;
        let Some(templates) = &self.templates else {
            return Err(BoxError::Sys {
                what: "set up a box ahead without templates",
                errno: Errno(libc::EINVAL),
            });
        };
        let workspace = self.temporary_workspace()?;
        let (cgroup, warnings) = self.box_cgroup(spec)?;
        let plan = self.assemble(spec, keep, &workspace.path, &cgroup)?;
        let (entry_plan, entered) = templates.prepare(plan.clone())?;
        if entered.is_none() {
            return Err(BoxError::Sys {
                what: "set up a box ahead without a template",
                errno: Errno(libc::EINVAL),
            });
        }
        let launch = Launch {
            plan: &entry_plan,
            stdin: &spec.stdin,
            timeout: spec.timeout,
            filter: &self.filter,
            trace: None,
            pid1: Pid1Role::Ready,
        };
        let started = launch.start()?;
        let mut rb = ReadyBox::new(
            plan,
            entry_plan,
            limits_of(spec),
            started,
            Resources {
                workspace,
                cgroup,
                warnings,
            },
            entered,
        );
        // Its setup runs to the end: Ready, with the seccomp listener.
        rb.await_setup(10_000)?;
        Ok(rb)
    }
}

/// Refuses a gateway box that could not get its network, before anything is made: one keeping
/// a capability over its link, nobody to take its TAP, or a `/dev/net/tun` this user cannot
/// open (the box's own open would fail the same way, later). Never a fallback to another
/// network.
fn gateway_possible(spec: &BoxSpec, keep: u64, handoff: &Handoff<'_>) -> Result<(), BoxError> {
    if spec.network != Network::Gateway {
        return Ok(());
    }
    if keep & crate::caps::GATEWAY_REFUSED != 0 {
        return Err(crate::spec::SpecError::Invalid {
            field: crate::field::SpecField::CapAdd,
            why: "NET_ADMIN and NET_RAW cannot be kept with the gateway network: the box would reconfigure its link or open raw sockets on it".into(),
        }
        .into());
    }
    if handoff.tap.is_none() {
        return Err(BoxError::NoTapHandler);
    }
    crate::tap::probe().map_err(|error| BoxError::TunUnavailable { error })
}

/// Hands the descriptors a started box's setup sends, in the plan's order, to the caller's
/// `handoff`: a FUSE root's device (its daemon must answer before pid 1's setup goes on) and a
/// gateway box's TAP (pid 1 waits for `GatewayReady`, sent once the handler returned, so the
/// program never starts without its gateway), or, for a box in a pooled network namespace
/// (`AwaitGateway`), the TAP the pool made there (`pooled_tap`). An error leaves ending the box
/// to the caller.
fn hand_over(
    started: &Started,
    plan: &LaunchPlan,
    timeout_ms: i32,
    handoff: &mut Handoff<'_>,
    mut pooled_tap: Option<std::os::fd::OwnedFd>,
) -> Result<(), BoxError> {
    let mut give = |fd| -> Result<(), BoxError> {
        let Some(take) = handoff.tap.as_mut() else {
            return Err(BoxError::NoTapHandler);
        };
        take(Tap {
            fd,
            pid: started.pid,
        })
        .map_err(|error| BoxError::Gateway { error })?;
        started
            .channel
            .send(Message::GatewayReady)
            .map_err(|errno| BoxError::Sys {
                what: "tell the box its gateway is ready",
                errno,
            })
    };
    for step in plan.pid1_steps() {
        match step {
            Step::MountFuse { .. } => match started.channel.wait(timeout_ms)? {
                (Message::FuseDevice, Some(dev)) => match handoff.fuse.as_mut() {
                    Some(serve) => serve(started.pid, dev).map_err(|error| BoxError::Io {
                        what: "serve the writable root's FUSE file system".into(),
                        error,
                    })?,
                    None => {
                        return Err(BoxError::Internal(
                            "a writable root mounted by the box's FUSE has nobody to serve it",
                        ))
                    }
                },
                (m, _) => return Err(crate::channel::unexpected(plan, "FuseDevice", m)),
            },
            Step::Tap { .. } => match started.channel.wait(timeout_ms)? {
                (Message::TapDevice, Some(fd)) => give(fd)?,
                (m, _) => return Err(crate::channel::unexpected(plan, "TapDevice", m)),
            },
            Step::AwaitGateway => match pooled_tap.take() {
                Some(fd) => give(fd)?,
                None => {
                    return Err(BoxError::Internal(
                        "a box in a pooled network namespace came without its TAP",
                    ))
                }
            },
            _ => {}
        }
    }
    Ok(())
}

/// The capabilities `spec` keeps.
fn keep_caps(spec: &BoxSpec) -> Result<u64, BoxError> {
    Ok(crate::caps::resolve_for(
        &spec.cap_add,
        &spec.cap_drop,
        crate::remap::box_root().is_some(),
    )
    .map_err(crate::spec::SpecError::from)?)
}

/// The host ids host root's box maps to (see [`crate::remap`]): with `--subids`, the whole
/// range.
fn remap_of(spec: &BoxSpec) -> Option<assemble::Remap> {
    crate::remap::box_root().map(|(uid, gid)| assemble::Remap {
        uid,
        gid,
        count: if spec.subids { crate::remap::COUNT } else { 1 },
    })
}

/// The plan of `spec` in `ctx`, its id maps left to the uidmap helpers with `--subids` (host
/// root's are written by the supervisor, see [`crate::remap`]).
fn build_plan(spec: &BoxSpec, ctx: &Context<'_>) -> Result<BoxPlan, BoxError> {
    let mut plan = assemble::build(spec, ctx)?;
    if let Some(u) = &spec.user {
        plan.run_as(u.clone());
    }
    if spec.subids && ctx.remap.is_none() {
        let (uids, gids) = crate::subids::lookup(ctx.uid, ctx.gid)?;
        plan.use_subids(uids, gids);
    }
    Ok(plan)
}
