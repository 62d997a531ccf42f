//! [`Runtime`]: what front ends hold to run boxes. A facade over the engine (`engine.rs`), which
//! owns the run pipeline; this module only says what a caller may ask.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::error::BoxError;
use crate::plan::BoxPlan;
use crate::ready::ReadyBoxes;
use crate::resources::{Teardown, WorkspaceAhead};
use crate::result::RunResult;
use crate::spares::Spares;
use crate::spec::{BoxSpec, FuseServer};
use crate::tap::Handoff;
use crate::template::Templates;
use crate::warm::{WarmOptions, WarmStats};
use crate::watch::{OutputSink, RunOptions};

/// Process-wide state: the detected cgroup layout and the compiled seccomp filter. Create once,
/// run many boxes (concurrently from several threads, too).
#[derive(Debug)]
pub struct Runtime {
    engine: Arc<Engine>,
}

impl Runtime {
    /// A Runtime that keeps no warm pool: every box is built from scratch (`hull run`).
    pub fn new() -> Result<Runtime, BoxError> {
        Runtime::with_warm(WarmOptions::default())
    }

    /// A Runtime that keeps the warm pools `warm` turns on (see [`WarmOptions`]; `ready`
    /// without `templates` is refused). Each pool's thread starts when a box first needs it.
    pub fn with_warm(warm: WarmOptions) -> Result<Runtime, BoxError> {
        let mut engine = Engine::new()?;
        engine.keep_warm(warm)?;
        Ok(Runtime {
            engine: Arc::new(engine),
        })
    }

    /// What the warm pools have done and hold (see [`WarmStats`]).
    pub fn warm_stats(&self) -> WarmStats {
        let e = &self.engine;
        let (spare_cgroups, spare_workspaces) = e.spares.as_ref().map_or((0, 0), Spares::used);
        WarmStats {
            templates: e.templates.as_ref().map_or(0, Templates::len),
            pooled_nets: e.templates.as_ref().map_or(0, Templates::pooled_nets),
            pooled_users: e.templates.as_ref().map_or(0, Templates::pooled_users),
            spare_cgroups,
            spare_workspaces,
            spare_paths: e.spares.as_ref().map_or_else(Vec::new, Spares::paths),
            ready_used: e.ready.as_ref().map_or(0, ReadyBoxes::used),
            ready_pids: e.ready.as_ref().map_or_else(Vec::new, ReadyBoxes::pids),
        }
    }

    /// Waits up to `timeout` for the boxes set up ahead to be complete for the last shape run
    /// (for benchmarks: so that measured runs do not share the CPU with that work); true if
    /// they are, or none are being set up.
    pub fn settle(&self, timeout: Duration) -> bool {
        self.engine.ready.as_ref().is_none_or(|r| r.settle(timeout))
    }

    /// Kills every box this Runtime is running, and any it starts from now on, at once; their
    /// calls return with a `killed` fault saying so. For a front end whose client is gone
    /// (`hull serve` at the end of its input): nobody waits for those results, so the boxes
    /// should not run on to their deadlines. Teardowns still remove their cgroups and
    /// workspaces as usual.
    pub fn end_every_box(&self) {
        self.engine.ending.end_all();
    }

    /// Removes box cgroups and temporary workspaces that SIGKILLed hulls left behind (see
    /// [`crate::leftovers`]). Reads the temporary directory, so long-lived front ends call it
    /// once, off the hot path.
    pub fn sweep_leftovers(&self) -> crate::leftovers::Swept {
        self.engine.sweep_leftovers()
    }

    /// [`Runtime::sweep_leftovers`] on a helper thread, beside whatever this thread does next
    /// (a one-shot `hull run` sets up and runs its box meanwhile; a sweep only ever takes what
    /// a dead hull left, so it cannot race a live box). [`Sweep::finish`] waits for it.
    pub fn sweep_leftovers_in_background(&self) -> Sweep {
        let parents = self.engine.cgroup_parents.clone();
        let temp = std::env::temp_dir();
        let thread = crate::ending::spawn_helper("hull-sweep", move || {
            crate::leftovers::sweep(&parents, &temp);
            crate::steplog::step("sweep: leftovers swept");
        });
        Sweep {
            thread,
            engine: Arc::clone(&self.engine),
            pending: true,
        }
    }

    /// The detected cgroup layout, for `hull doctor`.
    pub fn cgroups(&self) -> Result<&hull_cgroup::Host, &hull_cgroup::CgroupError> {
        self.engine.cgroups.as_deref().map_err(|e| &**e)
    }

    pub fn seccomp_program(&self) -> &hull_seccomp::Program {
        &self.engine.filter
    }

