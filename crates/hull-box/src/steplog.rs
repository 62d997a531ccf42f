//! The process-wide log of `HULL_TRACE_STEPS` (see `trace.rs`): named steps with their
//! CLOCK_MONOTONIC time, from any thread, printed in time order by [`flush`].

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Mutex;

use crate::sys;

/// The process-wide log: (when, what), in the order recorded.
static LOG: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
/// A front end prints the log itself ([`hold`]): teardowns leave it alone.
static HELD: AtomicBool = AtomicBool::new(false);

/// Whether this process traces: 0 not read yet, 1 off, 2 on.
static ON: AtomicU8 = AtomicU8::new(0);

/// Whether this process traces (`HULL_TRACE_STEPS` set, read once, or [`turn_on`] called).
pub fn on() -> bool {
    match ON.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var_os("HULL_TRACE_STEPS").is_some();
            // A turn_on() racing this read wins.
            let _ = ON.compare_exchange(0, 1 + u8::from(on), Ordering::Relaxed, Ordering::Relaxed);
            ON.load(Ordering::Relaxed) == 2
        }
        state => state == 2,
    }
}

/// Traces from now on, as if `HULL_TRACE_STEPS` were set (`hull -vv`).
pub fn turn_on() {
    ON.store(2, Ordering::Relaxed);
}

/// Records that `what` happens now (when tracing).
pub fn step(what: &str) {
    if on() {
        record(sys::monotonic_ns(), what.to_string());
    }
}

pub(crate) fn record(at: u64, what: String) {
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
