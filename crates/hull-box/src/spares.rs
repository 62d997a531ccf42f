//! Spare per-box resources made ahead of time by a background thread ("hull-spares"): box
//! cgroups, created with the limits the last box asked for, and temporary workspaces. A box takes
//! one of each instead of making them on its start path (~0.1 ms of mkdir and limit writes, and
//! a mkdtemp), and each spare is used by exactly one box, so boxes stay as fresh as before: an
//! empty cgroup with zeroed counters, an empty 0700 directory.
//!
//! Only long-lived runtimes keep spares ([`crate::WarmOptions::spares`]); a one-shot
//! `hull run` would only make resources it never uses. Spares left when the runtime goes are
//! removed; those of a SIGKILLed hull carry its owner identity in their names (`owner`), so
//! `leftovers` sweeps them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hull_cgroup::{BoxCgroup, Host, Limits};

use crate::poison::lock;
use crate::resources::Workspace;
use crate::warm::Worker;

/// How many of each kind are kept ready: two covers a box starting while the last one's
/// replacement is still being made.
const KEEP: usize = 2;

pub(crate) struct Spares {
    pool: Arc<SparePool>,
}

struct SparePool {
    host: Option<Arc<Host>>,
    /// Names spare cgroups like the runtime's own (`hull-<owner id>-s<seq>-<start>`).
    started_ns: u64,
    seq: AtomicU64,
    state: Mutex<SpareStock>,
    /// Boxes that got a spare cgroup, and a spare workspace (for tests and `hull bench`).
    used: [AtomicU64; 2],
    /// The thread, joined on drop so that no spare is left half made at exit.
    worker: Worker,
}

#[derive(Default)]
struct SpareStock {
    /// The limits spare cgroups are made with: the last ones a box asked for.
    limits: Option<Limits>,
    cgroups: Vec<BoxCgroup>,
    workspaces: Vec<Workspace>,
    /// Making a spare failed: stop trying (boxes make their own, and report the error).
    cgroups_failed: bool,
    workspaces_failed: bool,
}

impl Spares {
    pub(crate) fn new(host: Option<Arc<Host>>, started_ns: u64) -> Spares {
        let pool = SparePool {
            host,
            started_ns,
            seq: AtomicU64::new(0),
            state: Mutex::new(SpareStock::default()),
            used: [AtomicU64::new(0), AtomicU64::new(0)],
            worker: Worker::default(),
        };
        Spares {
            pool: Arc::new(pool),
        }
    }

