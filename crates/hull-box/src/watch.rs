//! Watching a started box from outside until its result is known: one poll loop over its
//! channel, both output pipes (capped per stream; past the cap bytes are read and discarded,
//! the program keeps running), a pidfd of pid 1, the signalfd of the forwarded signals, the
//! seccomp listener and the Runtime's ending pipe. It owns the wall-clock deadline (SIGKILL to
//! pid 1 = the whole pid namespace) and produces an [`Outcome`], judged by `verdict.rs`.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::channel::{self, Recv};
use crate::error::BoxError;
use crate::launch::{Setup, Started};
use crate::outcome::{Captured, Outcome};
use crate::proto::Message;
use crate::spec::BoxSpec;
use crate::split::Steps;
use crate::sys::{self, Errno};

/// Which stream a chunk of output came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Receives output as it arrives (for streaming front ends). Must not block for long: the box's
/// pipes fill while it runs.
pub trait OutputSink {
    fn chunk(&mut self, stream: Stream, data: &[u8]);
}

/// A sink that drops everything (when only the captured result matters).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSink;

impl OutputSink for NoSink {
    fn chunk(&mut self, _: Stream, _: &[u8]) {}
}

/// How a run is watched.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Keep output in the result (up to --max-output per stream).
    pub capture: bool,
}

/// One box's watch.
pub(crate) struct Watch<'a> {
    /// Readable once every box is to end ([`crate::Runtime::end_every_box`]).
    pub(crate) ending: BorrowedFd<'a>,
    pub(crate) spec: &'a BoxSpec,
    pub(crate) opts: RunOptions,
    /// The plan the box's first process runs: a setup failure names its step.
    pub(crate) plan: &'a dyn Steps,
    /// `HULL_TRACE_STEPS` was set: report when the program's exit arrives.
    pub(crate) tracing: bool,
}

