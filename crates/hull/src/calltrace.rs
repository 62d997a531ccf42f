//! `HULL_TRACE_CALLS=1`: a per-call trace of named steps and when each ended, printed to stderr
//! as one line when the call is done (`hull trace: kernel.run_code 0.412 ms: lock 0.003, ...`).
//! Off (and costing one load of a cached flag) unless the variable is set when the process
//! starts; `hull serve` and the SDKs print the same shape, so one call can be followed from the
//! SDK through the server into the Sandbox layer.

use std::sync::OnceLock;
use std::time::Instant;

/// Whether `HULL_TRACE_CALLS` is set (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("HULL_TRACE_CALLS").is_some_and(|v| v != "0"))
}

/// The steps of one call so far; prints them when dropped.
#[derive(Debug)]
pub struct CallTrace {
    what: &'static str,
    start: Instant,
    steps: Vec<(&'static str, Instant)>,
}

impl CallTrace {
    /// A trace of the call named `what`, or `None` when tracing is off.
    pub fn start(what: &'static str) -> Option<CallTrace> {
        enabled().then(|| CallTrace {
            what,
            start: Instant::now(),
            steps: Vec::with_capacity(8),
        })
    }

    /// Marks the end of the step `name`.
    pub fn step(&mut self, name: &'static str) {
        self.steps.push((name, Instant::now()));
    }

    /// The trace as one line: each step with the time since the call began, in ms.
    pub fn line(&self) -> String {
        let ms = |t: Instant| t.duration_since(self.start).as_secs_f64() * 1000.0;
        let total = self.steps.last().map_or(0.0, |&(_, t)| ms(t));
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|&(n, t)| format!("{n} {:.3}", ms(t)))
            .collect();
        format!(
            "hull trace: {} {total:.3} ms: {}",
            self.what,
            steps.join(", ")
        )
    }
}

impl Drop for CallTrace {
    fn drop(&mut self) {
        eprintln!("{}", self.line());
    }
}

/// Marks a step on a trace that may be off.
pub fn step(t: &mut Option<CallTrace>, name: &'static str) {
    if let Some(t) = t {
        t.step(name);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_trace_lists_its_steps_in_order_with_growing_times() {
        let mut t = super::CallTrace {
            what: "x.call",
            start: std::time::Instant::now(),
            steps: Vec::new(),
        };
        t.step("one");
        std::thread::sleep(std::time::Duration::from_millis(2));
        t.step("two");
        let line = t.line();
        assert!(line.starts_with("hull trace: x.call "), "{line}");
        let one = line.find("one ").unwrap();
        let two = line.find("two ").unwrap();
        assert!(one < two, "{line}");
        let last: f64 = line[two + 4..].parse().unwrap();
        assert!(last >= 2.0, "{line}");
        std::mem::forget(t);
    }
}