    /// A fresh cgroup made with exactly `limits`, if one is ready. Otherwise the next spares are
    /// made with these limits.
    pub(crate) fn cgroup(&self, limits: &Limits) -> Option<BoxCgroup> {
        let (taken, stale) = {
            let mut st = lock(&self.pool.state);
            if st.limits == Some(*limits) {
                (st.cgroups.pop(), Vec::new())
            } else {
                st.limits = Some(*limits);
                (None, std::mem::take(&mut st.cgroups))
            }
        };
        // Spares made for other limits: removed here, outside the lock (never used, so empty).
        for cg in stale {
            let _ = cg.remove();
        }
        self.kick();
        if taken.is_some() {
            self.pool.used[0].fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// A fresh, empty temporary workspace, if one is ready.
    pub(crate) fn workspace(&self) -> Option<Workspace> {
        let taken = lock(&self.pool.state).workspaces.pop();
        self.kick();
        if taken.is_some() {
            self.pool.used[1].fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// How many boxes got a spare cgroup, and a spare workspace.
    pub(crate) fn used(&self) -> (u64, u64) {
        (
            self.pool.used[0].load(Ordering::Relaxed),
            self.pool.used[1].load(Ordering::Relaxed),
        )
    }

    /// The directories of the spares ready now: cgroup directories, then workspaces.
    pub(crate) fn paths(&self) -> Vec<PathBuf> {
        let st = lock(&self.pool.state);
        st.cgroups
            .iter()
            .flat_map(BoxCgroup::paths)
            .chain(st.workspaces.iter().map(|w| w.path.clone()))
            .collect()
    }

    /// How many of each the thread holds now (for tests).
    #[cfg(test)]
    fn ready(&self) -> (usize, usize) {
        let st = lock(&self.pool.state);
        (st.cgroups.len(), st.workspaces.len())
    }

    fn kick(&self) {
        // Without the thread there are no spares: boxes make their own.
        self.pool.worker.start_once("hull-spares", || {
            let pool = Arc::clone(&self.pool);
            move || keep_spares_ready(&pool)
        });
        self.pool.worker.wake();
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        self.pool.worker.stop();
        self.pool.worker.join();
        // What is ready goes now (one the thread was making went when it saw `stop`).
        let st = std::mem::take(&mut *lock(&self.pool.state));
        for cg in st.cgroups {
            let _ = cg.remove();
        }
        drop(st.workspaces);
    }
}

enum Job {
    Cgroup(Limits),
    Workspace,
}

fn keep_spares_ready(pool: &SparePool) {
    loop {
        let job = {
            let mut st = lock(&pool.state);
            loop {
                if pool.worker.stopping() {
                    return;
                }
                if let Some(limits) = st.limits.filter(|_| {
                    pool.host.is_some() && !st.cgroups_failed && st.cgroups.len() < KEEP
                }) {
                    break Job::Cgroup(limits);
                }
                if !st.workspaces_failed && st.workspaces.len() < KEEP {
                    break Job::Workspace;
                }
                st = pool.worker.sleep(st);
            }
        };
        match job {
            Job::Cgroup(limits) => {
                let Some(host) = &pool.host else { continue };
                crate::owner::record_cgroup_parents(&host.box_parents());
                let seq = pool.seq.fetch_add(1, Ordering::Relaxed);
                let name = format!(
                    "{}{}-s{seq}-{}",
                    crate::leftovers::CGROUP_PREFIX,
                    crate::owner::id(),
                    pool.started_ns
                );
                let made = host.create(&name, &limits);
                let mut st = lock(&pool.state);
                match made {
                    // Kept only if nobody changed the limits (or stopped us) meanwhile.
                    Ok(cg) if st.limits == Some(limits) && !pool.worker.stopping() => {
                        st.cgroups.push(cg)
                    }
                    Ok(cg) => {
                        drop(st);
                        let _ = cg.remove();
                    }
                    Err(_) => st.cgroups_failed = true,
                }
            }
            Job::Workspace => {
                let made = Workspace::temporary();
                let mut st = lock(&pool.state);
                match made {
                    Ok(ws) if !pool.worker.stopping() => st.workspaces.push(ws),
                    Ok(ws) => drop(ws),
                    Err(_) => st.workspaces_failed = true,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_for(spares: &Spares, want: impl Fn((usize, usize)) -> bool) {
        for _ in 0..500 {
            if want(spares.ready()) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!(
            "spares never reached the wanted count: {:?}",
            spares.ready()
        );
    }

    #[test]
    fn workspaces_are_fresh_used_once_and_removed() {
        let spares = Spares::new(None, 1);
        // Nothing is made before the first box asks (that starts the thread).
        assert!(spares.workspace().is_none());
        wait_for(&spares, |(_, w)| w == KEEP);
        let a = spares.workspace().expect("a spare workspace");
        let b = spares.workspace().expect("a second spare workspace");
        assert_ne!(a.path, b.path);
        for ws in [&a, &b] {
            let meta = std::fs::metadata(&ws.path).unwrap();
            assert!(meta.is_dir());
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
                0o700
            );
            assert_eq!(std::fs::read_dir(&ws.path).unwrap().count(), 0);
        }
        // The thread refills after a take.
        wait_for(&spares, |(_, w)| w == KEEP);
        let (pa, pb) = (a.path.clone(), b.path.clone());
        drop((a, b));
        assert!(
            !pa.exists() && !pb.exists(),
            "a used temporary workspace is deleted with it"
        );
        // The ones still spare go with the Spares.
        let spare_paths: Vec<PathBuf> = lock(&spares.pool.state)
            .workspaces
            .iter()
            .map(|w| w.path.clone())
            .collect();
        assert_eq!(spare_paths.len(), KEEP);
        drop(spares);
        for p in spare_paths {
            assert!(!p.exists(), "{} outlived its Spares", p.display());
        }
    }
}