impl Watch<'_> {
    /// Watches `started` until the program's status and all its output are in (or pid 1 is
    /// gone); `sigfd` reports the forwarded signals.
    pub(crate) fn run(
        &self,
        started: Started,
        sigfd: &OwnedFd,
        sink: &mut dyn OutputSink,
    ) -> Result<Outcome, BoxError> {
        let Started {
            pid,
            channel,
            out,
            err,
            clock: start,
            setup,
        } = started;
        let pidfd = sys::pidfd_open(pid).map_err(|errno| BoxError::Sys {
            what: "open a pidfd for the box",
            errno,
        })?;
        let _ = sys::set_nonblocking(out.as_fd());
        let _ = sys::set_nonblocking(err.as_fd());
        let deadline = start + u64::try_from(self.spec.timeout.as_nanos()).unwrap_or(u64::MAX);
        let mut o = Outcome::default();
        let (mut ready, mut listener) = match setup {
            Setup::Done { listener, us } => {
                o.setup_us = us;
                (true, listener)
            }
            Setup::Running => (false, None),
        };
        let mut setup_error: Option<BoxError> = None;
        let mut sock_open = true;
        let mut killed = false;
        let mut exited = false;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // After pid 1 is gone every writer of the pipes is gone too; drain to EOF. Once the
            // program has exited and its output is complete, the result is known: pid 1 is
            // ending the box on its own, and the teardown reaps it (off the result's path).
            if o.stdout.eof && o.stderr.eof && ((exited && !sock_open) || o.status.is_some()) {
                break;
            }
            let mut fds: Vec<libc::pollfd> = Vec::with_capacity(7);
            let mut push = |fd: BorrowedFd<'_>, on: bool| {
                fds.push(libc::pollfd {
                    fd: if on { fd.as_raw_fd() } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                });
            };
            push(channel.fd(), sock_open);
            push(out.as_fd(), !o.stdout.eof);
            push(err.as_fd(), !o.stderr.eof);
            push(pidfd.as_fd(), !exited);
            push(sigfd.as_fd(), !exited);
            match &listener {
                Some(l) => push(l.as_fd(), !exited),
                None => push(channel.fd(), false),
            }
            push(self.ending, !killed);
            let now = sys::monotonic_ns();
            let timeout_ms = if exited {
                // Bounded drain: a pipe still open after the box died would be a kernel surprise.
                1000
            } else if now >= deadline {
                0
            } else {
                i32::try_from((deadline - now) / 1_000_000 + 1).unwrap_or(i32::MAX)
            };
            let n = sys::poll(&mut fds, timeout_ms).map_err(|errno| BoxError::Sys {
                what: "poll the box",
                errno,
            })?;
            if n == 0 && exited {
                break;
            }
            if !exited && sys::monotonic_ns() >= deadline && !killed {
                o.timed_out = true;
                killed = true;
                let _ = sys::kill(pid, libc::SIGKILL);
            }
            let ready_in =
                |i: usize| fds[i].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
            if ready_in(0) {
                match channel.recv()? {
                    Recv::Closed | Recv::Failed(_) => sock_open = false,
                    Recv::Message(m, fd) => match m {
                        Message::Ready => {
                            ready = true;
                            if self.tracing {
                                eprintln!(
                                    "hull trace: ready {:>7} us after clone",
                                    (sys::monotonic_ns() - start) / 1000
                                );
                            }
                            o.setup_us = (sys::monotonic_ns() - start) / 1000;
                            listener = fd;
                        }
                        Message::SetupFailed { step, errno } => {
                            setup_error = Some(channel::setup_error(self.plan, step, errno));
                        }
                        Message::ExecFailed { errno } => o.exec_failed = Some(Errno(errno)),
                        Message::MainExited { status, cpu_ms } => {
                            o.main_cpu_ms = u64::try_from(cpu_ms).unwrap_or(0);
                            o.duration_ms = (sys::monotonic_ns() - start) / 1_000_000;
                            if self.tracing {
                                eprintln!(
                                    "hull trace: program exited {:>7} us after clone",
                                    (sys::monotonic_ns() - start) / 1000
                                );
                            }
                            o.status = Some(status);
                        }
                        // A template's entry process sends Pid1, and id maps are settled, before
                        // the watch starts.
                        m @ (Message::Pid1 { .. } | Message::WantIdMaps | Message::IdsMapped) => {
                            return Err(channel::unexpected(
                                self.plan,
                                "Ready, SetupFailed, ExecFailed or MainExited",
                                m,
                            ));
                        }
                    },
                }
            }
            for (i, which) in [(1usize, Stream::Stdout), (2, Stream::Stderr)] {
                if ready_in(i) {
                    let (fd, cap) = if which == Stream::Stdout {
                        (&out, &mut o.stdout)
                    } else {
                        (&err, &mut o.stderr)
                    };
                    drain(
                        fd.as_fd(),
                        cap,
                        which,
                        &mut buf,
                        self.spec.max_output,
                        self.opts.capture,
                        sink,
                    );
                }
            }
            if ready_in(5) {
                if let Some(l) = &listener {
                    if let Ok(n) = hull_seccomp::recv_notification(l.as_fd()) {
                        if o.escape.is_none() {
                            let what = n.describe();
                            let reason = match n.syscall_name() {
                                Some(name) if what == name => format!("the box called {name} (syscall {}), an escape primitive; the box was killed", n.nr),
                                _ => format!("the box made {what}, which the filter refuses; the box was killed"),
                            };
                            o.escape = Some((what, reason));
                        }
                        if !killed {
                            killed = true;
                            let _ = sys::kill(pid, libc::SIGKILL);
                        }
                    } else {
                        // The listener reports POLLHUP once no filtered process remains.
                        listener = None;
                    }
                }
            }
            if ready_in(6) && !killed {
                o.ended = true;
                killed = true;
                let _ = sys::kill(pid, libc::SIGKILL);
            }
            if ready_in(4) {
                let mut si = [0u8; 128];
                if sys::read(sigfd.as_fd(), &mut si).is_ok() {
                    let signo = i32::from_ne_bytes([si[0], si[1], si[2], si[3]]);
                    o.interrupted = Some(signo);
                    if !killed {
                        killed = true;
                        let _ = sys::kill(pid, libc::SIGKILL);
                    }
                }
            }
            if ready_in(3) && !exited {
                if let Ok(Some(w)) = sys::wait4(pid, true) {
                    exited = true;
                    o.pid1_status = w.status;
                    let ru = &w.rusage;
                    let ms = |t: libc::timeval| {
                        u64::try_from(t.tv_sec).unwrap_or(0) * 1000
                            + u64::try_from(t.tv_usec).unwrap_or(0) / 1000
                    };
                    o.rusage_cpu_ms = ms(ru.ru_utime) + ms(ru.ru_stime);
                    if o.duration_ms == 0 {
                        o.duration_ms = (sys::monotonic_ns() - start) / 1_000_000;
                    }
                }
            }
        }
        o.exited = exited;
        if !exited {
            // Pid 1 is on its way out (it sent the program's status) or must go now; either way
            // SIGKILL makes sure, and kills the whole pid namespace with it.
            let _ = sys::kill(pid, libc::SIGKILL);
            if o.status.is_none() {
                if let Ok(Some(w)) = sys::wait4(pid, false) {
                    o.pid1_status = w.status;
                    o.exited = true;
                }
            }
        }
        if !o.exited || o.rusage_cpu_ms == 0 {
            o.rusage_cpu_ms = o.rusage_cpu_ms.max(o.main_cpu_ms);
        }
        if let Some(e) = setup_error {
            return Err(e);
        }
        if !ready
            && o.status.is_none()
            && o.exec_failed.is_none()
            && !o.timed_out
            && o.interrupted.is_none()
            && !o.ended
        {
            return Err(BoxError::SetupVanished(o.pid1_status));
        }
        Ok(o)
    }
}

/// Reads what `fd` has (at most 16 reads), keeping up to `max` bytes of the stream in `cap` and
/// handing the kept bytes to `sink`.
fn drain(
    fd: BorrowedFd<'_>,
    cap: &mut Captured,
    which: Stream,
    buf: &mut [u8],
    max: u64,
    capture: bool,
    sink: &mut dyn OutputSink,
) {
    // Bounded so one flooding stream cannot starve the deadline check.
    for _ in 0..16 {
        match sys::read(fd, buf) {
            Ok(0) => {
                cap.eof = true;
                return;
            }
            Ok(n) => {
                let room = usize::try_from(max.saturating_sub(cap.total)).unwrap_or(usize::MAX);
                let keep = n.min(room);
                if keep > 0 {
                    if capture {
                        cap.data.extend_from_slice(&buf[..keep]);
                    }
                    sink.chunk(which, &buf[..keep]);
                }
                cap.total += n as u64;
                cap.dropped += (n - keep) as u64;
            }
            Err(Errno(libc::EAGAIN)) => return,
            Err(_) => {
                cap.eof = true;
                return;
            }
        }
    }
}
