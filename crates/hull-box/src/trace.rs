//! `HULL_TRACE_STEPS=1`: a timeline of named steps (CLOCK_MONOTONIC ns), printed to stderr
//! only once the measured work is over, so printing does not slow what it measures. The
//! supervisor's steps (and a front end's, through [`step`]) go into a process-wide log
//! (`steplog.rs`); the child stamps each of its plan's steps into a shared page made before the clone (it may not
//! allocate or print), copied into the log after the watch. A debugging aid; nothing else
//! reads it.

use crate::split::Steps;
use crate::steplog::record;
pub use crate::steplog::{flush, hold, on, step, turn_on};
use crate::sys::{self, SharedSlots};

/// Number of steps a trace records.
pub(crate) const TRACE_SLOTS: usize = 512;

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
