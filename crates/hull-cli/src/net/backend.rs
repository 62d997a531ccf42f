//! A Sandbox session's boxes behind their gateways: a [`Backend`] that wraps the engine's and
//! serves every box with the gateway network (`Network::Gateway`) with a gateway of its own,
//! started on the box's TAP before its program runs and ended when the box is destroyed. The
//! Sandbox layer (`hull`) stays unaware of processes: every run site of a session (its calls,
//! its prewarmed boxes, its kernels) goes through here. The session's policy can be replaced
//! while it lives ([`Served::set_policy`]): its running gateways and every later one judge by
//! the new one.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use hull::backend::{Backend, Destroy};
use hull::error::SandboxError;
use hull::files::Confined;
use hull_box::{BoxError, BoxSpec, Network, OutputSink, RunResult, TapHandler};

use super::spawn::GatewayProcess;
use super::wire::{PolicySpec, Start};

/// One box's gateway, shared by the box's end (its `Destroy`) and the session's list of live
/// gateways (which a policy change reaches).
type Live = Arc<Mutex<Option<GatewayProcess>>>;

/// The policy every new gateway starts with, and how many times it was replaced (a gateway
/// started from an older one gets the current one as soon as it is listed).
#[derive(Debug)]
struct Current {
    start: Start,
    version: u64,
}

/// The engine's backend, each gateway box served with `start`'s gateway.
pub struct Served {
    inner: Arc<dyn Backend>,
    current: Mutex<Current>,
    live: Mutex<Vec<Weak<Mutex<Option<GatewayProcess>>>>>,
    /// Held through a whole policy change, so two changes at once cannot leave the running
    /// gateways on one and later ones on the other.
    changing: Mutex<()>,
    /// A brokered session's CA directory on the host, for the session's life; each box's
    /// system bundles are covered from it.
    trust: Option<super::plan::BoxTrust>,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("current", &self.current)
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
            current: Mutex::new(Current { start, version: 0 }),
            live: Mutex::new(Vec::new()),
            changing: Mutex::new(()),
            trust,
        }
    }

    /// Replaces the session's policy: every running gateway of it judges its box's next DNS
    /// queries and connections by `policy`, and every gateway started later starts with it.
    /// Returns how many running gateways took it; the first that could not is the error (the
    /// others still took it).
    pub fn set_policy(&self, policy: &PolicySpec) -> Result<usize, String> {
        let _one_at_a_time = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        {
            let mut c = self.current.lock().unwrap_or_else(PoisonError::into_inner);
            c.start.policy = policy.clone();
            c.version += 1;
        }
        let live: Vec<Live> = {
            let mut l = self.live.lock().unwrap_or_else(PoisonError::into_inner);
            l.retain(|w| w.strong_count() > 0);
            l.iter().filter_map(Weak::upgrade).collect()
        };
        let mut told = 0;
        let mut first_error = None;
        for g in live {
            let mut g = g.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(g) = g.as_mut() else { continue };
            match g.set_policy(policy) {
                Ok(()) => told += 1,
                Err(e) => {
                    first_error.get_or_insert_with(|| hull_api::Chain(&e).to_string());
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(told),
        }
    }

    /// Lists a box's gateway (started from the policy of `version`), and gives it the current
    /// policy if it was replaced meanwhile; a gateway that cannot take it fails its box's start
    /// (it would serve an older policy than the caller set).
    fn list(&self, gateway: &Live, version: u64) -> std::io::Result<()> {
        let _one_at_a_time = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(gateway));
        let (policy, now) = {
            let c = self.current.lock().unwrap_or_else(PoisonError::into_inner);
            (c.start.policy.clone(), c.version)
        };
        if now != version {
            if let Some(g) = gateway
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_mut()
            {
                g.set_policy(&policy)
                    .map_err(|e| std::io::Error::other(hull_api::Chain(&e).to_string()))?;
            }
        }
        Ok(())
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
        let (start, version) = {
            let c = self.current.lock().unwrap_or_else(PoisonError::into_inner);
            (c.start.clone(), c.version)
        };
        // Listed as soon as it serves: a kernel's or a prewarmed box's run lasts the box's life.
        let gateway: Live = Arc::new(Mutex::new(None));
        let mut take = super::plan::serving(&start, None, false, |g| {
            *gateway.lock().unwrap_or_else(PoisonError::into_inner) = Some(g);
            self.list(&gateway, version)
        });
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

    /// The wrapped backend's: a VM session behind gateways is still a VM session.
    fn isolation(&self) -> hull_api::Isolation {
        self.inner.isolation()
    }
}