    /// The plan `spec` would run, without running it (`hull run --plan`).
    pub fn plan(&self, spec: &BoxSpec) -> Result<BoxPlan, BoxError> {
        self.engine.plan(spec)
    }

    /// Starts `spec` as a resident box (see [`crate::Resident`]): set up like a fresh box, its
    /// pid 1 then starts programs on request until the returned handle is dropped. The spec's
    /// own program is never run; its timeout bounds only the setup.
    pub fn start_resident(&self, spec: &BoxSpec) -> Result<crate::Resident, BoxError> {
        self.engine.start_resident(spec, Handoff::default())
    }

    /// [`Runtime::start_resident`] whose setup hands descriptors out (see [`Handoff`]): a FUSE
    /// root's device, a gateway box's TAP ([`crate::Network::Gateway`]: its handler is
    /// required). Each handler is called before the box is reported ready; an error from one
    /// ends the box and is this call's error.
    pub fn start_resident_with(
        &self,
        spec: &BoxSpec,
        handoff: Handoff<'_>,
    ) -> Result<crate::Resident, BoxError> {
        self.engine.start_resident(spec, handoff)
    }

    /// [`Runtime::start_resident`] for a spec whose writable root's FUSE file system the box
    /// mounts itself (`WritableRoot::fuse_in_box`): `serve` is called with pid 1's pid and the
    /// `/dev/fuse` descriptor as soon as the mount exists, and must start its daemon (pid 1's
    /// setup waits for the daemon's answers).
    pub fn start_resident_serving(
        &self,
        spec: &BoxSpec,
        serve: &mut FuseServer<'_>,
    ) -> Result<crate::Resident, BoxError> {
        self.engine.start_resident(
            spec,
            Handoff {
                fuse: Some(serve),
                tap: None,
            },
        )
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

    /// [`Runtime::run`] with the box's hand-offs (see [`Handoff`]): a gateway box
    /// ([`crate::Network::Gateway`]) needs `handoff.tap`, called with the box's TAP before its
    /// program starts; an error from it ends the box ([`BoxError::Gateway`]). The TAP is the
    /// handler's to close (closing the last copy takes the kernel ~23 ms: do it off the hot
    /// path); nothing here waits for it.
    pub fn run_with(
        &self,
        spec: &BoxSpec,
        opts: RunOptions,
        sink: &mut dyn OutputSink,
        handoff: Handoff<'_>,
    ) -> Result<RunResult, BoxError> {
        let (result, teardown) = self.run_detached_with(spec, opts, sink, None, handoff)?;
        teardown.finish();
        Ok(result)
    }

    /// [`Runtime::run_detached`] (with a temporary workspace made ahead, when given) and the
    /// box's hand-offs, as [`Runtime::run_with`].
    pub fn run_detached_with(
        &self,
        spec: &BoxSpec,
        opts: RunOptions,
        sink: &mut dyn OutputSink,
        ahead: Option<WorkspaceAhead>,
        handoff: Handoff<'_>,
    ) -> Result<(RunResult, Teardown), BoxError> {
        self.engine
            .run_detached(&self.engine, spec, opts, sink, ahead, handoff)
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
        self.engine
            .run_detached(&self.engine, spec, opts, sink, None, Handoff::default())
    }

    /// [`Runtime::run_detached`] with a temporary workspace made ahead, used when `spec` asks
    /// for a temporary one (and removed otherwise).
    pub fn run_detached_ahead(
        &self,
        spec: &BoxSpec,
        opts: RunOptions,
        sink: &mut dyn OutputSink,
        ahead: WorkspaceAhead,
    ) -> Result<(RunResult, Teardown), BoxError> {
        self.engine.run_detached(
            &self.engine,
            spec,
            opts,
            sink,
            Some(ahead),
            Handoff::default(),
        )
    }
}

/// A sweep of leftovers under way ([`Runtime::sweep_leftovers_in_background`]); waited for when
/// finished or dropped.
#[derive(Debug)]
pub struct Sweep {
    thread: Option<std::thread::JoinHandle<()>>,
    engine: Arc<Engine>,
    /// Not waited for yet.
    pending: bool,
}

impl Sweep {
    /// Waits for the sweep (made here, now, when its thread could not be started).
    pub fn finish(mut self) {
        self.wait();
    }

    fn wait(&mut self) {
        if !std::mem::take(&mut self.pending) {
            return;
        }
        match self.thread.take() {
            Some(t) => {
                let _ = t.join();
            }
            None => {
                self.engine.sweep_leftovers();
            }
        }
    }
}

impl Drop for Sweep {
    fn drop(&mut self) {
        self.wait();
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // The ready-box thread holds only a weak reference; the boxes it made go now.
        if let Some(r) = &self.engine.ready {
            r.stop();
        }
    }
}
