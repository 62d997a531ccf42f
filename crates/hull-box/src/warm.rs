//! The one warm-pool mechanism: what every pool of things made ahead of time shares, inside
//! hull-box (a template's namespace pool in `template.rs`, `spares.rs`, `ready.rs`) and above it
//! (the Sandbox layer's prewarmed runner boxes in `crates/hull`). Each pool keeps its stock
//! behind a mutex and one background thread, a [`Worker`]: started once, on first need, with
//! the forwarded signals (SIGINT, SIGTERM, SIGHUP: they belong to the thread watching a box)
//! blocked; it sleeps until woken (or a second passes) and ends when told to, and its owner
//! joins it. Every such mutex is taken with [`lock`], the crate's one lock-poison policy.
//!
//! What a Runtime keeps warm is chosen with [`WarmOptions`] (`Runtime::with_warm`) and
//! reported in [`WarmStats`] (`Runtime::warm_stats`).
//!
//! Public so that the Sandbox layer's pool runs on the same mechanism rather than a copy of
//! it; the thread and signal handling it needs are hull-box's (`sys`), and a crate of its own
//! would only move them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// Locks `m`, whether or not a panicked holder poisoned it: a pool's stock stays consistent
/// between statements, so what a panic left is as usable as before it.
pub use crate::poison::lock;
use crate::sys;

/// One background thread's start, wake-up and stop.
#[derive(Default)]
pub struct Worker {
    stop: AtomicBool,
    wake: Condvar,
    started: OnceLock<()>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Whether the thread was started and is told to stop (the handle and condition variable
/// carry nothing worth printing).
impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("started", &self.started.get().is_some())
            .field("stopping", &self.stopping())
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Starts the thread named `name` running what `body` returns, the first time only. If the
    /// thread cannot be made, nothing runs: the callers then make everything on their own path.
    pub fn start_once<F: FnOnce() + Send + 'static>(&self, name: &str, body: impl FnOnce() -> F) {
        self.started.get_or_init(|| {
            *lock(&self.thread) = sys::spawn_helper(name, &crate::ending::FORWARDED, body())
        });
    }

    /// Wakes the thread if it sleeps.
    pub fn wake(&self) {
        self.wake.notify_all();
    }

    /// Whether the thread is told to end.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleeps on `guard`'s mutex until woken or a second passes (poisoning ignored, as
    /// [`lock`] does).
    pub fn sleep<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        match self.wake.wait_timeout(guard, Duration::from_secs(1)) {
            Ok((g, _)) => g,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }

    /// Tells the thread to end and wakes it.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wake.notify_all();
    }

    /// Waits for the thread to end (after `stop`). Called on the thread itself (its owner was
    /// dropped there), it cannot wait for itself: the thread ends on its own once it sees
    /// `stop`.
    pub fn join(&self) {
        let handle = lock(&self.thread).take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

/// Which warm pools a [`crate::Runtime`] keeps ([`crate::Runtime::with_warm`]): things made ahead of the
/// boxes that use them, each for long-lived front ends only (a one-shot `hull run` would make
/// what it never uses). All off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WarmOptions {
    /// Build each distinct read-only skeleton once, as a template, and let boxes enter a locked
    /// copy of it instead of mounting its ~90 steps each (`template.rs`), with each template's
    /// pools of network and user namespaces.
    pub templates: bool,
    /// Make box cgroups and temporary workspaces ahead (`spares.rs`).
    pub spares: bool,
    /// Set whole boxes up ahead for the shape of the last box run, each waiting for its program
    /// (`ready.rs`). They enter templates, so this needs `templates`.
    pub ready: bool,
}

impl WarmOptions {
    /// Every warm pool: what `hull serve`, `hull mcp` (and so the SDKs) and `hull bench` keep.
    pub const ALL: WarmOptions = WarmOptions {
        templates: true,
        spares: true,
        ready: true,
    };
}

/// What the warm pools of a [`crate::Runtime`] ([`crate::Runtime::with_warm`]) have done and hold: all zero
/// and empty for a pool that is off. For tests and `hull bench`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WarmStats {
    /// Read-only skeletons built and kept.
    pub templates: usize,
    /// Boxes that entered a pooled network namespace.
    pub pooled_nets: u64,
    /// Boxes that entered a pooled user namespace.
    pub pooled_users: u64,
    /// Boxes that got a cgroup made ahead.
    pub spare_cgroups: u64,
    /// Boxes that got a temporary workspace made ahead.
    pub spare_workspaces: u64,
    /// The directories (cgroups, then workspaces) of the spares made ahead and not yet used;
    /// they are removed with the Runtime.
    pub spare_paths: Vec<PathBuf>,
    /// Boxes that ran in a box set up ahead.
    pub ready_used: u64,
    /// The pid 1s of the boxes set up ahead and waiting now (they end with the Runtime).
    pub ready_pids: Vec<libc::pid_t>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{mpsc, Arc};

    /// A pool's owner may be dropped on the pool's own thread (the Sandbox layer's thread holds
    /// its Sandbox while starting a box, and may hold the last reference): joining the thread
    /// from itself must leave it to end, not panic it (an abort in release builds).
    #[test]
    fn a_worker_stopped_and_joined_from_its_own_thread_ends_normally() {
        let w = Arc::new(Worker::default());
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        w.start_once("hull-test-self-join", || {
            let w = Arc::clone(&w);
            move || {
                // Only once start_once has stored the handle.
                let _ = go_rx.recv();
                w.stop();
                w.join();
                let _ = done_tx.send(());
            }
        });
        go_tx.send(()).expect("the thread waits");
        assert_eq!(
            done_rx.recv_timeout(Duration::from_secs(10)),
            Ok(()),
            "the worker's thread did not get past joining itself"
        );
    }
}
