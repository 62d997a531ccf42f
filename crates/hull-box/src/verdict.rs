//! The verdict: what one box's [`Outcome`] and the evidence gathered after it (the cgroup's OOM
//! kills and peak memory, a full workspace) mean for the caller, as a [`RunResult`] with its exit
//! code and at most one fault. A pure function: every fault and its precedence is decided here,
//! and tested by table below.

use std::time::Duration;

use crate::outcome::Outcome;
use crate::result::{Fault, FaultType, RunResult, Stats};
use crate::size::Human;
use crate::spec::BoxSpec;

/// What the supervisor learned about a box after its watch, outside the box.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Evidence {
    /// OOM kills the box's cgroup counted.
    pub(crate) oom_kills: u64,
    /// The cgroup's peak memory, when the kernel keeps it.
    pub(crate) peak_memory: Option<u64>,
    /// The program failed and the workspace's file system has no free block or inode.
    pub(crate) workspace_full: bool,
    /// A SIGSYS death can only be the filter's doing: there is no seccomp listener to report
    /// the filter's kills (with one, a bare SIGSYS is the program's own, `kill -SYS $$`).
    pub(crate) sigsys_is_filter: bool,
}

/// Classifies `o` into exit code and fault (one fault, most telling first): an escape the
/// filter blocked, out of memory, the deadline, every box ended, a forwarded signal, an exec
/// failure, SIGKILL from outside, a full workspace, output past the cap.
pub(crate) fn verdict(spec: &BoxSpec, mut o: Outcome, ev: &Evidence) -> RunResult {
    let status = o.status.unwrap_or(o.pid1_status);
    let (exit_code, signal) = if libc::WIFEXITED(status) {
        (libc::WEXITSTATUS(status), None)
    } else if libc::WIFSIGNALED(status) {
        (128 + libc::WTERMSIG(status), Some(libc::WTERMSIG(status)))
    } else {
        (128 + libc::SIGKILL, Some(libc::SIGKILL))
    };
    let oom_kills = ev.oom_kills;
    let truncated = o.stdout.dropped > 0 || o.stderr.dropped > 0;
    let fault = if let Some((name, reason)) = o.escape.take() {
        Some(Fault {
            kind: FaultType::EscapeBlocked,
            reason,
            syscall: Some(name),
        })
    } else if ev.sigsys_is_filter && signal == Some(libc::SIGSYS) {
        Some(Fault {
            kind: FaultType::EscapeBlocked,
            reason: "killed by the seccomp filter (a foreign-architecture or x32 system call)"
                .into(),
            syscall: None,
        })
    } else if oom_kills > 0 && exit_code != 0 {
        Some(Fault {
            kind: FaultType::Oom,
            reason: format!(
                "out of memory: the kernel killed a process at the {} cap ({oom_kills} OOM kill{})",
                spec.memory
                    .map_or_else(|| "memory".to_string(), |m| Human(m).to_string()),
                if oom_kills == 1 { "" } else { "s" }
            ),
            syscall: None,
        })
    } else if o.timed_out {
        Some(Fault {
            kind: FaultType::Timeout,
            reason: format!(
                "the wall-clock deadline of {} passed; the whole box was killed",
                fmt_duration(spec.timeout)
            ),
            syscall: None,
        })
    } else if o.ended {
        Some(Fault {
            kind: FaultType::Killed,
            reason: "hull was told to end every box (its client went away); the box was killed"
                .into(),
            syscall: None,
        })
    } else if let Some(sig) = o.interrupted {
        Some(Fault {
            kind: FaultType::Killed,
            reason: format!("hull received {}; the box was killed", signal_name(sig)),
            syscall: None,
        })
    } else if let Some(e) = o.exec_failed {
        let prog = &spec.argv[0];
        let reason = if e.0 == libc::ENOENT {
            format!(
                "{prog}: not found in image `{}` (searched {})",
                spec.image_name,
                if prog.contains('/') {
                    prog.clone()
                } else {
                    "PATH".to_string()
                }
            )
        } else {
            format!(
                "{prog}: cannot be executed in image `{}`: {e}",
                spec.image_name
            )
        };
        Some(Fault {
            kind: FaultType::ExecFailed,
            reason,
            syscall: None,
        })
    } else if signal == Some(libc::SIGKILL) {
        Some(Fault {
            kind: FaultType::Killed,
            reason: "the program was killed by SIGKILL from outside the box".into(),
            syscall: None,
        })
    } else if ev.workspace_full {
        Some(Fault {
            kind: FaultType::WorkspaceFull,
            reason: "the workspace file system is full".into(),
            syscall: None,
        })
    } else if truncated {
        Some(Fault {
            kind: FaultType::OutputLimit,
            reason: format!(
                "output passed the {} cap per stream; {} discarded (the program kept running)",
                Human(spec.max_output),
                Human(o.stdout.dropped + o.stderr.dropped)
            ),
            syscall: None,
        })
    } else {
        None
    };
    // The shells' codes (and docker's): 127 for a program that is not there, 126 for one that
    // is there but cannot be executed (no permission, not an executable format, too many
    // arguments).
    let exit_code = match o.exec_failed {
        Some(e) if e.0 == libc::ENOENT => 127,
        Some(_) => 126,
        None => exit_code,
    };
    let (stdout, stdout_b64) = crate::result::stream_text(&o.stdout.data);
    let (stderr, stderr_b64) = crate::result::stream_text(&o.stderr.data);
    RunResult {
        stdout,
        stderr,
        stdout_b64,
        stderr_b64,
        exit_code,
        // A fault is never a success, output cut at the cap included: the caller did not get
        // what the program printed.
        success: exit_code == 0 && fault.is_none(),
        fault,
        truncated,
        duration_ms: o.duration_ms,
        stats: Stats {
            peak_memory: ev.peak_memory,
            cpu_ms: o.rusage_cpu_ms,
            setup_us: o.setup_us,
        },
        warnings: Vec::new(),
        dropped_bytes: o.stdout.dropped + o.stderr.dropped,
    }
}

