//! `HULL_TRACE_STEPS=1`: a timeline of named steps (CLOCK_MONOTONIC ns), printed to stderr
//! only once the measured work is over, so printing does not slow what it measures. The
//! supervisor's steps (and a front end's, through [`step`]) go into a process-wide log; the
//! child stamps each of its plan's steps into a shared page made before the clone (it may not
//! allocate or print), copied into the log after the watch. A debugging aid; nothing else
//! reads it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::split::Steps;
use crate::sys::{self, SharedSlots};

/// The process-wide log: (when, what), in the order recorded.
static LOG: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
/// A front end prints the log itself ([`hold`]): teardowns leave it alone.
static HELD: AtomicBool = AtomicBool::new(false);

/// Whether this process traces (read once: `HULL_TRACE_STEPS` set).
pub fn on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(wanted)
}

/// Records that `what` happens now (when tracing).
pub fn step(what: &str) {
    if on() {
        record(sys::monotonic_ns(), what.to_string());
    }
}

fn record(at: u64, what: String) {
    if let Ok(mut log) = LOG.lock() {
        log.push((at, what));
    }
}

/// The front end prints the log with [`flush`] when its work is done (a one-shot `hull run`,
/// at exit); until then a box's teardown does not print it.
pub fn hold() {
    HELD.store(true, Ordering::Relaxed);
}

/// Prints the log so far, in time order relative to its first entry, and empties it.
pub fn flush() {
    let mut log = match LOG.lock() {
        Ok(mut l) => std::mem::take(&mut *l),
        Err(_) => return,
    };
    log.sort_by_key(|(t, _)| *t);
    let Some(&(t0, _)) = log.first() else {
        return;
    };
    let mut prev = t0;
    for (t, what) in &log {
        eprintln!(
            "hull trace: {:>7} us  +{:>5} us  {what}",
            (t - t0) / 1000,
            (t - prev) / 1000
        );
        prev = *t;
    }
}

/// Prints the log unless a front end holds it (for a box's teardown).
pub(crate) fn flush_unless_held() {
    if on() && !HELD.load(Ordering::Relaxed) {
        flush();
    }
}

/// Number of steps a trace records.
pub(crate) const TRACE_SLOTS: usize = 512;

/// Whether `HULL_TRACE_STEPS` asks for traces.
pub(crate) fn wanted() -> bool {
    std::env::var_os("HULL_TRACE_STEPS").is_some()
}

/// The page a box's child stamps its steps into.
pub(crate) struct TraceMap(SharedSlots);

impl TraceMap {
    pub(crate) fn new() -> Option<TraceMap> {
        SharedSlots::new(TRACE_SLOTS).map(TraceMap)
    }

    /// What the child writes through (its copy of the same memory).
    pub(crate) fn slots(&self) -> &SharedSlots {
        &self.0
    }

    /// Logs when each step of `plan` started in the child.
    pub(crate) fn record(&self, plan: &dyn Steps) {
        let mut i = 0;
        while let Some(s) = plan.step(i) {
            let t = self.0.get(i).unwrap_or(0);
            if t == 0 {
                break;
            }
            record(t, format!("box: step {:>3}: {s}", i + 1));
            i += 1;
        }
    }
}

/// The supervisor's own milestones of one run, logged when tracing.
#[derive(Clone, Copy)]
pub(crate) struct Marks {
    pub(crate) on: bool,
}

impl Marks {
    pub(crate) fn new(on: bool) -> Marks {
        Marks { on }
    }

    pub(crate) fn mark(&self, what: &str) {
        if self.on {
            record(sys::monotonic_ns(), format!("supervisor: {what}"));
        }
    }
}
