//! Cgroups for hull's own helper processes that serve a box from outside it (a box's network
//! gateway, `hull __net`). The box's own caps do not cover them, and a box can make them work
//! for it (connections, DNS, TLS interception): their cgroup bounds what it can make them hold.
//! Named with this process's owner identity, as box cgroups are, so a sweep after a SIGKILLed
//! hull removes them ([`crate::leftovers`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use hull_cgroup::{BoxCgroup, Host, Limits};

static HOST: OnceLock<Option<(Host, Vec<std::path::PathBuf>)>> = OnceLock::new();
static NEXT: AtomicU64 = AtomicU64::new(0);

/// One helper process's cgroup; removed by [`HelperCgroup::remove`] once the process is reaped
/// (a cgroup with a task left in it cannot be removed: a sweep takes it later).
#[derive(Debug)]
pub struct HelperCgroup(BoxCgroup);

impl HelperCgroup {
    /// A new cgroup for one helper process, `what` naming its kind (a word of ASCII letters),
    /// its memory capped at `memory_bytes`; `None` where this host gives hull no cgroups (the
    /// helper then runs in hull's own cgroup, uncapped).
    pub fn create(what: &str, memory_bytes: u64) -> Option<HelperCgroup> {
        let (host, parents) = HOST
            .get_or_init(|| {
                Host::detect().ok().map(|h| {
                    let parents = h.box_parents();
                    (h, parents)
                })
            })
            .as_ref()?;
        crate::owner::record_cgroup_parents(parents);
        let name = format!(
            "{}{}-{what}-{}",
            crate::leftovers::CGROUP_PREFIX,
            crate::owner::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let limits = Limits {
            memory_bytes: Some(memory_bytes),
            ..Limits::default()
        };
        host.create(&name, &limits).ok().map(HelperCgroup)
    }

    /// Moves process `pid` (and the threads it starts later) into it.
    pub fn join(&self, pid: u32) -> bool {
        self.0.join_pid(pid).is_ok()
    }

    /// Whether its memory cap holds here (a host may give hull cgroups without the memory
    /// controller).
    pub fn memory_capped(&self) -> bool {
        self.0.enforced(hull_cgroup::Controller::Memory)
    }

    /// Removes it (its process reaped); best effort.
    pub fn remove(self) {
        let _ = self.0.remove();
    }
}
