//! A Sandbox session's boxes behind their gateways: a [`Backend`] that wraps the engine's and
//! serves every box with the gateway network (`Network::Gateway`) with a gateway of its own,
//! started on the box's TAP before its program runs and ended when the box is destroyed. The
//! Sandbox layer (`hull`) stays unaware of processes: every run site of a session (its calls,
//! its prewarmed boxes, its kernels) goes through here.

use std::path::Path;
use std::sync::Arc;

use hull::backend::{Backend, Destroy};
use hull::error::SandboxError;
use hull::files::Confined;
use hull_box::{BoxError, BoxSpec, Network, OutputSink, RunResult, TapHandler};

use super::wire::Start;

/// The engine's backend, each gateway box served with `start`'s gateway.
pub struct Served {
    inner: Arc<dyn Backend>,
    start: Start,
    /// A brokered session's CA directory on the host, for the session's life; each box's
    /// system bundles are covered from it.
    trust: Option<super::plan::BoxTrust>,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

impl Served {
    pub fn new(
        inner: Arc<dyn Backend>,
        start: Start,
        trust: Option<super::plan::BoxTrust>,
    ) -> Served {
        Served {
            inner,
            start,
            trust,
        }
    }
}

impl Backend for Served {
    fn check(&self, spec: &BoxSpec) -> Result<(), BoxError> {
        self.inner.check(spec)
    }

    fn run(
        &self,
        spec: &BoxSpec,
        sink: &mut dyn OutputSink,
    ) -> Result<(RunResult, Destroy), BoxError> {
        if spec.network != Network::Gateway {
            return self.inner.run(spec, sink);
        }
        let covered;
        let spec = match &self.trust {
            Some(t) => {
                let mut s = spec.clone();
                t.cover_bundles(&mut s);
                covered = s;
                &covered
            }
            None => spec,
        };
        let mut gateway = None;
        let mut take = super::plan::handler(&self.start, None, &mut gateway, |_| {});
        let (result, destroy) = self.inner.run_served(spec, sink, &mut take)?;
        drop(take);
        // The gateway lives until the box is destroyed (a kernel's box outlives its calls).
        let destroy: Destroy = Box::new(move || {
            drop(gateway);
            destroy();
        });
        Ok((result, destroy))
    }

    fn run_served(
        &self,
        spec: &BoxSpec,
        sink: &mut dyn OutputSink,
        tap: &mut TapHandler<'_>,
    ) -> Result<(RunResult, Destroy), BoxError> {
        self.inner.run_served(spec, sink, tap)
    }

    fn files(&self, workspace: &Path) -> Result<Confined, SandboxError> {
        self.inner.files(workspace)
    }
}