/// A signal's name (`SIGTERM`), or `signal N` for one without a name here.
pub fn signal_name(sig: i32) -> String {
    let names = [
        (1, "SIGHUP"),
        (2, "SIGINT"),
        (3, "SIGQUIT"),
        (4, "SIGILL"),
        (6, "SIGABRT"),
        (7, "SIGBUS"),
        (8, "SIGFPE"),
        (9, "SIGKILL"),
        (11, "SIGSEGV"),
        (13, "SIGPIPE"),
        (14, "SIGALRM"),
        (15, "SIGTERM"),
        (31, "SIGSYS"),
    ];
    names
        .iter()
        .find(|(n, _)| *n == sig)
        .map_or_else(|| format!("signal {sig}"), |(_, s)| (*s).to_string())
}

fn fmt_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Captured;
    use crate::sys::Errno;

    /// A wait status for a normal exit with `code`.
    fn exited(code: i32) -> i32 {
        code << 8
    }

    /// A wait status for a death by `sig`.
    fn signaled(sig: i32) -> i32 {
        sig
    }

    fn spec() -> BoxSpec {
        let mut s = BoxSpec::new(vec!["python3".into(), "-c".into(), "pass".into()]);
        s.memory = Some(64 << 20);
        s.timeout = Duration::from_millis(1500);
        s.max_output = 1024;
        s
    }

    /// One row: what the watch saw and the evidence, and the expected exit code, success and
    /// fault (kind, and a piece of its reason).
    struct Row {
        name: &'static str,
        outcome: fn() -> Outcome,
        evidence: Evidence,
        exit: i32,
        success: bool,
        fault: Option<(FaultType, &'static str)>,
    }

    fn program(status: i32) -> Outcome {
        Outcome {
            status: Some(status),
            exited: true,
            ..Outcome::default()
        }
    }

    fn none() -> Evidence {
        Evidence::default()
    }

    fn oom() -> Evidence {
        Evidence {
            oom_kills: 2,
            ..Evidence::default()
        }
    }

    fn escape() -> Option<(String, String)> {
        Some((
            "unshare".into(),
            "the box called unshare (syscall 272)".into(),
        ))
    }

    fn truncated() -> Captured {
        Captured {
            data: b"kept".to_vec(),
            total: 4000,
            dropped: 3000,
            eof: true,
        }
    }

    fn rows() -> Vec<Row> {
        vec![
            Row {
                name: "a clean exit",
                outcome: || program(exited(0)),
                evidence: none(),
                exit: 0,
                success: true,
                fault: None,
            },
            Row {
                name: "a failing exit is no fault",
                outcome: || program(exited(3)),
                evidence: none(),
                exit: 3,
                success: false,
                fault: None,
            },
            Row {
                name: "the program's own crash is no fault",
                outcome: || program(signaled(libc::SIGSEGV)),
                evidence: none(),
                exit: 139,
                success: false,
                fault: None,
            },
            Row {
                name: "without the program's status, pid 1's counts",
                outcome: || Outcome {
                    pid1_status: exited(125),
                    timed_out: true,
                    ..Outcome::default()
                },
                evidence: none(),
                exit: 125,
                success: false,
                fault: Some((FaultType::Timeout, "deadline of 1.500s")),
            },
            Row {
                name: "an escape beats every other fault",
                outcome: || Outcome {
                    escape: escape(),
                    timed_out: true,
                    ended: true,
                    interrupted: Some(libc::SIGINT),
                    exec_failed: Some(Errno(libc::ENOENT)),
                    stdout: truncated(),
                    ..program(signaled(libc::SIGKILL))
                },
                evidence: Evidence {
                    workspace_full: true,
                    sigsys_is_filter: true,
                    ..oom()
                },
                exit: 127,
                success: false,
                fault: Some((FaultType::EscapeBlocked, "unshare")),
            },
            Row {
                name: "SIGSYS without a listener is the filter's",
                outcome: || program(signaled(libc::SIGSYS)),
                evidence: Evidence {
                    sigsys_is_filter: true,
                    ..oom()
                },
                exit: 128 + libc::SIGSYS,
                success: false,
                fault: Some((FaultType::EscapeBlocked, "foreign-architecture or x32")),
            },
            Row {
                name: "SIGSYS with a listener is the program's own",
                outcome: || program(signaled(libc::SIGSYS)),
                evidence: none(),
                exit: 128 + libc::SIGSYS,
                success: false,
                fault: None,
            },
            Row {
                name: "OOM kills with a failing exit",
                outcome: || Outcome {
                    timed_out: true,
                    interrupted: Some(libc::SIGTERM),
                    ..program(signaled(libc::SIGKILL))
                },
                evidence: Evidence {
                    workspace_full: true,
                    ..oom()
                },
                exit: 137,
                success: false,
                fault: Some((FaultType::Oom, "at the 64 MiB cap (2 OOM kills)")),
            },
            Row {
                name: "OOM kills of a child the program survived are no fault",
                outcome: || program(exited(0)),
                evidence: oom(),
                exit: 0,
                success: true,
                fault: None,
            },
            Row {
                name: "the deadline beats the end of every box and signals",
                outcome: || Outcome {
                    timed_out: true,
                    ended: true,
                    interrupted: Some(libc::SIGINT),
                    exec_failed: Some(Errno(libc::EACCES)),
                    ..program(signaled(libc::SIGKILL))
                },
                evidence: Evidence {
                    workspace_full: true,
                    ..none()
                },
                exit: 126,
                success: false,
                fault: Some((FaultType::Timeout, "wall-clock deadline")),
            },
            Row {
                name: "every box ended beats a forwarded signal",
                outcome: || Outcome {
                    ended: true,
                    interrupted: Some(libc::SIGINT),
                    ..program(signaled(libc::SIGKILL))
                },
                evidence: none(),
                exit: 137,
                success: false,
                fault: Some((FaultType::Killed, "told to end every box")),
            },
            Row {
                name: "a forwarded signal beats an exec failure",
                outcome: || Outcome {
                    interrupted: Some(libc::SIGHUP),
                    exec_failed: Some(Errno(libc::ENOENT)),
                    ..program(signaled(libc::SIGKILL))
                },
                evidence: none(),
                exit: 127,
                success: false,
                fault: Some((FaultType::Killed, "hull received SIGHUP")),
            },
            Row {
                name: "a program not found",
                outcome: || Outcome {
                    exec_failed: Some(Errno(libc::ENOENT)),
                    ..program(exited(127))
                },
                evidence: Evidence {
                    workspace_full: true,
                    ..none()
                },
                exit: 127,
                success: false,
                fault: Some((
                    FaultType::ExecFailed,
                    "python3: not found in image `host` (searched PATH)",
                )),
            },
            Row {
                name: "a program that cannot run",
                outcome: || Outcome {
                    exec_failed: Some(Errno(libc::EACCES)),
                    ..program(exited(127))
                },
                evidence: none(),
                exit: 126,
                success: false,
                fault: Some((FaultType::ExecFailed, "cannot be executed in image `host`")),
            },
            Row {
                name: "SIGKILL from outside beats a full workspace",
                outcome: || Outcome {
                    stdout: truncated(),
                    ..program(signaled(libc::SIGKILL))
                },
                evidence: Evidence {
                    workspace_full: true,
                    ..none()
                },
                exit: 137,
                success: false,
                fault: Some((FaultType::Killed, "SIGKILL from outside")),
            },
            Row {
                name: "a full workspace beats the output cap",
                outcome: || Outcome {
                    stderr: truncated(),
                    ..program(exited(1))
                },
                evidence: Evidence {
                    workspace_full: true,
                    ..none()
                },
                exit: 1,
                success: false,
                fault: Some((FaultType::WorkspaceFull, "file system is full")),
            },
            Row {
                name: "output past the cap keeps the exit code but is not a success",
                outcome: || Outcome {
                    stdout: truncated(),
                    stderr: truncated(),
                    ..program(exited(0))
                },
                evidence: none(),
                exit: 0,
                success: false,
                fault: Some((
                    FaultType::OutputLimit,
                    "1 KiB cap per stream; 5.9 KiB discarded",
                )),
            },
        ]
    }

    #[test]
    fn every_fault_and_its_precedence() {
        for row in rows() {
            let r = verdict(&spec(), (row.outcome)(), &row.evidence);
            assert_eq!(r.exit_code, row.exit, "{}: exit code", row.name);
            assert_eq!(r.success, row.success, "{}: success", row.name);
            match (&r.fault, row.fault) {
                (None, None) => {}
                (Some(f), Some((kind, reason))) => {
                    assert_eq!(f.kind, kind, "{}: {}", row.name, f.reason);
                    assert!(
                        f.reason.contains(reason),
                        "{}: reason {:?} lacks {reason:?}",
                        row.name,
                        f.reason
                    );
                }
                (got, want) => panic!("{}: fault {got:?}, expected {want:?}", row.name),
            }
        }
    }

    #[test]
    fn an_escape_names_its_syscall_and_nothing_else_does() {
        for row in rows() {
            let r = verdict(&spec(), (row.outcome)(), &row.evidence);
            let named = r.fault.as_ref().and_then(|f| f.syscall.clone());
            let from_listener = (row.outcome)().escape.is_some();
            assert_eq!(named.is_some(), from_listener, "{}", row.name);
        }
    }

    #[test]
    fn output_counts_and_stats_come_through() {
        let o = Outcome {
            stdout: truncated(),
            stderr: Captured {
                data: b"\xff\xfeerr".to_vec(),
                total: 4,
                dropped: 0,
                eof: true,
            },
            duration_ms: 42,
            rusage_cpu_ms: 7,
            setup_us: 900,
            ..program(exited(0))
        };
        let ev = Evidence {
            peak_memory: Some(123),
            ..none()
        };
        let r = verdict(&spec(), o, &ev);
        assert_eq!(r.stdout, "kept");
        assert_eq!(r.stderr, "\u{fffd}\u{fffd}err");
        assert!(r.truncated);
        assert_eq!(r.dropped_bytes, 3000);
        assert_eq!(r.duration_ms, 42);
        assert_eq!(
            (r.stats.peak_memory, r.stats.cpu_ms, r.stats.setup_us),
            (Some(123), 7, 900)
        );
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn a_whole_second_deadline_is_named_without_decimals() {
        let mut s = spec();
        s.timeout = Duration::from_secs(2);
        let o = Outcome {
            timed_out: true,
            ..program(signaled(libc::SIGKILL))
        };
        let r = verdict(&s, o, &none());
        let reason = r.fault.map(|f| f.reason).unwrap_or_default();
        assert!(reason.contains("deadline of 2s passed"), "{reason}");
    }

    #[test]
    fn a_stopped_status_counts_as_killed() {
        // Neither exited nor signaled (a stopped child's status): treated as SIGKILL.
        let r = verdict(&spec(), program(0x137f), &none());
        assert_eq!(r.exit_code, 137);
        assert_eq!(r.fault.map(|f| f.kind), Some(FaultType::Killed));
    }
}
