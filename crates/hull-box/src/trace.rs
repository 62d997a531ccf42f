//! `HULL_TRACE_STEPS=1`: the child stamps each step's start time (CLOCK_MONOTONIC ns) into a
//! shared page made before the clone (it may not allocate or print), and the supervisor prints
//! the timeline after the run. A debugging aid; nothing else reads it.

use crate::split::Steps;
use crate::sys::{self, SharedSlots};

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

    /// Prints when each step of `plan` started, relative to `start` (the clone).
    pub(crate) fn print(&self, start: u64, plan: &dyn Steps) {
        let mut prev = start;
        let mut i = 0;
        while let Some(s) = plan.step(i) {
            let t = self.0.get(i).unwrap_or(0);
            if t == 0 {
                break;
            }
            eprintln!(
                "hull trace: {:>7} us  +{:>5} us  before step {:>3}: {s}",
                (t - start) / 1000,
                (t.saturating_sub(prev)) / 1000,
                i + 1
            );
            prev = t;
            i += 1;
        }
    }
}

/// The supervisor's own milestones of one run, printed when tracing (relative to `t0`).
#[derive(Clone, Copy)]
pub(crate) struct Marks {
    pub(crate) t0: u64,
    pub(crate) on: bool,
}

impl Marks {
    pub(crate) fn new(on: bool) -> Marks {
        Marks {
            t0: sys::monotonic_ns(),
            on,
        }
    }

    pub(crate) fn mark(&self, what: &str) {
        if self.on {
            eprintln!(
                "hull trace: supervisor {:>7} us  {what}",
                (sys::monotonic_ns() - self.t0) / 1000
            );
        }
    }
}
