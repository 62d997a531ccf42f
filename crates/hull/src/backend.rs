//! The seam between the Sandbox layer and an isolation engine. A [`Sandbox`](crate::Sandbox)
//! needs four things of one: to check a box's spec before anything is made, to create a box and
//! run its program to the end (output streamed to a sink), to destroy the box afterwards (off
//! the caller's path), and file access to the workspace its boxes share. Today's engine, the
//! namespace [`Runtime`] of hull-box, implements it; a microVM tier implements the same trait
//! and the front ends (`hull serve`, `hull mcp`, the SDKs) do not change.
//!
//! The trait speaks the engine's vocabulary ([`BoxSpec`], [`RunResult`], [`BoxError`]): a spec
//! says what a box must be (image root, mounts, limits, program), not how a backend makes it.

use std::path::Path;

use hull_box::{
    BoxError, BoxSpec, Handoff, OutputSink, RunOptions, RunResult, Runtime, TapHandler,
};

use crate::error::SandboxError;
use crate::files::Confined;

/// Destroys one box: ends what is left of it and removes what it used on the host.
pub type Destroy = Box<dyn FnOnce() + Send>;

/// An isolation engine the Sandbox layer runs its boxes on.
pub trait Backend: Send + Sync {
    /// Refuses a spec this backend would not run (unsafe or impossible), creating nothing.
    fn check(&self, spec: &BoxSpec) -> Result<(), BoxError>;

    /// Creates a box for `spec` and runs its program to the end, streaming output to `sink` as
    /// it arrives (the result captures it too). The result is returned as soon as it is known;
    /// the box is destroyed when the returned [`Destroy`] is called.
    fn run(
        &self,
        spec: &BoxSpec,
        sink: &mut dyn OutputSink,
    ) -> Result<(RunResult, Destroy), BoxError>;

    /// [`Backend::run`] for a box with the gateway network (`Network::Gateway`): `tap` takes
    /// the box's link (here a TAP) before its program starts, typically handing it to the
    /// box's gateway process; an error from it ends the box.
    fn run_served(
        &self,
        spec: &BoxSpec,
        sink: &mut dyn OutputSink,
        tap: &mut TapHandler<'_>,
    ) -> Result<(RunResult, Destroy), BoxError>;

    /// Host-side access to `workspace`, the directory this backend's boxes see at /workspace.
    fn files(&self, workspace: &Path) -> Result<Confined, SandboxError>;

    /// The boundary this backend's boxes have. A VM's boxes take seconds to start where KVM
    /// cannot run them and reach the host only through their agent, so the Sandbox layer
    /// neither probes nor prewarms them and starts no kernel in them (yet).
    fn isolation(&self) -> hull_api::Isolation {
        hull_api::Isolation::Namespace
    }

    /// Starts what this backend keeps ahead for boxes like `base` (a Sandbox session's spec,
    /// before its program), if it keeps anything: the microVM tier boots guests ahead
    /// (`prewarm`). The namespace tier's prewarmed boxes are the Sandbox layer's own.
    fn prewarm(&self, base: &BoxSpec) {
        let _ = base;
    }
}

/// Boxes in fresh namespaces, seccomp and cgroups on this kernel (hull-box).
impl Backend for Runtime {
    fn check(&self, spec: &BoxSpec) -> Result<(), BoxError> {
        spec.validate().map_err(BoxError::Spec)
    }

    fn run(
        &self,
        spec: &BoxSpec,
        sink: &mut dyn OutputSink,
    ) -> Result<(RunResult, Destroy), BoxError> {
        let (result, teardown) = self.run_detached(spec, RunOptions { capture: true }, sink)?;
        Ok((result, Box::new(move || teardown.finish())))
    }

    fn run_served(
        &self,
        spec: &BoxSpec,
        sink: &mut dyn OutputSink,
        tap: &mut TapHandler<'_>,
    ) -> Result<(RunResult, Destroy), BoxError> {
        let handoff = Handoff {
            fuse: None,
            tap: Some(tap),
        };
        let (result, teardown) =
            self.run_detached_with(spec, RunOptions { capture: true }, sink, None, handoff)?;
        Ok((result, Box::new(move || teardown.finish())))
    }

    /// The workspace is a host directory bound into each box; the host side opens it once and
    /// resolves every path beneath that descriptor, never following what a box planted.
    fn files(&self, workspace: &Path) -> Result<Confined, SandboxError> {
        Confined::open(workspace)
    }
}
