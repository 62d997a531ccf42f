//! What the background threads of a long-lived Runtime share (the namespace pool in
//! `template.rs`, `spares.rs`, `ready.rs`): each is started once, on first need, with the
//! forwarded signals blocked; it sleeps until woken (or a second passes) and ends when told to.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::poison::lock;
use crate::sys;

/// One background thread's start, wake-up and stop.
#[derive(Default)]
pub(crate) struct Worker {
    stop: AtomicBool,
    wake: Condvar,
    started: OnceLock<()>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Worker {
    /// Starts the thread named `name` running what `body` returns, the first time only. If the
    /// thread cannot be made, nothing runs: the callers' boxes then make everything themselves.
    pub(crate) fn start_once<F: FnOnce() + Send + 'static>(
        &self,
        name: &str,
        body: impl FnOnce() -> F,
    ) {
        self.started.get_or_init(|| {
            *lock(&self.thread) = sys::spawn_helper(name, &crate::ending::FORWARDED, body())
        });
    }

    /// Wakes the thread if it sleeps.
    pub(crate) fn wake(&self) {
        self.wake.notify_all();
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleeps on `guard`'s mutex until woken or a second passes (poisoning ignored, as
    /// [`lock`] does).
    pub(crate) fn sleep<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        match self.wake.wait_timeout(guard, Duration::from_secs(1)) {
            Ok((g, _)) => g,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }

    /// Tells the thread to end and wakes it.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wake.notify_all();
    }

    /// Waits for the thread to end (after `stop`).
    pub(crate) fn join(&self) {
        let handle = lock(&self.thread).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}
