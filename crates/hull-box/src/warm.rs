//! The one warm-pool mechanism: what every pool of things made ahead of time shares, inside
//! hull-box (a template's namespace pool in `template.rs`, `spares.rs`, `ready.rs`) and above it
//! (the Sandbox layer's prewarmed runner boxes in `crates/hull`). Each pool keeps its stock
//! behind a mutex and one background thread, a [`Worker`]: started once, on first need, with
//! the forwarded signals (SIGINT, SIGTERM, SIGHUP: they belong to the thread watching a box)
//! blocked; it sleeps until woken (or a second passes) and ends when told to, and its owner
//! joins it. Every such mutex is taken with [`lock`], the crate's one lock-poison policy.
//!
//! Public so that the Sandbox layer's pool runs on the same mechanism rather than a copy of
//! it; the thread and signal handling it needs are hull-box's (`sys`), and a crate of its own
//! would only move them.

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
