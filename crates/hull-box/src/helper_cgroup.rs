//! Cgroups for hull's own helper processes that serve a box from outside it (a box's network
//! gateway, `hull __net`). The box's own caps do not cover them, and a box can make them work
//! for it (connections, DNS, TLS interception): their cgroup bounds what it can make them hold.
//! Named with this process's owner identity, as box cgroups are, so a sweep after a SIGKILLed
//! hull removes them ([`crate::leftovers`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

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

    /// Removes it (its process reaped); best effort.
    pub fn remove(self) {
        let _ = self.0.remove();
    }
}

/// A helper process moved into a cgroup of its own off its caller's path: making a cgroup takes
/// milliseconds on this project's hosts (measured: a gateway box's start went from 4.8 to
/// 17 ms when it waited for it), so a thread makes it and moves the process in once it exists.
/// What the process holds before then stays charged where it was (hull's own cgroup): a few
/// milliseconds of a box's traffic.
#[derive(Debug, Clone)]
pub struct Capping(Arc<Mutex<Capped>>);

#[derive(Debug)]
enum Capped {
    /// Its cgroup is being made.
    Pending,
    Joined(HelperCgroup),
    /// Reaped, or no cgroup could be made or joined.
    Ended,
}

impl Capping {
    /// Starts moving process `pid` into a new cgroup (see [`HelperCgroup::create`]).
    pub fn start(what: &'static str, memory_bytes: u64, pid: u32) -> Capping {
        let state = Arc::new(Mutex::new(Capped::Pending));
        let theirs = Arc::clone(&state);
        let made = std::thread::Builder::new()
            .name("hull-helper-cg".into())
            .spawn(move || {
                let cg = HelperCgroup::create(what, memory_bytes);
                let mut st = crate::warm::lock(&theirs);
                match (std::mem::replace(&mut *st, Capped::Ended), cg) {
                    (Capped::Pending, Some(cg)) if cg.join(pid) => *st = Capped::Joined(cg),
                    (_, Some(cg)) => cg.remove(),
                    (_, None) => {}
                }
            });
        if made.is_err() {
            *crate::warm::lock(&state) = Capped::Ended;
        }
        Capping(state)
    }

    /// The process was reaped: its cgroup is removed (now, or by the thread once made).
    pub fn end(&self) {
        if let Capped::Joined(cg) =
            std::mem::replace(&mut *crate::warm::lock(&self.0), Capped::Ended)
        {
            cg.remove();
        }
    }
}
