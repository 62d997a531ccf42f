//! What the watch of one box saw, before anything is judged: the data between
//! [`crate::watch`] (which fills it in) and [`crate::verdict`] (which turns it into a result).

use crate::sys::Errno;

/// What the watch loop saw of one box.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Whether pid 1 has been reaped (else the teardown reaps it).
    pub(crate) exited: bool,
    /// The program's CPU time as pid 1 measured it (with the children it waited for).
    pub(crate) main_cpu_ms: u64,
    /// The program's wait status, as pid 1 reported it.
    pub(crate) status: Option<i32>,
    /// Pid 1's own wait status (what counts when the program's never came).
    pub(crate) pid1_status: i32,
    /// The box's CPU time from pid 1's rusage, or the program's when that is all we have.
    pub(crate) rusage_cpu_ms: u64,
    /// The box's CPU just before we killed it (see [`crate::cputime`]).
    pub(crate) killed_cpu_ms: u64,
    pub(crate) timed_out: bool,
    /// A forwarded signal (`crate::ending::FORWARDED`) the supervisor received.
    pub(crate) interrupted: Option<i32>,
    /// Killed because every box was to end (`Runtime::end_every_box`).
    pub(crate) ended: bool,
    /// A seccomp notification: (what to name in the fault's `syscall`, the reason).
    pub(crate) escape: Option<(String, String)>,
    pub(crate) exec_failed: Option<Errno>,
    pub(crate) stdout: Captured,
    pub(crate) stderr: Captured,
    pub(crate) duration_ms: u64,
    pub(crate) setup_us: u64,
}

/// One output stream: what was kept (up to the cap), and how much came.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub(crate) data: Vec<u8>,
    pub(crate) total: u64,
    pub(crate) dropped: u64,
    pub(crate) eof: bool,
}
